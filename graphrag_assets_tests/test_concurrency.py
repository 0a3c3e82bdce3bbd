"""Runs in separate processes share one DuckDB file and one model pool without failing."""

import os
import shutil
import subprocess
import sys

import dagster as dg
import pytest
import yaml

from graphrag_assets_tests.corpora import split_sample
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .workspaces import SAMPLE_CORPUS, Workspace, index_job, open_instance, repository_concurrency

MODEL_STEPS = {"entity_graph", "covariates", "community_reports", "text_embeddings"}
INSTANCE_YAML = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
concurrency:
  pools:
    default_limit: 1
telemetry:
  enabled: false
"""


def step_intervals(instance: dg.DagsterInstance, run_id: str) -> dict[str, tuple[float, float]]:
    starts, ends = {}, {}
    for record in instance.get_records_for_run(run_id).records:
        event = record.event_log_entry
        if event.is_dagster_event and event.step_key in MODEL_STEPS:
            kind = event.dagster_event.event_type_value
            if kind == "STEP_START":
                starts[event.step_key] = event.timestamp
            elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
                ends[event.step_key] = event.timestamp
    return {step: (starts[step], ends[step]) for step in starts}


@pytest.mark.slow
def test_two_corpora_and_a_query_in_separate_processes(offline_index, tmp_path):
    # A copy of the indexed sample corpus; the new runs write into the same file.
    (tmp_path / "workspace").mkdir()
    workspace = Workspace(tmp_path / "workspace")
    workspace.add_sample_corpus()
    shutil.copy(offline_index[0].database, workspace.database)
    for name in ("one", "two"):
        split_sample(workspace.data / name, 8)
        for part in sorted((workspace.data / name).iterdir())[2:]:
            part.unlink()
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    # The shared offline store may hold answers that earlier tests of this process asked: count the new one alone.
    asked = "SELECT count(*) AS n FROM query_answers WHERE question = 'Who is Bob Cratchit?'"
    before = workspace.sql(asked)["n"][0] if "query_answers" in set(workspace.sql("SHOW TABLES")["name"]) else 0
    with open_instance(home) as instance:
        instance.add_dynamic_partitions("corpus", ["one", "two", SAMPLE_CORPUS])
    with FakeOpenAIServer(latency_seconds=0.02) as server:
        base = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "GRAPHRAG_DUCKDB": str(workspace.database),
            "GRAPHRAG_CACHE_DIR": str(tmp_path / "cache"),
            "GRAPHRAG_DATA_DIR": str(workspace.data),
            "GRAPHRAG_RPM": "1000000",
            "GRAPHRAG_TPM": "1000000000",
        }
        with_model = {**base, "GRAPHRAG_API_BASE": server.base_url}
        offline = {k: v for k, v in base.items() if k not in ("GRAPHRAG_API_BASE", "GRAPHRAG_API_KEY")}
        commands = [
            (with_model, ["index", "--corpus", "one"]),
            (with_model, ["index", "--corpus", "two"]),
            (offline, ["ask", "--corpus", SAMPLE_CORPUS, "--method", "local", "Who is Bob Cratchit?"]),
        ]
        processes = []
        for env, args in commands:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "graphrag_assets.cli", *args],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    assert "could not set lock" not in "".join(outputs).lower()
    counts = workspace.sql("SELECT corpus, count(*) AS n FROM entities GROUP BY corpus").set_index("corpus")["n"]
    assert counts["one"] > 0 and counts["two"] > 0
    assert workspace.sql(asked)["n"][0] == before + 1

    # The model pool's limit of 1 held across the two runs: their model-calling steps never overlapped.
    with open_instance(home) as instance:
        runs = [r for r in instance.get_runs() if r.job_name == "index_corpus"]
        intervals = sorted(i for run in runs for i in step_intervals(instance, run.run_id).values())
    assert len(runs) == 2 and len(intervals) == 2 * len(MODEL_STEPS)
    assert all(earlier[1] <= later[0] for earlier, later in zip(intervals, intervals[1:]))


@pytest.mark.slow
def test_the_two_model_steps_that_need_only_text_units_overlap_in_one_run(tmp_path, monkeypatch):
    """Under the multiprocess executor (runs launched from the UI, a schedule or a backfill), entity extraction
    and claims run at once: the model pool's default of 2 lets one run use both."""
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(repository_concurrency()))
    with FakeOpenAIServer(latency_seconds=0.05) as server:
        for name, value in workspace.environment(server.base_url).items():
            monkeypatch.setenv(name, value)
        with open_instance(home) as instance:
            instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
            result = dg.execute_job(
                dg.reconstructable(index_job),
                instance=instance,
                tags={"dagster/partition": SAMPLE_CORPUS},
                asset_selection=[dg.AssetKey(name) for name in ("entities", "relationships", "covariates")],
            )
            assert result.success
            intervals = step_intervals(instance, result.run_id)
        claims = [s.at for s in server.served if s.kind.startswith("claims")]
        extraction = [s.at for s in server.served if s.kind.startswith("extract")]
    (graph_start, graph_end), (claims_start, claims_end) = intervals["entity_graph"], intervals["covariates"]
    assert max(graph_start, claims_start) < min(graph_end, claims_end)
    # ... and so did their requests at the endpoint
    assert max(min(claims), min(extraction)) < min(max(claims), max(extraction))
