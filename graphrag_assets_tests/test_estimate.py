"""The estimate of an index, made with no model request, against what the index then asks of the test server."""

import json

import duckdb
import pytest

from graphrag_assets.assets.estimate import estimate_corpus
from graphrag_assets.resources import CorporaResource
from graphrag_assets_tests.corpora import meeting_transcripts, short_notes
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import Workspace, chat_resource, embedding_resource

# Corpora of shapes the estimate's rates were not measured on (those were a novella and contracts).
SHAPES = {"transcripts": lambda folder: meeting_transcripts(folder, 4), "notes": lambda folder: short_notes(folder, 60)}


def spent(workspace: Workspace, corpus: str) -> tuple[int, int]:
    """Requests and prompt tokens (chat and embeddings) the index's steps sent, from the store's model_usage."""
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        return conn.execute(
            "SELECT sum(requests), sum(prompt_tokens) FROM model_usage WHERE corpus = ?", [corpus]
        ).fetchone()


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("method", ["standard", "fast", "lazy"])
def test_the_estimate_is_within_a_quarter_of_the_run_and_knows_what_is_cached(tmp_path, shape, method):
    workspace = Workspace(tmp_path)
    SHAPES[shape](workspace.data / shape)
    with FakeOpenAIServer() as server:
        chat = chat_resource(server.base_url, workspace.cache)
        embeddings = embedding_resource(server.base_url, workspace.cache)
        corpora = CorporaResource(root=str(workspace.data))
        ops = {"entity_graph": {"config": {"method": method}}}
        before = estimate_corpus(corpora, shape, chat, embeddings, ops)["methods"][method]
        asked = server.count()
        result = workspace.materialize(shape, chat=chat, embeddings=embeddings, run_config={"ops": ops})
        assert result.success
        requests, prompt_tokens = spent(workspace, shape)
        # Again, with every reply cached: what is left costs next to nothing.
        after = estimate_corpus(corpora, shape, chat, embeddings, ops)["methods"][method]
    assert asked == 0  # the estimate sent nothing
    # Within a quarter, or three requests where there are only a dozen (a fast index of a few notes)
    assert abs(before["requests"] - requests) <= max(0.25 * requests, 3), (before, requests)
    assert before["prompt_tokens"] == pytest.approx(prompt_tokens, rel=0.25), (before, prompt_tokens)
    assert after["requests"] < before["requests"] / 10, after
    if method != "lazy":  # lazy sends no chat request to be cached
        assert after["cached_requests"] >= (before["requests"] - before["embedding_requests"]) / 2, after


@pytest.mark.slow
def test_the_cli_estimates_every_method_as_one_json_object_without_a_request(tmp_path):
    from .test_cli import Cli

    short_notes(tmp_path / "data" / "notes", 12)
    with FakeOpenAIServer() as server:
        cli = Cli(tmp_path, {"GRAPHRAG_API_BASE": server.base_url, "GRAPHRAG_RPM": "60", "GRAPHRAG_PRICES": ""})
        done = cli.run("index", "--corpus", "notes", "--estimate", "--json")
        asked = server.count()
    assert done.returncode == 0, done.stderr
    assert asked == 0 and cli.runs() == 0  # no request, no run
    found = json.loads(done.stdout)
    assert found["corpus"] == "notes" and found["model"] == "gpt-4o-mini"
    assert set(found["methods"]) == {"standard", "fast", "lazy", "standard_batch"}
    standard, batch = found["methods"]["standard"], found["methods"]["standard_batch"]
    assert {"requests", "prompt_tokens", "completion_tokens", "cost_usd", "minutes"} <= set(standard)
    assert standard["requests"] > 2 * 12  # extraction and claims, with a gleaning round each, per note
    assert standard["minutes"] == pytest.approx(standard["requests"] / 60, abs=0.2)  # at 60 requests a minute
    assert 0 < batch["cost_usd"] < standard["cost_usd"] and batch["minutes"] is None


def test_the_estimate_is_an_asset_to_materialize_before_the_index(tmp_path):
    import dagster as dg

    from graphrag_assets.assets.estimate import index_estimate

    from .conftest import materialization_metadata

    workspace = Workspace(tmp_path)
    short_notes(workspace.data / "notes", 6)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", ["notes"])
    resources = workspace.resources()
    result = dg.materialize(
        [index_estimate],
        partition_key="notes",
        instance=instance,
        resources={name: resources[name] for name in ("corpora", "chat", "embeddings")},
    )
    metadata = materialization_metadata(result, "index_estimate")
    assert "standard + batch" in metadata["estimate"] and metadata["text_units"] == 6
    assert metadata["estimate_json"]["methods"]["standard"]["requests"] == metadata["standard_requests"] > 0
