"""The sample's index and answers stay what they were: a refactor that changes no behaviour changes no digest here.

`golden/sample.json` holds, for the offline index and the index built against the test model server, a digest of
every output table and of each query method's answer and sources. A change that means to alter the index or the
answers rewrites it with `GRAPHRAG_WRITE_GOLDEN=1 .venv/bin/python -m pytest graphrag_assets_tests/test_golden.py`,
and the diff of that file is part of the change's review.

Vectors and layout coordinates (node2vec, UMAP, SVD) are left out of the digests: their last digits depend on the
machine's BLAS and threads. The answers of the methods that rank by vector stand for them.
"""

import hashlib
import json
import math
import os
from pathlib import Path

import duckdb
import pytest

from graphrag_assets.answers.asking import Question
from graphrag_assets.answers.records import AnswerJournal
from graphrag_assets.answers.service import AnswerService
from graphrag_assets.method.schema import OUTPUT_TABLES
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import SAMPLE_CORPUS, chat_resource, embedding_resource

GOLDEN = Path(__file__).parent / "golden" / "sample.json"
QUESTION = "What does Scrooge learn from the ghosts about Christmas?"
METHODS = ("global", "local", "drift", "basic", "lazy", "question_generation")
# Columns whose values come from floating-point libraries rather than from the method's own arithmetic, and the
# keyword index's name for the data versions it was built from (those of tables with such scores among them)
MACHINE_DEPENDENT = {"embedding", "components", "idf", "x", "y", "built_from"}


def _canonical(value):
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _digest(rows: list) -> str:
    lines = sorted(json.dumps(_canonical(row), sort_keys=True, default=str) for row in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def table_digests(database: Path) -> dict[str, dict]:
    found = {}
    with duckdb.connect(str(database), read_only=True) as conn:
        for table, columns in OUTPUT_TABLES.items():
            kept = [c for c in columns if c not in MACHINE_DEPENDENT and c != "corpus"]
            select = ", ".join(f'"{c}"' for c in kept)
            rows = conn.execute(f'SELECT {select} FROM "{table}" WHERE corpus = ?', [SAMPLE_CORPUS]).fetchall()
            found[table] = {"rows": len(rows), "sha256": _digest([list(row) for row in rows])}
    return found


def answer_digests(workspace, chat=None, embeddings=None) -> dict[str, dict]:
    service = AnswerService(
        str(workspace.database),
        data_path=None,
        vector_index_dir=str(workspace.root / "vector-index"),
        journal=AnswerJournal(workspace.root / "golden-answers.sqlite"),
        chat=chat.settings() if chat else None,
        embeddings=embeddings.settings() if embeddings else None,
    )
    found = {}
    for method in METHODS:
        given = service.ask(
            Question(corpus=SAMPLE_CORPUS, text=QUESTION, method=method, level=0 if method == "global" else None)
        )
        sources = [[source["kind"], str(source["id"])] for source in given.sources]
        found[method] = {
            "sha256": _digest([given.text, *sources]),
            "sources": len(sources),
            "begins": given.text[:80],
        }
    return found


@pytest.fixture(scope="module")
def digests(offline_index, llm_index):
    offline_workspace = offline_index[0]
    llm_workspace = llm_index[0]
    with FakeOpenAIServer() as server:
        llm_answers = answer_digests(
            llm_workspace,
            chat_resource(server.base_url, llm_workspace.cache),
            embedding_resource(server.base_url, llm_workspace.cache),
        )
    return {
        "offline": {"tables": table_digests(offline_workspace.database), "answers": answer_digests(offline_workspace)},
        "model": {"tables": table_digests(llm_workspace.database), "answers": llm_answers},
    }


def test_the_sample_index_and_its_answers_are_what_they_were(digests):
    if os.getenv("GRAPHRAG_WRITE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(digests, indent=2, ensure_ascii=False) + "\n")
    expected = json.loads(GOLDEN.read_text())
    changed = [
        f"{engine} {kind} {name}: {expected[engine][kind].get(name)} -> {found}"
        for engine in expected
        for kind in ("tables", "answers")
        for name, found in digests[engine][kind].items()
        if expected[engine][kind].get(name) != found
    ]
    assert not changed, "the sample's index or answers changed:\n" + "\n".join(changed)
