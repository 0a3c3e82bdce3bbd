"""The graphrag-assets CLI: settings from a file or --set, one clear line for user errors, dead runs failed."""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib

import dagster as dg
import duckdb
import pytest
import yaml
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.storage.tags import REPOSITORY_LABEL_TAG
from dagster._utils.interrupts import raise_interrupts_as

from graphrag_assets.automation.runs import PID_TAG
from graphrag_assets.cli import CODE_LOCATION, step_settings
from graphrag_assets.models.interrupts import run_interruptibly
from graphrag_assets_tests.model_server import FakeOpenAIServer, Faults

from .conftest import REPO, open_instance
from .test_small_corpora import write_corpus


def test_settings_come_from_a_file_and_overrides_by_asset_or_op_name(tmp_path):
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("entities:\n  max_gleanings: 0\ncovariates:\n  enabled: true\n")
    config = step_settings(
        str(run_yaml),
        ["covariates.enabled=false", "documents.chunk_size=300", "entity_graph.entity_types=[person, place]"],
    )
    assert config == {
        "ops": {
            "entity_graph": {"config": {"max_gleanings": 0, "entity_types": ["person", "place"]}},
            "covariates": {"config": {"enabled": False}},
            "corpus_documents": {"config": {"chunk_size": 300}},
        }
    }
    dagster_style = tmp_path / "dagster.yaml"
    dagster_style.write_text("ops:\n  layouts:\n    config:\n      seed: 7\n")
    assert step_settings(str(dagster_style), []) == {"ops": {"layouts": {"config": {"seed": 7}}}}


class Cli:
    def __init__(self, root, env: dict | None = None):
        self.home = root / "home"
        self.home.mkdir()
        (self.home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.database = root / "graphrag.duckdb"
        self.env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "GRAPHRAG_DATA_DIR": str(root / "data"),
            "GRAPHRAG_DUCKDB": str(self.database),
            "GRAPHRAG_CACHE_DIR": str(root / "cache"),
            **(env or {}),
        }

    def runs(self) -> int:
        with open_instance(self.home) as instance:
            return len(instance.get_runs())

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "graphrag_assets.cli", *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def run(self, *args: str, cwd=None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "graphrag_assets.cli", *args],
            env=self.env,
            cwd=cwd,
            text=True,
            capture_output=True,
            timeout=300,
        )


@pytest.mark.slow
def test_arguments_are_refused_in_one_line_before_any_run_starts(tmp_path):
    write_corpus(tmp_path / "data" / "tiny", "three files")
    cli = Cli(tmp_path)
    (tmp_path / "broken.yaml").write_text("entities:\n  max_gleanings: [1\n")
    index = ("index", "--corpus", "tiny")
    for args, words in (
        (("ask", "--level", "-1", "Who?"), "community level -1 does not exist: levels count from 0 (the root) down"),
        (("ask", "   "), "the question is empty"),
        (("evaluate", "--corpus", "tiny"), "the evaluation needs a chat model"),  # offline: nothing to judge with
        (("ask", "--corpus", "tiny", "Who?"), "corpus 'tiny' has no published index"),
        ((*index, "--set", "entities.max_gleanings=[1"), "is not valid YAML at line 1, column 3"),
        ((*index, "--set", "entities.max_gleanings=-1"), "entity_graph.max_gleanings -1 is refused: Input should be"),
        ((*index, "--set", "documents.chunk_size=0"), "corpus_documents.chunk_size 0 is refused"),
        ((*index, "--config", str(tmp_path / "broken.yaml")), "broken.yaml is not valid YAML at line 3, column 1"),
        ((*index, "--config", str(tmp_path / "missing.yaml")), "cannot read the run config"),
    ):
        refused = cli.run(*args)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines() == [f"error: {refused.stderr.split('error: ')[1].strip()}"]
        assert words in refused.stderr
    assert cli.runs() == 0


@pytest.mark.slow
def test_endpoint_variables_out_of_range_are_refused_in_one_line(tmp_path):
    write_corpus(tmp_path / "data" / "tiny", "three files")
    for variable, value, words in (
        ("GRAPHRAG_MAX_CONCURRENCY", "0", "GRAPHRAG_MAX_CONCURRENCY='0' cannot be used: it must be more than 0"),
        ("GRAPHRAG_RPM", "lots", "GRAPHRAG_RPM='lots' cannot be used: it is not a number"),
        ("GRAPHRAG_BATCH_API", "maybe", "GRAPHRAG_BATCH_API='maybe' cannot be used: use true or false"),
        ("GRAPHRAG_PRICES", "cheap", "GRAPHRAG_PRICES must be a JSON object of model to price per million tokens"),
        ("GRAPHRAG_PRICES", '{"m": -1}', "GRAPHRAG_PRICES: the price of 'm' must be a number of dollars"),
    ):
        home = tmp_path / f"{variable}{len(value)}"
        home.mkdir()
        cli = Cli(home, {variable: value, "GRAPHRAG_DATA_DIR": str(tmp_path / "data")})
        refused = cli.run("index", "--corpus", "tiny")
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {words}"), lines
        assert cli.runs() == 0


def test_a_dagster_run_config_with_resources_keeps_what_the_environment_configured(tmp_path):
    import dagster as dg

    from graphrag_assets.cli import resource_settings
    from graphrag_assets.resources import ChatModelResource

    launchpad = tmp_path / "run.yaml"
    launchpad.write_text(
        "ops:\n  entities:\n    config:\n      max_gleanings: 0\n"
        "resources:\n  chat:\n    config:\n      temperature: 0.5\n"
    )
    config = step_settings(str(launchpad), [])
    assert config == {
        "ops": {"entity_graph": {"config": {"max_gleanings": 0}}},
        "resources": {"chat": {"config": {"temperature": 0.5}}},
    }
    defs = dg.Definitions(
        resources={"chat": ChatModelResource(base_url="http://127.0.0.1:9/v1", api_key=dg.EnvVar("SOME_KEY"))}
    )
    assert resource_settings(defs, config["resources"]) == {
        "chat": {"config": {"base_url": "http://127.0.0.1:9/v1", "api_key": {"env": "SOME_KEY"}, "temperature": 0.5}}
    }


def test_the_cli_uses_the_project_it_is_run_inside(tmp_path):
    """From a sub-folder, the store, corpora and Dagster storage are the project's, and the CLI says so."""
    project = tmp_path / "project"
    (project / "data" / "notes").mkdir(parents=True)
    (project / "workspace.yaml").write_text("load_from: []\n")
    (project / "dagster.yaml").write_text("telemetry:\n  enabled: false\nstorage:\n  sqlite:\n    base_dir: .dagster\n")
    cli = Cli(tmp_path)
    env = {k: v for k, v in cli.env.items() if k not in ("DAGSTER_HOME", "GRAPHRAG_DATA_DIR", "GRAPHRAG_DUCKDB")}
    refused = subprocess.run(
        [sys.executable, "-m", "graphrag_assets.cli", "ask", "--corpus", "notes", "Who?"],
        env=env,
        cwd=project / "data" / "notes",
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert f"note: using the project at {project}" in refused.stderr
    assert "corpus 'notes' has no published index" in refused.stderr and refused.returncode == 2
    assert (project / ".dagster").is_dir() and not (project / "data" / "notes" / ".dagster").exists()


@pytest.mark.slow
def test_the_cli_takes_settings_and_says_what_is_wrong_in_one_line(tmp_path):
    write_corpus(tmp_path / "data" / "tiny", "three files")
    cli = Cli(tmp_path)
    indexed = cli.run(
        "index",
        "--corpus",
        "tiny",
        "--set",
        "documents.chunk_size=16",
        "--set",
        "documents.chunk_overlap=2",
        "--set",
        "covariates.enabled=false",
    )
    assert indexed.returncode == 0, indexed.stderr
    assert re.search(r"\[tiny\] community reports written: (\d+)/\1, 0 failed, done in", indexed.stderr)
    with duckdb.connect(str(cli.database), read_only=True) as conn:
        largest, units = conn.execute("SELECT max(n_tokens), count(*) FROM base_text_units").fetchone()
    assert 0 < largest <= 16 and units > 3  # the setting took: three short files, cut into chunks of 16 tokens

    first = cli.run("ask", "--corpus", "tiny", "--method", "local", "Who wrote letters?")
    assert first.returncode == 0, first.stderr
    answer_id = re.search(r"--follow-up (\S+)", first.stdout).group(1)
    follow = cli.run("ask", "--follow-up", answer_id, "And who read them?")  # corpus and method come with it
    assert follow.returncode == 0, follow.stderr
    with duckdb.connect(str(cli.database), read_only=True) as conn:
        method, turns = conn.execute(
            "SELECT method, conversation FROM query_answers WHERE question = 'And who read them?'"
        ).fetchone()
    assert method == "local" and [t["role"] for t in json.loads(turns)] == ["user", "assistant"]
    assert json.loads(turns)[0]["content"] == "Who wrote letters?"
    unknown = cli.run("ask", "--follow-up", "no-such-answer", "And then?")
    assert unknown.returncode == 2 and "no answer 'no-such-answer' is recorded" in unknown.stderr

    with open_instance(cli.home) as instance:  # the UI lists a job's runs by this label, as for its own runs
        labels = {run.tags.get(REPOSITORY_LABEL_TAG) for run in instance.get_runs()}
    assert labels == {f"__repository__@{CODE_LOCATION}"}
    runs = cli.runs()
    bad_level = cli.run("ask", "--corpus", "tiny", "--level", "7", "Who wrote letters?")
    assert bad_level.returncode == 2 and cli.runs() == runs  # refused before a run was launched
    assert bad_level.stderr.strip().splitlines() == [
        "error: community level 7 does not exist: this corpus has levels 0..0"
    ]
    questions = cli.run("ask", "--corpus", "tiny", "--method", "questions", "Who wrote letters?")
    assert questions.returncode == 0 and "--follow-up" not in questions.stdout  # nothing there to follow up
    bad_setting = cli.run("index", "--corpus", "tiny", "--set", "entities.no_such_setting=1")
    assert bad_setting.returncode == 2 and len(bad_setting.stderr.strip().splitlines()) == 1
    assert 'unexpected config entry "no_such_setting"' in bad_setting.stderr

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(cli.database)!r}, "
            "read_only=True); print('open', flush=True); time.sleep(3600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        # A reader does not stop a question: the answer is given at once, and its record waits in the queue
        # (the holder keeps the store until it is killed, so an ask that waited for it would never end).
        queued = cli.run("ask", "--corpus", "tiny", "Who wrote letters, while the store is held?")
    finally:
        holder.kill()
        holder.wait()
    assert queued.returncode == 0, queued.stderr
    assert "the answer is queued, and the next command records it" in queued.stdout
    recorded = cli.run("ask", "--corpus", "tiny", "--method", "basic", "Who wrote letters?")
    assert recorded.returncode == 0 and "trace it:" in recorded.stdout
    with duckdb.connect(str(cli.database), read_only=True) as conn:
        (held,) = conn.execute(
            "SELECT count(*) FROM query_answers WHERE question = 'Who wrote letters, while the store is held?'"
        ).fetchone()
    assert held == 1


def index_waiting_on_the_model(cli: Cli, server: FakeOpenAIServer) -> subprocess.Popen:
    """`index --corpus tiny`, once its run is inside the entity step, waiting on the model."""
    process = cli.start("index", "--corpus", "tiny")
    deadline = time.monotonic() + 120
    while not server.count("extract"):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.1)
    return process


@pytest.mark.slow
def test_a_killed_cli_run_is_marked_failed_by_the_next_command(tmp_path):
    write_corpus(tmp_path / "data" / "tiny", "three files")
    with FakeOpenAIServer(latency_seconds=2.0) as server:
        cli = Cli(tmp_path, {"GRAPHRAG_API_BASE": server.base_url})
        process = index_waiting_on_the_model(cli, server)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with open_instance(cli.home) as instance:
        (run,) = instance.get_runs()
        assert run.status.value == "STARTED" and run.tags[PID_TAG] == str(process.pid)
    swept = cli.run("ask", "--corpus", "tiny", "Who?")  # any command sweeps first
    assert f"run {run.run_id} was left STARTED by process {process.pid}, which is gone" in swept.stderr
    with open_instance(cli.home) as instance:
        assert instance.get_run_by_id(run.run_id).status.value == "FAILURE"


def test_the_cli_labels_its_runs_with_the_code_location_the_ui_loads():
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["python_module"]["location_name"] == CODE_LOCATION
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    assert project["dg"]["project"]["code_location_name"] == project["dagster"]["code_location_name"] == CODE_LOCATION


@pytest.mark.slow
def test_index_without_a_corpus_indexes_every_good_folder_and_names_the_others(tmp_path):
    data = tmp_path / "data"
    write_corpus(data / "tiny", "three files")
    (data / "empty").mkdir()
    (data / "Bad Name").mkdir()
    (data / "Bad Name" / "a.txt").write_text("Ada Lovelace wrote the first program.")
    (data / "broken").mkdir()
    (data / "broken" / "blob.txt").write_bytes(b"\x00\x01binary" * 10)  # nothing in it can be read
    cli = Cli(tmp_path)
    indexed = cli.run("index")
    assert indexed.returncode == 1, indexed.stderr
    assert "indexed tiny" in indexed.stdout and "FAILED  broken" in indexed.stdout
    assert f"skipped {data}/empty: it holds no documents yet" in indexed.stderr
    assert f"skipped {data}/Bad Name: corpus name 'Bad Name' is not a safe identifier" in indexed.stderr
    assert "1 of 2 corpora failed: broken (" in indexed.stderr
    with duckdb.connect(str(cli.database), read_only=True) as conn:
        corpora = {row[0] for row in conn.execute("SELECT DISTINCT corpus FROM entities").fetchall()}
        schemas = {row[0] for row in conn.execute("SELECT schema_name FROM information_schema.schemata").fetchall()}
    assert corpora == {"tiny"}  # the corpus after the failed one was indexed too
    assert not [name for name in schemas if name.startswith("stage_")]  # the failed run's stage went with it
    empty = cli.run("index", "--corpus", "empty")
    assert empty.returncode == 2 and "data/empty holds no documents yet: add files to it" in empty.stderr


def test_ctrl_c_landing_in_an_event_loop_callback_still_stops_the_step():
    """Dagster's handler raises its interrupt wherever the main thread is; in one of the loop's callbacks (as a
    socket read is) asyncio used to log it and go on, and the index ran to its end after Ctrl-C."""

    async def work() -> str:
        loop = asyncio.get_running_loop()
        loop.call_soon(signal.raise_signal, signal.SIGINT)  # Ctrl-C, arriving while the loop runs a callback
        for _ in range(3):  # the callback runs, then the step's work would go on to its end
            await asyncio.sleep(0)
        return "ran to its end"

    with raise_interrupts_as(DagsterExecutionInterruptedError):
        with pytest.raises(DagsterExecutionInterruptedError):
            run_interruptibly(work())
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # Dagster's handler is back


@pytest.mark.slow
def test_ctrl_c_ends_an_index_in_one_line_that_says_what_was_kept(tmp_path):
    write_corpus(tmp_path / "data" / "tiny", "three files")
    with FakeOpenAIServer(latency_seconds=2.0) as server:
        cli = Cli(tmp_path, {"GRAPHRAG_API_BASE": server.base_url})
        process = index_waiting_on_the_model(cli, server)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's foreground processes
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    ours = [line for line in stderr.splitlines() if line.startswith(("interrupted", "failed", "error"))]
    assert ours == [ours[0]] and ours[0].startswith("interrupted: the last complete index of tiny is unchanged")
    assert "DagsterExecutionInterruptedError" not in stderr
    with FakeOpenAIServer() as server:  # again, to the end: the hint to set a model is for offline indexes only
        (tmp_path / "again").mkdir()
        done = Cli(tmp_path / "again", {"GRAPHRAG_API_BASE": server.base_url, **_same_store(cli)}).run(
            "index", "--corpus", "tiny"
        )
    assert done.returncode == 0, done.stderr
    assert "engine: llm:" in done.stdout and "to use a model" not in done.stdout


def _same_store(cli: Cli) -> dict:
    return {k: cli.env[k] for k in ("GRAPHRAG_DATA_DIR", "GRAPHRAG_DUCKDB", "GRAPHRAG_CACHE_DIR")}


@pytest.mark.slow
def test_an_index_ends_with_what_it_spent_on_the_run_and_in_sql(tmp_path):
    """Requests, retries counted once ("retried, all answered"), cache, tokens and dollars: printed last, put on
    the run as tags, and in the store's model_usage view by run, step and corpus."""
    write_corpus(tmp_path / "data" / "tiny", "three files")
    with FakeOpenAIServer(Faults(transient_every=3, transient_status=500)) as server:
        cli = Cli(tmp_path, {"GRAPHRAG_API_BASE": server.base_url, "GRAPHRAG_PRICES": ""})
        indexed = cli.run("index", "--corpus", "tiny")
        retried = server.count("fault")
    assert indexed.returncode == 0, indexed.stderr
    assert retried > 0 and "model call failed" not in indexed.stderr
    spent = next(line for line in indexed.stdout.splitlines() if line.strip().startswith("spent"))
    match = re.search(r"([\d,]+) model requests \(([\d,]+) retried, all answered\), .* \$(\d+\.\d{4})", spent)
    assert match, spent
    with duckdb.connect(str(cli.database), read_only=True) as conn:
        by_step = conn.execute(
            "SELECT step, endpoint, requests, retries, cost_usd FROM model_usage WHERE corpus = 'tiny' ORDER BY step"
        ).df()
    assert {"entities", "text_embeddings"} <= set(by_step["step"])
    assert set(by_step["endpoint"]) == {"chat", "embeddings"}
    assert int(match[1].replace(",", "")) == by_step["requests"].sum()
    assert int(match[2].replace(",", "")) == by_step["retries"].sum() > 0
    assert float(match[3]) == pytest.approx(by_step["cost_usd"].sum(), abs=1e-4) and by_step["cost_usd"].sum() > 0
    with open_instance(cli.home) as instance:
        (run,) = instance.get_runs()
    assert int(run.tags["graphrag/requests"]) == by_step["requests"].sum()
    assert float(run.tags["graphrag/cost_usd"]) == pytest.approx(by_step["cost_usd"].sum())
    with open_instance(cli.home) as instance:
        published = instance.get_latest_materialization_event(dg.AssetKey("published_index")).asset_materialization
    metadata = {name: value.value for name, value in published.metadata.items()}
    assert metadata["model_requests"] == by_step["requests"].sum() and metadata["cost_usd"] > 0
    assert metadata["cost_per_run"].startswith("![cost per index run of tiny](data:image/png;base64,")
