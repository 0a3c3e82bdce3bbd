"""A question launched through the Dagster webserver's GraphQL API, as the UI's launchpad does."""

import os
import socket
import subprocess
import sys
import time

import dagster as dg
import pytest
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

from .conftest import REPO, SAMPLE_CORPUS

# Runs launch straight away: the queued coordinator of the repo's dagster.yaml needs the daemon.
INSTANCE_YAML = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def webserver(offline_index, tmp_path):
    workspace = offline_index[0]
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "GRAPHRAG_DUCKDB": str(workspace.database),
           "GRAPHRAG_CACHE_DIR": str(workspace.cache), "GRAPHRAG_DATA_DIR": str(workspace.data)}
    for variable in ("GRAPHRAG_API_BASE", "GRAPHRAG_API_KEY"):
        env.pop(variable, None)
    server = subprocess.Popen([sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
                               "-w", str(REPO / "workspace.yaml")], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=30)
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, "the webserver exited"
        try:
            client._execute("{ version }")
            break
        except Exception:
            assert time.monotonic() < deadline, "the webserver did not start in time"
            time.sleep(1)
    yield client, workspace
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.slow
def test_a_question_launched_through_graphql_is_answered_and_recorded(webserver):
    client, workspace = webserver
    run_id = client.submit_job_execution(
        "ask_global_search", run_config={"ops": {"global_search": {"config": {
            "question": "Who is Tiny Tim?", "community_level": 1}}}},
        tags={"dagster/partition": SAMPLE_CORPUS})
    deadline = time.monotonic() + 240
    while (status := client.get_run_status(run_id)) not in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
        assert time.monotonic() < deadline, f"run {run_id} still {status}"
        time.sleep(1)
    assert status == dg.DagsterRunStatus.SUCCESS
    row = workspace.sql("SELECT * FROM query_answers WHERE run_id = ?", run_id).iloc[0]
    assert row.question == "Who is Tiny Tim?" and row.method == "global" and row.community_level == 1
    assert "Extractive answer" in row.answer


@pytest.mark.slow
def test_graphql_refuses_a_config_the_launchpad_would_flag(webserver):
    client, _ = webserver
    with pytest.raises(DagsterGraphQLClientError):
        client.submit_job_execution("ask_global_search", run_config={"ops": {"global_search": {"config": {
            "community_level": 0}}}}, tags={"dagster/partition": SAMPLE_CORPUS})  # no question
