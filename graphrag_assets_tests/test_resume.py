"""A run killed mid-extraction and run again pays for no call that had already succeeded."""

import os
import signal
import subprocess
import sys
import time

import diskcache
import pytest

from graphrag_assets.failures import NO_RUN_RETRY_TAG
from graphrag_assets_tests.model_server import FakeOpenAIServer, Faults

from .conftest import SAMPLE_CORPUS, Workspace, chat_resource, materialization_metadata, open_instance


@pytest.mark.slow
def test_a_killed_run_resumes_from_the_response_cache(tmp_path):
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    home = tmp_path / "dagster_home"
    home.mkdir()
    with FakeOpenAIServer(latency_seconds=0.05) as server:
        env = {
            **os.environ,
            **workspace.environment(server.base_url, DAGSTER_HOME=str(home)),
            "GRAPHRAG_MAX_CONCURRENCY": "4",
            "GRAPHRAG_RPM": "1000000",
            "GRAPHRAG_TPM": "1000000000",
        }
        with open_instance(home) as instance:
            instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
        # The real Dagster CLI in its own process group, killed with SIGKILL: no chance to clean up.
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster",
                "asset",
                "materialize",
                "-m",
                "graphrag_assets.definitions",
                "--select",
                "entities,relationships",
                "--partition",
                SAMPLE_CORPUS,
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while sum(server.successes("extract").values()) < 40:
            assert run.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        while server.in_flight:  # requests the dead process had sent are still being answered
            time.sleep(0.05)
        answered_before_kill = sum(server.successes().values())
        with diskcache.Cache(str(workspace.cache)) as cache:
            cached_before_kill = len(cache)
        assert 0 < cached_before_kill <= answered_before_kill

        result = workspace.materialize(
            SAMPLE_CORPUS, chat=chat_resource(server.base_url, workspace.cache), selection=["entities", "relationships"]
        )
        answered_twice = {key: n for key, n in server.successes().items() if n > 1}

    metadata = materialization_metadata(result, "entities")
    assert metadata["cache_hits"] == cached_before_kill
    # Only replies that were on the wire when the process died, never cached, may be asked for again.
    assert len(answered_twice) <= answered_before_kill - cached_before_kill
    assert metadata["model_calls"] == sum(server.successes().values()) - answered_before_kill + 1  # + the probe


def test_a_step_failed_by_a_broken_endpoint_is_cheap_to_retry(tmp_path):
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    selection = ["entities", "relationships"]
    with FakeOpenAIServer(Faults(broken_every=4)) as broken:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(broken.base_url, workspace.cache, max_retries=1),
            selection=selection,
            raise_on_error=False,
        )
        paid_for = set(broken.successes())
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "text units got no valid model reply" in failure.description and "a re-run pays only" in failure.description
    assert "injected" in str(failure.metadata["errors"].value) or "upstream failed" in str(
        failure.metadata["errors"].value
    )

    with FakeOpenAIServer() as fixed:
        retry = workspace.materialize(
            SAMPLE_CORPUS, chat=chat_resource(fixed.base_url, workspace.cache), selection=selection
        )
        asked_again = set(fixed.successes())
    metadata = materialization_metadata(retry, "entities")
    # No request that succeeded in the failed run was sent again; those answers came from the cache.
    assert paid_for and not (paid_for & asked_again)
    assert metadata["cache_hits"] > 0 and metadata["model_calls"] == len(asked_again) + 1  # + the probe
    assert metadata["failed_text_units"] == 0


@pytest.mark.parametrize(
    "faults,words,retried",
    [
        (Faults(status=401), "refused the API key (HTTP 401)", False),
        (Faults(hang=True), "did not answer within 2 s", True),
    ],
)
def test_a_dead_endpoint_fails_the_step_fast_and_retries_only_what_time_can_fix(tmp_path, faults, words, retried):
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    with FakeOpenAIServer(faults) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache, timeout_seconds=2),
            selection=["entities", "relationships"],
            raise_on_error=False,
        )
        requests = server.count()
    failure = result.get_step_failure_events()[0]
    assert words in failure.step_failure_data.user_failure_data.description
    assert server.base_url in failure.step_failure_data.user_failure_data.description
    # The probe and its one retry, not a request (and a timeout) per text unit. Counted, not timed: wall time on
    # a shared machine says nothing reliable.
    assert requests <= 2
    tags = result.dagster_run.tags
    assert (NO_RUN_RETRY_TAG not in tags) == retried


@pytest.mark.slow
def test_a_hanging_endpoint_is_waited_for_once_per_run_not_once_per_step(tmp_path):
    """Entities and claims both need the endpoint; the first step to find it hanging says so for the rest of the
    run, which then fails in about two timeouts instead of two per step."""
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    with FakeOpenAIServer(Faults(hang=True)) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache, timeout_seconds=2),
            selection=["entities", "relationships", "covariates"],
            raise_on_error=False,
        )
        hung = server.count("hang")
    failed = {event.step_key for event in result.get_step_failure_events()}
    # Every request that hung is one the run waited a whole timeout for: two in all (a probe and its retry), so
    # the second step took the first one's word instead of waiting again. Counted, not timed.
    assert {"entity_graph", "covariates"} <= failed and hung <= 2
