"""The Dagster webserver: runs launched through its GraphQL API, staleness, and the UI in a real browser.

One webserver serves the module: the sample corpus is indexed through GraphQL as a user would from
the UI, then questions are launched, prompts and settings edited, and pages opened in headless
Chromium (Debian's package, driven by Playwright; .ci/run installs both).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

from graphrag_assets.cli import CODE_LOCATION

from .conftest import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    INDEX_ASSETS,
    REPO,
    SAMPLE_CORPUS,
    Workspace,
    open_instance,
    require_chromium,
)

pytestmark = pytest.mark.slow
# The repo's dagster.yaml queues runs for the daemon; here runs launch straight away.
INSTANCE_YAML = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
nux:
  enabled: false
"""
LOCATION = CODE_LOCATION  # workspace.yaml names it
BACKFILL = """mutation ($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
    __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
BACKFILL_STATUS = """query ($id: String!) { partitionBackfillOrError(backfillId: $id) {
    __typename ... on PartitionBackfill { status } } }"""
STALENESS = """query ($partition: String!) { assetNodes { assetKey { path } staleStatus(partition: $partition) } }"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answering_client(port: int, webserver: subprocess.Popen, seconds: float = 180) -> DagsterGraphQLClient:
    """A GraphQL client of the webserver on `port`, once it answers (it takes a while to load the definitions)."""
    client = DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=60)
    deadline = time.monotonic() + seconds
    while True:
        assert webserver.poll() is None, "the webserver exited"
        try:
            client._execute("{ version }")
            return client
        except Exception:
            assert time.monotonic() < deadline, "the webserver did not start in time"
            time.sleep(1)


def backfill_status(client: DagsterGraphQLClient, backfill_id: str, timeout: float) -> str:
    """The backfill's status once it has ended."""
    deadline = time.monotonic() + timeout
    while True:
        status = client._execute(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]
        if status in ("COMPLETED", "COMPLETED_SUCCESS", "FAILED", "COMPLETED_FAILED", "CANCELED"):
            return status
        assert time.monotonic() < deadline, f"backfill still {status}"
        time.sleep(2)


# `dagster-daemon` with its backfill loop every 2 s instead of every 30 s. Dagster 1.13 has no setting for that
# interval (a module constant, read on every loop): a backfill waits one loop per wave of runs, so under the
# default a test would spend minutes idle. What the daemon does on each loop is unchanged.
QUICK_DAEMON = """
import sys
import dagster._daemon.controller
dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS = 2
from dagster._daemon.cli import main
sys.argv[0] = "dagster-daemon"
main()
"""


@contextmanager
def dagster_services(env: dict) -> Iterator[tuple[DagsterGraphQLClient, str]]:
    """The webserver and the daemon (backfills, sensors, queued runs, monitoring, as under `dagster dev`) in
    their own processes; yields a GraphQL client and the UI's address once the webserver answers, and stops
    both afterwards."""
    port = free_port()
    workspace = str(REPO / "workspace.yaml")
    bin_dir = Path(sys.executable).parent
    commands = [
        [str(bin_dir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w", workspace],
        [sys.executable, "-c", QUICK_DAEMON, "run", "-w", workspace],
    ]
    processes = [
        subprocess.Popen(c, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands
    ]
    try:
        client = answering_client(port, processes[0])
        yield client, f"http://127.0.0.1:{port}"
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)


class UI:
    def __init__(self, client: DagsterGraphQLClient, url: str, workspace: Workspace, prompts: Path, home: Path):
        self.client, self.url, self.workspace, self.prompts, self.home = client, url, workspace, prompts, home

    def run(
        self, job: str, run_config: dict | None = None, timeout: float = 300, assets: list[str] | None = None
    ) -> str:
        """Launched as the launchpad does, its steps in the run's own process: steps in processes of their own
        (the UI's default) are the backfill test's, and cost each run several seconds of imports per step."""
        run_config = {"execution": {"config": {"in_process": {}}}, **(run_config or {})}
        run_id = self.client.submit_job_execution(
            job, run_config=run_config, asset_selection=assets, tags={"dagster/partition": SAMPLE_CORPUS}
        )
        deadline = time.monotonic() + timeout
        while (status := self.client.get_run_status(run_id)) not in (
            dg.DagsterRunStatus.SUCCESS,
            dg.DagsterRunStatus.FAILURE,
        ):
            assert time.monotonic() < deadline, f"run {run_id} of {job} still {status}"
            time.sleep(1)
        assert status == dg.DagsterRunStatus.SUCCESS, f"run {run_id} of {job} failed"
        return run_id

    def staleness(self) -> dict[str, str]:
        nodes = self.client._execute(STALENESS, {"partition": SAMPLE_CORPUS})["assetNodes"]
        return {node["assetKey"]["path"][-1]: node["staleStatus"] for node in nodes}

    def reload(self) -> None:
        self.client.reload_repository_location(LOCATION)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    workspace = Workspace(root)
    workspace.add_sample_corpus()
    prompts = root / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    with open_instance(home) as instance:
        instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "GRAPHRAG_DUCKDB": str(workspace.database),
        "GRAPHRAG_CACHE_DIR": str(workspace.cache),
        "GRAPHRAG_DATA_DIR": str(workspace.data),
        "GRAPHRAG_PROMPTS_DIR": str(prompts),
    }
    for variable in ("GRAPHRAG_API_BASE", "GRAPHRAG_API_KEY"):
        env.pop(variable, None)
    with dagster_services(env) as (client, url):
        ui = UI(client, url, workspace, prompts, home)
        ui.run("index_corpus", timeout=600)  # the whole index of the sample corpus
        yield ui


def test_a_question_launched_through_graphql_is_answered_and_recorded(ui):
    run_id = ui.run(
        "ask_global_search",
        {"ops": {"global_search": {"config": {"question": "Who is Tiny Tim?", "community_level": 1}}}},
    )
    row = ui.workspace.sql("SELECT * FROM query_answers WHERE run_id = ?", run_id).iloc[0]
    assert row.question == "Who is Tiny Tim?" and row.method == "global" and row.community_level == 1
    assert "Extractive answer" in row.answer


def test_graphql_refuses_a_config_the_launchpad_would_flag(ui):
    with pytest.raises(DagsterGraphQLClientError):
        ui.client.submit_job_execution(
            "ask_global_search",
            run_config={"ops": {"global_search": {"config": {"community_level": 0}}}},
            tags={"dagster/partition": SAMPLE_CORPUS},
        )  # no question


def test_a_backfill_of_two_new_corpora_from_the_ui(ui):
    from graphrag_assets_tests.corpora import split_sample

    with open_instance(ui.home) as instance:
        instance.add_dynamic_partitions("corpus", ["north", "south"])
    for name in ("north", "south"):
        split_sample(ui.workspace.data / name, 10)
        for part in sorted((ui.workspace.data / name).iterdir())[1:]:
            part.unlink()
    # The graph steps: the whole index from the UI is the fixture's run; this shows the backfill of new corpora.
    index_assets = INDEX_ASSETS[: INDEX_ASSETS.index("relationships") + 1]
    launched = ui.client._execute(
        BACKFILL,
        {"params": {"assetSelection": [{"path": [a]} for a in index_assets], "partitionNames": ["north", "south"]}},
    )
    backfill = launched["launchPartitionBackfill"]
    assert backfill["__typename"] == "LaunchBackfillSuccess", backfill
    assert backfill_status(ui.client, backfill["backfillId"], timeout=400) in ("COMPLETED", "COMPLETED_SUCCESS")
    relationships = ui.workspace.sql("SELECT corpus, count(*) AS n FROM relationships GROUP BY corpus")
    assert {"north", "south"} <= set(relationships["corpus"])


def test_the_ui_in_a_real_browser(ui, tmp_path):
    require_chromium()
    from playwright.sync_api import sync_playwright

    ui.run(
        "ask_global_search",
        {"ops": {"global_search": {"config": {"question": "What does Scrooge learn?", "community_level": 0}}}},
    )
    shots = Path(os.environ.get("GRAPHRAG_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})

        page.goto(f"{ui.url}/asset-groups")
        for group in ("ingest", "graph", "communities", "embeddings", "query"):
            page.get_by_text(group, exact=True).first.wait_for(timeout=60_000)
        page.screenshot(path=shots / "asset_graph.png")

        page.goto(f"{ui.url}/assets/layouts?partition={SAMPLE_CORPUS}")
        page.locator("tr", has_text="entity_layout").get_by_text("[Show Markdown]").click()
        plot = page.locator("img[src^='data:image/png']").first
        plot.wait_for(timeout=30_000)
        assert plot.evaluate("img => img.naturalWidth") > 300  # the UMAP plot decoded and rendered
        page.wait_for_timeout(1000)  # let the dialog finish fading in
        page.screenshot(path=shots / "umap_layout.png")

        page.goto(f"{ui.url}/assets/global_search?partition={SAMPLE_CORPUS}")
        answer = page.locator("tr", has_text="answer").first
        answer.wait_for(timeout=30_000)
        longer = answer.get_by_text("[Show Markdown]")  # the UI folds long markdown behind a link
        if longer.count():
            longer.first.click()
        page.get_by_text("What does Scrooge learn?").first.wait_for(timeout=30_000)
        page.get_by_text("Extractive answer").first.wait_for(timeout=30_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=shots / "global_search_answer.png")
        browser.close()
    assert all(
        (shots / name).stat().st_size > 10_000
        for name in ("asset_graph.png", "umap_layout.png", "global_search_answer.png")
    )


def test_editing_a_prompt_or_a_setting_marks_exactly_the_dependent_assets_stale(ui):
    assert {a: s for a, s in ui.staleness().items() if a in INDEX_ASSETS and s != "FRESH"} == {}

    prompt = ui.prompts / "community_report.txt"
    original = prompt.read_text()
    prompt.write_text(original + "\nWrite for a general audience.\n")
    ui.reload()
    stale = {a for a, s in ui.staleness().items() if a in INDEX_ASSETS and s == "STALE"}
    prompt.write_text(original)
    ui.reload()
    assert "community_reports" in stale
    assert stale.isdisjoint(
        {"documents", "base_text_units", "entities", "relationships", "covariates", "communities", "graph_embeddings"}
    )

    # Tuned prompts the index does not use change nothing it built. Choosing them marks stale what is extracted,
    # summarized and reported with prompts, and nothing before or beside it; tuning again then marks index_prompts.
    ui.run("tune_prompts")
    assert {a for a, s in ui.staleness().items() if a in INDEX_ASSETS and s == "STALE"} == set()
    ui.run("index_corpus", {"ops": {"index_prompts": {"config": {"prompts": "tuned"}}}}, assets=["index_prompts"])
    # (published_index publishes every index table, index_prompts' own among them)
    prompted = {"entities", "relationships", "covariates", "community_reports", "published_index"}
    assert {a for a, s in ui.staleness().items() if a in INDEX_ASSETS and s == "STALE"} == prompted
    ui.run("tune_prompts", {"ops": {"tuned_prompts": {"config": {"max_entity_types": 4}}}})
    assert {a for a, s in ui.staleness().items() if a in INDEX_ASSETS and s == "STALE"} == {"index_prompts", *prompted}

    # A setting: smaller chunks give base_text_units a new data version; what is built on it is stale.
    ui.run(
        "index_corpus",
        {"ops": {"corpus_documents": {"config": {"chunk_size": 300, "chunk_overlap": 50}}}},
        assets=["documents", "base_text_units"],
    )
    after = ui.staleness()
    assert after["documents"] == "FRESH" and after["base_text_units"] == "FRESH"
    assert {after[a] for a in ("entities", "relationships", "covariates")} == {"STALE"}
