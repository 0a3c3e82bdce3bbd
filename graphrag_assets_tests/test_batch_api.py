"""Indexing through the Batch API: the same index as one request at a time, at the batch price, resumable."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pandas as pd
import pytest

from graphrag_assets.store.batch_ledger import recorded_batches
from graphrag_assets_tests.model_server import REFUSAL, BatchFaults, FakeOpenAIServer, Faults

from .conftest import (
    SAMPLE_CORPUS,
    Workspace,
    chat_resource,
    embedding_resource,
    materialization_metadata,
    open_instance,
    table,
)

INDEX_TABLES = ("entities", "relationships", "covariates", "community_reports", "text_embeddings")
GRAPH = ["entities", "relationships"]
# Quick rounds for tests: a batch closes after 0.2 s without a new request and is checked every 0.05 s at first.
FAST_BATCHES = {"batch_api": True, "batch_poll_seconds": 0.05, "batch_min_requests": 5}


def batch_resources(server: FakeOpenAIServer, workspace: Workspace, **chat_settings):
    return {
        "chat": chat_resource(server.base_url, workspace.cache, **{**FAST_BATCHES, **chat_settings}),
        "embeddings": embedding_resource(server.base_url, workspace.cache, **FAST_BATCHES),
    }


def sample(tmp_path) -> Workspace:
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    return workspace


def input_lines(server: FakeOpenAIServer) -> Counter:
    """How many batches each request (custom id) was submitted in."""
    ids = Counter()
    for batch in server.batches.values():
        for line in server.files[batch["input_file_id"]].splitlines():
            ids[json.loads(line)["custom_id"]] += 1
    return ids


def batches_of(workspace: Workspace) -> list[dict]:
    import duckdb

    with duckdb.connect(str(workspace.database)) as conn:
        return recorded_batches(conn, SAMPLE_CORPUS)


@pytest.mark.slow
def test_a_batch_index_equals_the_synchronous_one_at_the_batch_price(llm_index, tmp_path):
    clean, _, clean_server = llm_index
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    with FakeOpenAIServer(batch_seconds=0.2) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS, **batch_resources(server, workspace, prompt_price_per_million=1.0)
        )
        asked = Counter(s.via for s in server.served if s.kind != "probe")
        # A question afterwards is answered at once: queries never wait for a batch.
        before = len(server.batches)
        workspace.ask(
            SAMPLE_CORPUS,
            "global_search",
            {"question": "What happens to Scrooge?"},
            **batch_resources(server, workspace),
        )
        assert len(server.batches) == before
    for name in INDEX_TABLES:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))
    assert set(input_lines(server).values()) == {1}  # no request went out in two batches
    recorded = batches_of(workspace)
    assert len(recorded) == len(server.batches) and {b["status"] for b in recorded} == {"completed"}
    assert all(b["consumed"] and b["step"] for b in recorded)
    entities = materialization_metadata(result, "entities")
    assert entities["batches"] >= 2 and entities["batch_calls"] > 0.9 * entities["model_calls"]
    # Nine in ten tokens at half the list price (a prompt token costs 1 per million here)
    assert entities["estimated_cost_usd"] < 0.56 * entities["prompt_tokens"] / 1e6
    assert asked["batch"] > 10 * asked["sync"], asked
    print(f"batches: {len(server.batches)}, requests {dict(asked)}")


@pytest.mark.slow
def test_failed_expired_and_invalid_lines_are_asked_again_and_the_graph_is_the_same(llm_index, tmp_path):
    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    faults = BatchFaults(failed_line_every=5, expire_batches=1)
    with FakeOpenAIServer(Faults(malformed_every=7), batch_seconds=0.1, batch_faults=faults) as server:
        result = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))
    metadata = materialization_metadata(result, "entities")
    assert metadata["batch_lines_asked_again"] > 0 and metadata["invalid_replies"] > 0
    assert metadata["failed_text_units"] == 0
    assert {"expired", "completed"} <= {b["status"] for b in server.batches.values()}
    # A line that failed in two batches was sent on its own: no request is in more than two batches.
    assert max(input_lines(server).values()) == 2


@pytest.mark.parametrize(
    "faults,status",
    [(BatchFaults(reject_batches=1), "failed"), (BatchFaults(lose_batches=1), "lost")],
    ids=["rejected", "lost"],
)
@pytest.mark.slow
def test_a_batch_that_fails_validation_or_is_lost_is_not_waited_on_forever(llm_index, tmp_path, faults, status):
    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    with FakeOpenAIServer(batch_seconds=0.1, batch_faults=faults) as server:
        workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
        sent_alone = sum(s.via == "sync" and s.kind == "extract" for s in server.served)
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))
    first = batches_of(workspace)[-1]
    assert first["status"] == status and first["consumed"]
    if status == "failed":  # a batch the endpoint refused is sent one request at a time, not as another batch
        assert sent_alone == first["requests"]
    else:  # a batch the endpoint forgot is submitted again
        assert sent_alone == 0 and max(input_lines(server).values()) == 2


@pytest.mark.slow
def test_a_step_stopped_while_waiting_waits_for_its_batch_again_and_submits_nothing_twice(llm_index, tmp_path):
    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    # The batch stays in progress until the first run has stopped: the deadline only has to outlast the gathering
    # and the upload (a 1.5 s deadline against a 4 s batch failed on a loaded machine, before anything was sent).
    with FakeOpenAIServer(batch_seconds=3600.0) as server:
        stopped = workspace.materialize(
            SAMPLE_CORPUS,
            selection=GRAPH,
            raise_on_error=False,
            **batch_resources(server, workspace, step_deadline_seconds=6.0),
        )
        failure = stopped.get_step_failure_events()[0].step_failure_data.user_failure_data.description
        assert "a re-run waits for them again" in failure
        recorded = batches_of(workspace)
        assert len(recorded) == 1 and not recorded[0]["consumed"] and server.uploads == 1

        server.batch_seconds = 0.0  # the endpoint finishes the batch while no run waits for it
        resumed = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
    assert materialization_metadata(resumed, "entities")["batches_waited_for_again"] == 1
    assert set(input_lines(server).values()) == {1}  # every request was submitted once, over both runs
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))


@pytest.mark.slow
def test_a_run_killed_while_waiting_on_a_batch_is_resumed_without_submitting_again(llm_index, tmp_path):
    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    with FakeOpenAIServer(batch_seconds=3.0) as server:
        env = {
            **os.environ,
            **workspace.environment(server.base_url, DAGSTER_HOME=str(home), GRAPHRAG_BATCH_API="true"),
        }
        with open_instance(home) as instance:
            instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
        command = [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "graphrag_assets.definitions"]
        run = subprocess.Popen(
            [*command, "--select", ",".join(GRAPH), "--partition", SAMPLE_CORPUS],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while not server.batch_checks:  # checked once: recorded in DuckDB, now waiting
            assert run.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        assert server.uploads == 1 and all(b["status"] == "in_progress" for b in server.batches.values())

        resumed = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
    assert materialization_metadata(resumed, "entities")["batches_waited_for_again"] == 1
    assert set(input_lines(server).values()) == {1}
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))


@pytest.mark.slow
def test_azure_openai_batches_use_its_paths_api_version_and_deployment(llm_index, tmp_path):
    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    with FakeOpenAIServer(
        api_key="azure-key", azure_deployments=frozenset({"gpt-4o-mini"}), batch_seconds=0.1
    ) as server:
        endpoint = server.base_url.removesuffix("/v1")
        chat = chat_resource(endpoint, workspace.cache, api_version="2024-10-21", api_key="azure-key", **FAST_BATCHES)
        result = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, chat=chat)
    assert {b["endpoint"] for b in server.batches.values()} == {"/chat/completions"}
    assert materialization_metadata(result, "entities")["batch_calls"] > 0
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))


def test_an_endpoint_without_a_batch_api_is_one_clear_error(tmp_path, caplog):
    import gc

    workspace = sample(tmp_path)
    with FakeOpenAIServer(batch_api=False) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS, selection=GRAPH, raise_on_error=False, **batch_resources(server, workspace)
        )
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data.description
    assert "has no Batch API (HTTP 404 when asked to upload a batch file)" in failure
    assert "set batch_api to false" in failure
    gc.collect()  # an asyncio task whose exception nobody retrieved says so when it is collected
    assert "Task exception was never retrieved" not in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("resource,tag,batched", [(False, "true", True), (True, "false", False)])
def test_a_run_tag_chooses_batch_mode_for_the_run(tmp_path, resource, tag, batched):
    workspace = sample(tmp_path)
    with FakeOpenAIServer(batch_seconds=0.1) as server:
        resources = batch_resources(server, workspace, batch_api=resource)
        workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, tags={"graphrag/batch_api": tag}, **resources)
    assert bool(server.batches) == batched
    assert any(s.via == "batch" for s in server.served) == batched


def test_a_run_tag_that_is_not_true_or_false_fails_the_step_in_one_line_and_sends_nothing(tmp_path):
    workspace = sample(tmp_path)
    with FakeOpenAIServer() as server:
        resources = batch_resources(server, workspace, batch_api=False)
        result = workspace.materialize(
            SAMPLE_CORPUS, selection=GRAPH, tags={"graphrag/batch_api": "maybe"}, raise_on_error=False, **resources
        )
        sent = server.count()
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data.description
    assert failure == "the run's tag graphrag/batch_api='maybe' is not true or false"
    assert sent == 0


@pytest.mark.slow
def test_batch_and_synchronous_runs_share_one_response_cache(tmp_path):
    workspace = sample(tmp_path)
    with FakeOpenAIServer(batch_seconds=0.1) as server:
        by_batch = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
        paid = sum(s.via == "batch" for s in server.served)
        again = workspace.materialize(
            SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace, batch_api=False)
        )
        assert sum(s.via == "batch" for s in server.served) == paid and len(server.batches) > 0
    first, second = (materialization_metadata(r, "entities") for r in (by_batch, again))
    assert second["model_calls"] == 0 and second["cache_hits"] == first["model_calls"] + first["cache_hits"] - 1
    # ... and the other way round: what a synchronous run paid for is never put in a batch
    (tmp_path / "other").mkdir()
    other = sample(tmp_path / "other")
    with FakeOpenAIServer(batch_seconds=0.1) as server:
        other.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, other, batch_api=False))
        other.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, other))
        assert not server.batches


@pytest.mark.slow
def test_a_step_that_dies_before_caching_a_batch_s_replies_reads_the_batch_again_and_pays_once(
    llm_index, tmp_path, monkeypatch
):
    """The batch is done and its output read, but the step dies before its replies are checked and cached: the batch
    must not count as consumed, or the next run pays for every request of it again."""
    import diskcache

    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    with FakeOpenAIServer(batch_seconds=0.0) as server:

        def dies(self, key, value, *args, **kwargs):
            raise RuntimeError("the process dies here")

        with monkeypatch.context() as patched:
            patched.setattr(diskcache.Cache, "set", dies)
            died = workspace.materialize(
                SAMPLE_CORPUS, selection=GRAPH, raise_on_error=False, **batch_resources(server, workspace)
            )
        assert not died.success and server.uploads >= 1
        assert [b["consumed"] for b in batches_of(workspace)] == [False] * len(batches_of(workspace))
        resumed = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
    assert materialization_metadata(resumed, "entities")["batches_waited_for_again"] >= 1
    assert set(input_lines(server).values()) == {1}  # every request was submitted once, over both runs
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))


@pytest.mark.slow
def test_a_batch_created_by_a_step_that_died_before_recording_it_is_found_and_paid_once(
    llm_index, tmp_path, monkeypatch
):
    """The endpoint created the batch (and bills it), but the step died before writing its id down: the record made
    before creating it holds a key, sent as the batch's metadata, and the next run finds the batch by it."""
    from graphrag_assets.store.batch_ledger import DuckDBBatchLedger

    clean, _, _ = llm_index
    workspace = sample(tmp_path)
    recorded_update = DuckDBBatchLedger.update

    def dies_once_created(self, recorded_id, **fields):
        if "batch_id" in fields:  # the endpoint has just answered with the batch's id
            raise RuntimeError("the process dies here")
        return recorded_update(self, recorded_id, **fields)

    with FakeOpenAIServer(batch_seconds=0.0) as server:
        with monkeypatch.context() as patched:
            patched.setattr(DuckDBBatchLedger, "update", dies_once_created)
            died = workspace.materialize(
                SAMPLE_CORPUS, selection=GRAPH, raise_on_error=False, **batch_resources(server, workspace)
            )
        assert not died.success and len(server.batches) == 1
        (pending,) = batches_of(workspace)
        assert pending["status"] == "creating" and not pending["consumed"]
        resumed = workspace.materialize(SAMPLE_CORPUS, selection=GRAPH, **batch_resources(server, workspace))
    assert materialization_metadata(resumed, "entities")["batches_waited_for_again"] >= 1
    assert set(input_lines(server).values()) == {1}  # every request was submitted once, over both runs
    assert {b["batch_id"] for b in batches_of(workspace)} == set(server.batches)  # each record names a real batch
    for name in GRAPH:
        pd.testing.assert_frame_equal(table(workspace, name), table(clean, name))


@pytest.mark.parametrize("faults", [Faults(truncated_every=1), Faults(refusal_every=1)], ids=["cut-off", "refused"])
def test_a_prose_reply_cut_off_or_refused_in_a_batch_is_asked_again_and_never_kept(tmp_path, faults):
    """A batch's output lines are checked as a synchronous reply is: a summary cut off at max_tokens or refused
    is asked again (the correction, asked in the next batch, is answered in full) and never cached."""
    import asyncio
    from contextlib import contextmanager

    import diskcache
    import duckdb

    from graphrag_assets.method.graph.records import check_free_text
    from graphrag_assets.models import ModelClient, ModelSettings
    from graphrag_assets.store.batch_ledger import DuckDBBatchLedger

    from .test_model_client import summary_request

    prompts = [summary_request(f"E{i}", f"fact number {i}", f"another fact {i}") for i in range(8)]

    @contextmanager
    def store():
        with duckdb.connect(str(tmp_path / "store.duckdb")) as conn:
            yield conn

    ledger = DuckDBBatchLedger(store, {"step": "summaries", "corpus": "c", "run_id": "r"}, lambda line: None)

    async def ask(server: FakeOpenAIServer):
        settings = ModelSettings(
            model="test-model",
            base_url=server.base_url,
            cache_dir=str(tmp_path / "cache"),
            batch_min_requests=2,
            batch_gather_seconds=0.1,
            batch_poll_seconds=0.05,
        )
        client = ModelClient(settings, batch_ledger=ledger)
        try:
            return await asyncio.gather(*(client.complete(p, parse=check_free_text) for p in prompts)), client.usage
        finally:
            await client.close()

    with FakeOpenAIServer(faults, batch_seconds=0.1) as server:
        answers, usage = asyncio.run(ask(server))
        first_replies = [s for s in server.served if s.via == "batch" and s.kind == "summarize"]
    # every prompt was first answered in a batch, and every such answer was faulty
    assert len({s.key for s in first_replies}) == len(prompts)
    assert usage.invalid_replies >= len(prompts) and usage.failures == 0
    assert all(answer and REFUSAL not in answer for answer in answers)
    with diskcache.Cache(str(tmp_path / "cache")) as cache:
        kept = {cache[key] for key in cache}
    assert kept == set(answers)  # only the full replies to the corrections were kept
