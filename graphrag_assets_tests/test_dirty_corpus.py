"""Real dirt in a corpus costs at most the bad part of one document, never the index: every C0 control character,
NUL, lone surrogates escaped in JSON, raw line separators, a long line, odd Unicode, through every step that reads
user text (conversion, chunking, extraction replies that quote it, names, descriptions, reports, exports, the API)."""

import contextlib
import json
import shutil
from pathlib import Path

import networkx as nx
import pyarrow.parquet as pq
import pytest

from graphrag_assets_tests.corpora import C0_CONTROLS, dirty_corpus
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import Workspace, chat_resource, embedding_resource, materialization_metadata
from .test_msgraphrag import msgraphrag, query, settings
from .test_server import client_of, service_for

pytestmark = pytest.mark.slow
CORPUS = "dirty"


def indexed(root, offline: bool):
    workspace = Workspace(root)
    files = dirty_corpus(workspace.data / CORPUS, megabytes=0.6, long_line_mb=0.25)
    workspace.expected_documents = 13 + len(files) - 1  # the JSON lines file holds 13 rows
    workspace.offline = offline
    if offline:
        return workspace, workspace.materialize(CORPUS)
    with FakeOpenAIServer() as server:
        result = workspace.materialize(
            CORPUS,
            chat=chat_resource(server.base_url, workspace.cache),
            embeddings=embedding_resource(server.base_url, workspace.cache),
        )
    return workspace, result


@pytest.fixture(scope="module", params=["offline", "model"])
def dirty_index(request, tmp_path_factory):
    return indexed(tmp_path_factory.mktemp(request.param), request.param == "offline")


def test_a_dirty_corpus_indexes_whole_and_the_store_keeps_its_text(dirty_index):
    workspace, result = dirty_index
    assert result.success
    documents = workspace.sql("SELECT title, text FROM documents WHERE corpus = ?", CORPUS)
    assert len(documents) == workspace.expected_documents  # every JSON row and file: none skipped
    text = "".join(documents["text"])
    # The store holds what the documents said: every control character of the JSON rows, NUL included, and odd
    # Unicode; only lone surrogates, which UTF-8 cannot hold, became U+FFFD, and the documents step says so.
    assert all(c in text for c in C0_CONTROLS) and "\u2028" in text and "\U0001f469" in text
    assert "\ud800" not in text and "\ufffd" in text
    problems = materialization_metadata(result, "documents")["problems"]
    assert "lone surrogate(s) in its text replaced by U+FFFD" in problems
    assert "separators" in set(documents["title"])  # a raw U+2028 inside a JSON line did not cut it in two
    units = workspace.sql("SELECT max(n_tokens) AS longest FROM text_units WHERE corpus = ?", CORPUS)
    assert units["longest"][0] <= 600  # the long line was cut into units of the usual size


def test_exports_of_a_dirty_corpus_open_in_networkx_pyarrow_and_microsoft_graphrag(dirty_index, tmp_path):
    workspace, result = dirty_index
    entities = workspace.sql("SELECT title, description FROM entities WHERE corpus = ?", CORPUS)
    graph = nx.read_graphml(workspace.root / "exports" / CORPUS / "graph.graphml")
    assert graph.number_of_nodes() == len(entities)
    replaced = materialization_metadata(result, "graphml_export")["characters_replaced"]
    dirty = sum(sum(c in str(d) for c in C0_CONTROLS if c not in "\t\n\r") for d in entities["description"])
    assert (replaced > 0) == (dirty > 0)
    parquet = workspace.root / "exports" / CORPUS / "parquet"
    exported = pq.read_table(parquet / "documents.parquet").column("text").to_pylist()
    assert any("\x02" in text and "\x00" in text for text in exported)  # parquet holds them as they are
    for path in parquet.glob("*.parquet"):
        pq.read_table(path)
    if graph.number_of_nodes() and "community_reports.parquet" in {p.name for p in parquet.iterdir()}:
        with FakeOpenAIServer() as server:
            (tmp_path / "settings.yaml").write_text(settings(server, parquet))
            run = query(msgraphrag(), tmp_path, parquet, "--method", "global", "--community-level", "0")
        assert run.returncode == 0, run.stderr[-2000:]


def test_a_dirty_corpus_is_asked_through_the_json_and_openai_apis(dirty_index):
    workspace, result = dirty_index
    with FakeOpenAIServer() as server, contextlib.ExitStack() as stack:
        models = {}
        if not workspace.offline:  # asked with the models it was indexed with
            models = {
                "chat": chat_resource(server.base_url, workspace.cache).settings(),
                "embeddings": embedding_resource(server.base_url, workspace.cache).settings(),
            }
        client = stack.enter_context(client_of(service_for(workspace.database, **models)))
        for method in ("local", "basic", "global", "lazy"):
            reply = client.post(
                "/api/ask", json={"corpus": CORPUS, "question": "What did Row 3 say?", "method": method}
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["answer"] and (method != "basic" or reply.json()["sources"]), method
        streamed = client.post(
            "/v1/chat/completions",
            json={"model": f"{CORPUS}:basic", "stream": True, "messages": [{"role": "user", "content": "Ka ren?"}]},
        )
        assert streamed.status_code == 200
        chunks = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert chunks[-1] == "[DONE]" and all(json.loads(chunk) for chunk in chunks[:-1])


PYTHON_DOC = Path("/usr/share/doc/python3.11/html")  # Debian's python3.11-doc, which bin/test installs as root


def test_real_prose_from_debians_python_docs_indexes_offline_and_answers_from_the_right_page(tmp_path):
    """The tutorial and the how-to guides of Python's own documentation (about 3 MB of HTML, 37 pages of varied
    technical prose), indexed offline with the default settings: a fact said on one page is found on that page."""
    if not (PYTHON_DOC / "tutorial" / "controlflow.html").exists():
        pytest.skip("Debian's python3.11-doc is not installed (bin/test installs it when run as root with apt-get)")
    workspace = Workspace(tmp_path)
    for part in ("tutorial", "howto"):
        shutil.copytree(PYTHON_DOC / part, workspace.data / "python-doc" / part)
    assert workspace.materialize("python-doc").success
    pages = workspace.sql("SELECT count(*) AS n FROM documents WHERE corpus = 'python-doc'")["n"][0]
    assert pages == len(list((workspace.data / "python-doc").rglob("*.html")))  # every page read
    service = service_for(workspace.database)
    with client_of(service) as client:
        question = "What does the break statement do in a for or while loop?"
        reply = client.post("/api/ask", json={"corpus": "python-doc", "question": question, "method": "basic"})
    assert reply.status_code == 200, reply.text
    documents = {source.get("document") for source in reply.json()["sources"]}
    assert "controlflow.html" in documents, documents  # the tutorial page on control flow
