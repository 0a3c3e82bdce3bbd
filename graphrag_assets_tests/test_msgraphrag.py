"""The parquet export read by Microsoft GraphRAG 3.x's own query engine, in a virtual environment of its own.

graphrag 3.x brings dependencies this project does not share (litellm, lancedb, ...), so the test installs it
once (seconds with uv, 1.3 GB) into a virtual environment in the user's cache folder, never into the checkout:
$GRAPHRAG_ASSETS_TEST_CACHE, else $XDG_CACHE_HOME/graphrag-assets, else ~/.cache/graphrag-assets. It then runs
its `graphrag query` command against the export, with the test model server as its endpoint.
"""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from graphrag_assets.method.exports import GRAPHRAG_SCHEMAS
from graphrag_assets_tests.model_server import _REPORT_ROW, FakeOpenAIServer

from .conftest import SAMPLE_CORPUS, TOOL_CACHE, table

MSGRAPHRAG_VERSION = "3.3.0"
VENV = TOOL_CACHE / f"msgraphrag-{MSGRAPHRAG_VERSION}-venv"
QUESTION = "What are the main themes of the story?"


def msgraphrag() -> Path:
    command = VENV / "bin" / "graphrag"
    if not command.exists():
        VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        python = str(VENV / "bin" / "python")
        uv = Path(sys.executable).with_name("uv")  # bin/install puts it beside our Python: seconds, not minutes
        installer = [str(uv), "pip", "install", "--python", python] if uv.exists() else [python, "-m", "pip", "install"]
        subprocess.run([*installer, "-q", f"graphrag=={MSGRAPHRAG_VERSION}"], check=True)
    return command


SETTINGS = """
completion_models:
  default_completion_model: {model}
embedding_models:
  default_embedding_model: {model}
output_storage:
  type: file
  base_dir: output
vector_store:
  type: lancedb
  db_uri: {vectors}
  vector_size: {dimensions}
"""


def settings(server: FakeOpenAIServer, export: Path) -> str:
    """Its settings.yaml: the chat and the embedding model are both the test server; vectors from our export."""
    model = f"{{model_provider: openai, model: gpt-4.1, api_base: '{server.base_url}', api_key: not-a-key}}"
    return SETTINGS.format(model=model, vectors=export / "lancedb", dimensions=server.embedding_dimensions)


def query(graphrag: Path, root: Path, export: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(graphrag), "query", "--root", str(root), "--data", str(export), *arguments, QUESTION],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},  # litellm would fetch its price list
    )


def export_folder(workspace) -> Path:
    return workspace.root / "exports" / SAMPLE_CORPUS / "parquet"


def test_the_export_has_microsoft_graphrags_columns_and_types_first(llm_index):
    workspace = llm_index[0]
    for name, schema in GRAPHRAG_SCHEMAS.items():
        written = pq.read_schema(export_folder(workspace) / f"{name}.parquet")
        assert written.names[: len(schema)] == schema.names, name
        assert all(written.field(f.name).type == f.type for f in schema), name
        assert not any(str(field.type) == "null" for field in written), name
    communities = pq.read_table(export_folder(workspace) / "communities.parquet").to_pandas()
    ours = table(workspace, "communities")
    # Its hierarchy has no carried-down copies, and every child it names is a community it has.
    assert len(communities) == (ours["carried_from"] < 0).sum()
    assert set(communities["children"].explode().dropna()) <= set(communities["community"])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the install, then a `graphrag query` per level, each minutes on a loaded machine
def test_microsoft_graphrag_answers_global_questions_from_the_export(llm_index, tmp_path):
    workspace = llm_index[0]
    graphrag = msgraphrag()
    communities = table(workspace, "communities")
    export = export_folder(workspace)
    with FakeOpenAIServer() as server:
        (tmp_path / "settings.yaml").write_text(settings(server, export))
        for level in (0, 1):
            before = len(server.served)
            run = query(graphrag, tmp_path, export, "--method", "global", "--community-level", str(level))
            assert run.returncode == 0, run.stderr[-2000:]
            served = server.served[before:]
            read = {int(n) for s in served if s.kind == "ms_map" for n, _ in _REPORT_ROW.findall(s.prompt)}
            # Its roll-up groups by community title, which is unique per community, so at level L it reads
            # every report at L or above: all the communities Leiden made down to L, none of our copies.
            made = communities[(communities["carried_from"] < 0) & (communities["level"] <= level)]
            expected = set(made["community"])
            assert read == expected
            assert f"merged from {len(expected)} analyst reports" in run.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_microsoft_graphrag_answers_local_questions_from_the_exported_vectors(llm_index, tmp_path):
    workspace = llm_index[0]
    export = export_folder(workspace)
    with FakeOpenAIServer() as server:
        (tmp_path / "settings.yaml").write_text(settings(server, export))
        run = query(msgraphrag(), tmp_path, export, "--method", "local", "--community-level", "1")
        assert run.returncode == 0, run.stderr[-2000:]
        answered = [s for s in server.served if s.kind == "ms_answer"]
        assert len(answered) == 1 and server.count("embed") >= 1  # the question was embedded, then answered
    # Its context holds entities it found by vector search in our LanceDB table, and their source texts.
    titles = set(table(workspace, "entities")["title"])
    context = answered[0].prompt
    assert "-----Entities-----" in context and "-----Sources-----" in context
    assert sum(f"|{title}|" in context for title in titles) >= 5
