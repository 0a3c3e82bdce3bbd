"""The dg component: dg lists it, scaffolds a commented defs.yaml that loads as it is, names each mistake in one, and
a platform's project indexes its documents through it."""

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from pydantic import ValidationError

from graphrag_assets.components import GraphRAG
from graphrag_assets.project import graphrag_definitions

from .conftest import REPO, SAMPLE_CORPUS, open_instance
from .test_cli import Cli

DG = Path(sys.executable).parent / "dg"
TYPE = "graphrag_assets.components.GraphRAG"


def platform_project(root: Path) -> Path:
    """A Dagster platform's dg project as `dg scaffold project` lays it out, with documents of its own in data/.
    Each test's project is loaded afresh: Python keeps a module it imported, and an earlier test's is another's."""
    for module in [name for name in sys.modules if name.split(".")[0] == "platform_project"]:
        del sys.modules[module]
    package = root / "src" / "platform_project"
    (package / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "platform-project"\nversion = "0.1.0"\n\n[tool.dg]\ndirectory_type = "project"\n\n'
        '[tool.dg.project]\nroot_module = "platform_project"\n'
    )
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n\n@dg.definitions\ndef defs():\n"
        "    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n"
    )
    notes = root / "data" / "notes"
    notes.mkdir(parents=True)
    book = next((REPO / "data" / SAMPLE_CORPUS).glob("*.txt")).read_text(encoding="utf-8")
    (notes / "opening.txt").write_text(book[:20_000], encoding="utf-8")
    return root


def dg_command(project: Path, *args: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("GRAPHRAG_", "DAGSTER_HOME"))}
    environment |= {
        "VIRTUAL_ENV": sys.prefix,
        "PATH": f"{DG.parent}{os.pathsep}{environment['PATH']}",
        "PYTHONPATH": str(project / "src"),
        "NO_COLOR": "1",
    }
    return subprocess.run([str(DG), *args], cwd=project, env=environment, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_dg_lists_the_component_and_scaffolds_a_commented_defs_yaml_that_loads_as_it_is(tmp_path):
    project = platform_project(tmp_path)
    listed = dg_command(project, "list", "components")
    assert TYPE in listed.stdout, listed.stdout + listed.stderr

    scaffolded = dg_command(project, "scaffold", "defs", TYPE, "search")
    assert scaffolded.returncode == 0, scaffolded.stderr
    defs_yaml = project / "src" / "platform_project" / "defs" / "search" / "defs.yaml"
    text = defs_yaml.read_text()
    assert text.startswith(f"type: {TYPE}\n")
    lines = [line.lstrip("# ") for line in text.splitlines()]
    for attribute in GraphRAG.model_fields:  # every attribute is there, set or commented, with what it means
        assert any(line.startswith(f"{attribute}:") for line in lines), attribute
    assert "store: .graphrag/search.duckdb" in text and "key_prefix: search" in text

    # A second instance beside it, with its own documents, store and names: nothing collides.
    assert dg_command(project, "scaffold", "defs", TYPE, "support-tickets").returncode == 0
    second = defs_yaml.parent.parent / "support-tickets" / "defs.yaml"
    second.write_text(second.read_text().replace("documents: data", "documents: tickets"))
    checked = dg_command(project, "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    listed = dg_command(project, "list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"search/entities"' in listed.stdout and '"support_tickets/entities"' in listed.stdout
    assert "search__index_corpus" in listed.stdout and "support_tickets__nightly_reindex" in listed.stdout

    defs_yaml.write_text(
        text.replace("method: standard", "method: quick")
        .replace('schedule: "0 2 * * *"', 'schedule: "every night"')
        .replace("api_key_variable: GRAPHRAG_API_KEY", "api_key_variable: sk-not-a-name")
    )
    refused = dg_command(project, "check", "defs")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "3 validation errors for GraphRAG" in output
    assert "'every night' is not a cron schedule" in output
    assert "'sk-not-a-name' is not an environment variable's name" in output
    assert "Input should be 'standard', 'fast' or 'lazy'" in output


def test_the_components_attributes_become_the_deployments_settings(tmp_path):
    component = GraphRAG(
        documents="s3://corpora/support/", store="state/kb.duckdb", method="fast", schedule="0 3 * * 1", budget=2.5
    )
    settings = component.settings(tmp_path)
    assert settings.documents == "s3://corpora/support/" and settings.database == str(tmp_path / "state/kb.duckdb")
    assert settings.vector_index_dir == str(tmp_path / "state" / "vector-index")
    defs = graphrag_definitions(settings)
    repository = defs.get_repository_def()
    assert repository.get_schedule_def("nightly_reindex").cron_schedule == "0 3 * * 1"
    defaults = repository.get_job("index_corpus").get_run_config_for_partition_key("support")["ops"]
    assert defaults["entity_graph"] == {"config": {"method": "fast"}}
    assert defaults["parquet_export"] == {"config": {"folder": str(tmp_path / "state" / "exports")}}
    assert defs.resources["corpora"].run_budget_usd == 2.5
    assert defs.resources["corpora"].root == "s3://corpora/support/"
    for mistake, problem in [
        ({"documents": "ftp://host/docs"}, "a local folder or an s3://, gs:// or az:// prefix"),
        ({"budget": 0}, "greater than 0"),
        ({"api_base_variable": "https://api.example.com"}, "not an environment variable's name"),
    ]:
        with pytest.raises(ValidationError, match=problem):
            GraphRAG(**mistake)


@pytest.mark.slow
def test_two_instances_load_side_by_side_and_each_indexes_into_its_own_store(tmp_path, monkeypatch):
    project = platform_project(tmp_path)
    monkeypatch.syspath_prepend(str(project / "src"))
    (project / "tickets" / "billing").mkdir(parents=True)
    (project / "tickets" / "billing" / "t1.txt").write_text("Ada Lovelace asked Charles Babbage about an invoice.")
    defs_folder = project / "src" / "platform_project" / "defs"
    for name, documents, method in [("search", "data", "lazy"), ("support", "tickets", "fast")]:
        (defs_folder / name).mkdir()
        (defs_folder / name / "defs.yaml").write_text(
            f"type: {TYPE}\n\nattributes:\n  documents: {documents}\n  store: .graphrag/{name}.duckdb\n"
            f"  method: {method}\n  key_prefix: {name}\n"
        )
    defs = dg.Definitions.merge(dg.load_from_defs_folder(path_within_project=defs_folder))
    repository = defs.get_repository_def()
    keys = {key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()}
    assert {"search/entities", "support/entities", "search/published_index"} <= keys
    assert {"search__duckdb", "support__duckdb", "support__corpora"} <= set(defs.resources)
    assert repository.asset_graph.get(dg.AssetKey(["search", "entities"])).group_name == "search_graph"

    instance = dg.DagsterInstance.ephemeral()
    sensor = repository.get_sensor_def("search__new_corpus_sensor")
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        found = sensor(context)
    assert [request.partition_key for request in found.run_requests] == ["notes"]
    instance.add_dynamic_partitions("search__corpus", ["notes"])
    # The job as the sensor's run launches it: the instance's method is the job's own run config.
    result = defs.resolve_job_def("search__index_corpus").execute_in_process(partition_key="notes", instance=instance)
    assert result.success
    materialized = {event.asset_key.to_user_string() for event in result.get_asset_materialization_events()}
    assert {"search/entities", "search/published_index"} <= materialized
    checks = {evaluation.asset_key.to_user_string() for evaluation in result.get_asset_check_evaluations()}
    assert "search/entities" in checks
    with duckdb.connect(str(project / ".graphrag" / "search.duckdb"), read_only=True) as conn:
        units = conn.execute("SELECT count(*) FROM text_units WHERE corpus = 'notes'").fetchone()[0]
        lineage = conn.execute(
            "SELECT settings->>'method', upstream_versions FROM lineage WHERE asset = 'entities' AND corpus = 'notes' "
            "ORDER BY materialized_at DESC LIMIT 1"
        ).fetchone()
    assert units > 0 and lineage[0] == "lazy" and "text_units" in lineage[1]  # read by its bare table names
    assert (project / ".graphrag" / "exports" / "notes" / "graph.graphml").is_file()  # beside its store, not ours
    assert not (project / ".graphrag" / "support.duckdb").exists()  # the other instance's store is untouched

    # The CLI takes an instance by name, from anywhere in the project: its store, documents and jobs.
    cli = Cli(tmp_path)  # its GRAPHRAG_ variables name other places: the instance's win
    indexed = cli.run("index", "--instance", "support", cwd=project / "src")
    assert indexed.returncode == 0, indexed.stderr
    assert "indexed billing" in indexed.stdout and str(project / ".graphrag" / "support.duckdb") in indexed.stdout
    with duckdb.connect(str(project / ".graphrag" / "support.duckdb"), read_only=True) as conn:
        method = conn.execute("SELECT settings->>'method' FROM lineage WHERE asset = 'entities'").fetchone()[0]
    assert method == "fast"  # the instance's own method, from its job's defaults
    asked = cli.run(
        "ask", "--instance", "search", "--corpus", "notes", "--method", "basic", "Who is Marley?", cwd=project
    )
    assert asked.returncode == 0, asked.stderr
    assert "Marley" in asked.stdout
    unknown = cli.run("ask", "--instance", "sales", "Who?", cwd=project)
    assert unknown.returncode == 2 and "has no GraphRAG instance of that name (search, support)" in unknown.stderr


TICKETS_ASSET = '''
import dagster as dg
import duckdb


@dg.asset
def tickets() -> None:
    """The platform's support tickets, as its own ingestion (dlt, Sling) would land them."""
    with duckdb.connect("warehouse.duckdb") as conn:
        conn.execute("CREATE OR REPLACE TABLE tickets (ticket_id INTEGER, subject VARCHAR, body VARCHAR, team VARCHAR)")
        conn.execute(
            "INSERT INTO tickets VALUES (1, 'Refund', 'Ada Lovelace asked Charles Babbage for a refund.', 'billing'),"
            " (2, 'Login', 'Charles Babbage cannot log in to the Analytical Engine portal.', 'access')"
        )
'''


@pytest.mark.slow
def test_an_instance_reads_a_table_the_platforms_own_asset_makes_and_sits_downstream_of_it(tmp_path, monkeypatch):
    project = platform_project(tmp_path)
    monkeypatch.syspath_prepend(str(project / "src"))
    monkeypatch.chdir(project)  # the platform's asset writes its warehouse where its runs start
    defs_folder = project / "src" / "platform_project" / "defs"
    (defs_folder / "warehouse.py").write_text(TICKETS_ASSET)
    (defs_folder / "support").mkdir()
    (defs_folder / "support" / "defs.yaml").write_text(
        f"type: {TYPE}\n\nattributes:\n  documents:\n    sql: SELECT * FROM tickets\n    database: warehouse.duckdb\n"
        "    corpus: support\n  columns: {text: body, title: subject, id: ticket_id, metadata: [team]}\n"
        "  upstream_assets: [tickets]\n  store: .graphrag/support.duckdb\n  key_prefix: support\n  method: lazy\n"
    )
    defs = dg.Definitions.merge(dg.load_from_defs_folder(path_within_project=defs_folder))
    repository = defs.get_repository_def()
    graph = repository.asset_graph
    assert dg.AssetKey("tickets") in graph.get(dg.AssetKey(["support", "documents"])).parent_keys
    published = dg.AssetKey(["support", "published_index"])
    downstream = dg.AssetSelection.assets("tickets").downstream().resolve(graph)
    assert published in downstream

    instance = dg.DagsterInstance.ephemeral()
    upstream = repository.get_sensor_def("support__upstream_changes_sensor")
    assert (
        defs.resolve_job_def("__ASSET_JOB")
        .execute_in_process(instance=instance, asset_selection=[dg.AssetKey("tickets")])
        .success
    )
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        found = repository.get_sensor_def("support__new_corpus_sensor")(context)
    assert [request.partition_key for request in found.run_requests] == ["support"]
    instance.add_dynamic_partitions("support__corpus", ["support"])
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        requests = upstream(context)
        cursor = context.cursor
    assert [request.partition_key for request in requests] == ["support"]
    with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=cursor) as context:
        assert isinstance(upstream(context), dg.SkipReason)  # nothing new since

    result = defs.resolve_job_def("support__index_corpus").execute_in_process(
        partition_key="support", instance=instance
    )
    assert result.success
    with duckdb.connect(str(project / ".graphrag" / "support.duckdb"), read_only=True) as conn:
        documents = conn.execute(
            "SELECT title, metadata FROM documents WHERE corpus = 'support' ORDER BY title"
        ).fetchall()
    assert [title for title, _ in documents] == ["Login", "Refund"]
    assert '"team": "billing"' in documents[1][1] and '"ticket_id": 1' in documents[1][1]


# Our partitioned assets only: the platform's tickets have no partitions to ask a status of.
STALENESS = """query ($partition: String!, $keys: [AssetKeyInput!]) {
    assetNodes(assetKeys: $keys) { assetKey { path } staleStatus(partition: $partition) } }"""


@pytest.mark.slow
def test_the_webserver_marks_the_index_stale_when_the_platforms_asset_is_materialized_again(tmp_path):

    from .test_webserver import INSTANCE_YAML, answering_client, free_port

    project = platform_project(tmp_path)
    defs_folder = project / "src" / "platform_project" / "defs"
    (defs_folder / "warehouse.py").write_text(TICKETS_ASSET)
    (defs_folder / "support").mkdir()
    (defs_folder / "support" / "defs.yaml").write_text(
        f"type: {TYPE}\n\nattributes:\n  documents:\n    sql: SELECT * FROM tickets\n    database: warehouse.duckdb\n"
        "    corpus: support\n  columns: {text: body, title: subject}\n  upstream_assets: [tickets]\n"
        "  store: .graphrag/support.duckdb\n  key_prefix: support\n  method: lazy\n"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)  # runs launch at once, with no daemon
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GRAPHRAG_")}
    environment |= {"DAGSTER_HOME": str(home), "PYTHONPATH": str(project / "src")}
    port = free_port()
    webserver = subprocess.Popen(
        [
            str(DG.parent / "dagster-webserver"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-m",
            "platform_project.definitions",
        ],
        cwd=project,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = answering_client(port, webserver)

        def run(job: str, tags: dict | None = None, assets: list[dg.AssetKey] | None = None) -> None:
            run_id = client.submit_job_execution(
                job, run_config={"execution": {"config": {"in_process": {}}}}, tags=tags, asset_selection=assets
            )
            deadline = time.monotonic() + 240
            while (status := client.get_run_status(run_id)) not in (
                dg.DagsterRunStatus.SUCCESS,
                dg.DagsterRunStatus.FAILURE,
            ):
                assert time.monotonic() < deadline, f"{job} still {status}"
                time.sleep(1)
            assert status == dg.DagsterRunStatus.SUCCESS, f"{job} failed"

        def staleness() -> dict[str, str]:
            keys = [{"path": ["support", asset]} for asset in ("documents", "entities", "published_index")]
            nodes = client._execute(STALENESS, {"partition": "support", "keys": keys})["assetNodes"]
            return {"/".join(node["assetKey"]["path"]): node["staleStatus"] for node in nodes}

        run("__ASSET_JOB", assets=[dg.AssetKey("tickets")])
        with open_instance(home) as instance:
            instance.add_dynamic_partitions("support__corpus", ["support"])
        run("support__index_corpus", tags={"dagster/partition": "support"})
        assert set(staleness().values()) == {"FRESH"}
        run("__ASSET_JOB", assets=[dg.AssetKey("tickets")])  # the platform lands its tickets again
        # Dagster marks stale what reads a changed asset directly; the steps after documents follow, each once the
        # one before it has a new data version.
        after = staleness()
        assert after["support/documents"] == "STALE", after
    finally:
        webserver.terminate()
        webserver.wait(timeout=30)
