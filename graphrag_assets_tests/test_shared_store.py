"""The store as a DuckLake catalog in a real PostgreSQL server, written by runs in several processes at once."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import polars as pl
import pytest

from graphrag_assets.store.connection import DUCKLAKE_PREFIX, connect
from graphrag_assets.store.schema import TABLES
from graphrag_assets.store.tables import Lineage, ensure_table, read_table, table_exists, write_table
from graphrag_assets_tests.corpora import split_sample
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import INDEX_ASSETS, SAMPLE_CORPUS, Workspace, open_instance
from .test_webserver import BACKFILL, backfill_status, dagster_services

WRITER = textwrap.dedent(
    """
    import sys
    import polars as pl
    from graphrag_assets.store.connection import connect
    from graphrag_assets.store.tables import Lineage, append_rows, write_table

    database, data_path, corpus = sys.argv[1:]
    conn = connect(database, data_path=data_path)
    for round in range(6):
        rows = pl.DataFrame({"id": [f"{corpus}-{i}" for i in range(40)], "title": corpus, "degree": round})
        write_table(conn, "entities", corpus, rows, Lineage("entities", corpus, f"run-{round}", "1", "offline"))
        append_rows(conn, "query_answers", corpus, pl.DataFrame({"id": [f"{corpus}-{round}"], "answer": "a"}))
    """
)


@pytest.mark.slow
def test_concurrent_writers_to_one_lake_lose_nothing(postgres, tmp_path):
    """Each corpus's rows replaced six times by its own process, all at once: DuckLake's commit conflicts
    between them are retried, and every process ends with its last write in place."""
    database = DUCKLAKE_PREFIX + "postgres:" + postgres.create_database("writers")
    corpora = ["north", "south", "east", "west"]
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, database, str(tmp_path / "files"), corpus], text=True)
        for corpus in corpora
    ]
    assert [w.wait(timeout=180) for w in writers] == [0] * len(corpora)
    with connect(database, data_path=str(tmp_path / "files"), read_only=True) as conn:
        entities = conn.sql("SELECT corpus, count(*), min(degree), max(degree) FROM entities GROUP BY ALL").fetchall()
        assert sorted(entities) == [(corpus, 40, 5, 5) for corpus in sorted(corpora)]
        lineage = dict(conn.sql("SELECT corpus, count(*) FROM lineage GROUP BY ALL").fetchall())
        assert lineage == dict.fromkeys(corpora, 6)
        answers = dict(conn.sql("SELECT corpus, count(*) FROM query_answers GROUP BY ALL").fetchall())
        assert answers == dict.fromkeys(corpora, 6)


def test_a_lake_store_names_no_password_when_it_cannot_open(tmp_path):
    with pytest.raises(RuntimeError, match="cannot open the DuckLake store") as problem:
        connect(
            f"{DUCKLAKE_PREFIX}postgres:dbname=x host=127.0.0.1 port=1 user=u password=hunter2",
            data_path=str(tmp_path),
        )
    assert "hunter2" not in str(problem.value)


def test_a_lake_keeps_its_files_in_s3(postgres, s3):
    """The production layout: the catalog in PostgreSQL, the data files in an S3 bucket (moto's S3 server here,
    reached as any S3-compatible endpoint is, through AWS_ENDPOINT_URL)."""
    s3.create_bucket(Bucket="lake")
    database = DUCKLAKE_PREFIX + "postgres:" + postgres.create_database("on_s3")
    rows = pl.DataFrame({"id": [f"e{i:03d}" for i in range(300)], "title": "Scrooge", "degree": 1})
    with connect(database, data_path="s3://lake/store/") as conn:
        write_table(conn, "entities", "carol", rows, Lineage("entities", "carol", "run", "1", "offline"))
    with connect(database, data_path="s3://lake/store/", read_only=True) as conn:
        assert read_table(conn, "entities", "carol")["id"].to_list() == rows["id"].to_list()
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket="lake")["Contents"]]
    assert keys and all(key.startswith("store/main/entities/corpus=carol/") for key in keys)


READER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from graphrag_assets.store.connection import connect

    database, data_path, stop = sys.argv[1:]
    conn = connect(database, data_path=data_path, read_only=True)  # one connection, held throughout
    reads = 0
    while not Path(stop).exists():
        conn.execute("SELECT count(*) FROM lineage").fetchone()
        reads += 1
        time.sleep(0.2)
    print(reads)
    """
)
QUESTIONS = [
    ("local", "Who is Bob Cratchit?"),
    ("global", "What are the main themes of the story?"),
    ("basic", "What does Scrooge see on Christmas morning?"),
]


def seed(database: str, data_path: str, source: Path) -> None:
    """The sample corpus's index, copied from a DuckDB file into the lake."""
    with connect(database, data_path=data_path) as conn:
        conn.execute(f"ATTACH '{source}' AS seed (READ_ONLY)")
        for table in [*TABLES, "lineage"]:
            if (
                table_exists(conn, table)
                or not conn.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_catalog = 'seed' AND table_name = ?",
                    [table],
                ).fetchone()[0]
            ):
                continue
            ensure_table(conn, table)
            conn.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM seed."{table}"')


def store_tables(conn: duckdb.DuckDBPyConnection, corpora: list[str]) -> dict[str, pd.DataFrame]:
    """Every table's rows of the corpora, in a stable order; runs' own ids and times left out."""
    tables = {}
    for table in TABLES:
        if table == "query_answers" or not table_exists(conn, table):
            continue
        frame = conn.execute(f'SELECT * FROM "{table}" WHERE list_contains(?, corpus) ORDER BY ALL', [corpora]).df()
        tables[table] = frame.reset_index(drop=True)
    tables["answers"] = conn.execute(
        "SELECT method, question, answer, context FROM query_answers WHERE question IN "
        f"({', '.join('?' * len(QUESTIONS))}) ORDER BY ALL",
        [q for _, q in QUESTIONS],
    ).df()
    return tables


@pytest.mark.slow
def test_index_and_query_runs_share_a_ducklake_store(postgres, offline_index, tmp_path):
    """Two corpora indexed and three questions asked at once, each in its own process, with a reader holding a
    connection open throughout: nothing waits on a lock, and the tables equal those of the same runs, one
    after the other, on a DuckDB file."""
    (tmp_path / "workspace").mkdir()
    workspace = Workspace(tmp_path / "workspace")
    workspace.add_sample_corpus()
    for name in ("one", "two"):
        split_sample(workspace.data / name, 8)
        for part in sorted((workspace.data / name).iterdir())[1:]:
            part.unlink()
    lake = DUCKLAKE_PREFIX + "postgres:" + postgres.create_database("runs")
    lake_files = str(tmp_path / "lake")
    seed(lake, lake_files, offline_index[0].database)
    shutil.copy(offline_index[0].database, workspace.database)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with open_instance(home) as instance:
        instance.add_dynamic_partitions("corpus", ["one", "two", SAMPLE_CORPUS])

    with FakeOpenAIServer(latency_seconds=0.02) as server:
        base = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "GRAPHRAG_CACHE_DIR": str(tmp_path / "cache"),
            "GRAPHRAG_DATA_DIR": str(workspace.data),
        }
        base = {k: v for k, v in base.items() if k not in ("GRAPHRAG_API_BASE", "GRAPHRAG_API_KEY")}
        commands = [
            ({"GRAPHRAG_API_BASE": server.base_url}, ["index", "--corpus", "one"]),
            ({"GRAPHRAG_API_BASE": server.base_url}, ["index", "--corpus", "two"]),
            *[({}, ["ask", "--corpus", SAMPLE_CORPUS, "--method", method, question]) for method, question in QUESTIONS],
        ]
        on_lake = {"GRAPHRAG_DUCKDB": lake, "GRAPHRAG_DUCKLAKE_DATA_PATH": lake_files}
        stop = tmp_path / "stop-reading"
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, lake, lake_files, str(stop)], stdout=subprocess.PIPE, text=True
        )
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "graphrag_assets.cli", *args],
                cwd=tmp_path,
                env={**base, **on_lake, **extra},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for extra, args in commands
        ]
        outputs = [run.communicate(timeout=900)[0] for run in runs]
        stop.touch()
        reads = reader.communicate(timeout=60)[0]
        for run, output in zip(runs, outputs):
            assert run.returncode == 0, output[-3000:]
        assert "lock" not in "".join(outputs).lower()
        assert reader.returncode == 0 and int(reads) > 0

        # The same runs, one after the other, on a DuckDB file (both corpora indexed by one command).
        on_file = {"GRAPHRAG_DUCKDB": str(workspace.database)}
        both = ({"GRAPHRAG_API_BASE": server.base_url}, ["index", "--corpus", "one", "--corpus", "two"])
        for extra, args in [both, *commands[2:]]:
            done = subprocess.run(
                [sys.executable, "-m", "graphrag_assets.cli", *args],
                cwd=tmp_path,
                env={**base, **on_file, **extra},
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    corpora = ["one", "two", SAMPLE_CORPUS]
    with connect(lake, data_path=lake_files, read_only=True) as conn:
        from_lake = store_tables(conn, corpora)
        sources = conn.sql("SELECT count(*) FROM answer_sources").fetchone()[0]
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        from_file = store_tables(conn, corpora)
    assert sources > 0
    assert from_lake.keys() == from_file.keys()
    assert len(from_lake["entities"].query("corpus == 'one'")) > 0
    for table in from_file:
        pd.testing.assert_frame_equal(from_lake[table], from_file[table], obj=table)


INSTANCE_ON_POSTGRES = """
storage:
  postgres:
    postgres_db:
      hostname: 127.0.0.1
      port: {port}
      username: {user}
      password: ""
      db_name: {database}
      scheme: postgresql+psycopg2  # SQLAlchemy 2.1 reads postgresql:// as psycopg 3, which is not installed
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 2
    dequeue_interval_seconds: 1  # the default 5 s, for each of the runs the backfill queues
telemetry:
  enabled: false
"""


def failures(home: Path) -> list[str]:
    """The failed steps of the instance's runs with their errors, for an assertion's message."""
    found = []
    with open_instance(home) as instance:
        for record in instance.get_run_records():
            for event in instance.all_logs(record.dagster_run.run_id):
                if event.dagster_event and event.dagster_event.is_step_failure:
                    error = event.dagster_event.step_failure_data.error
                    found.append(f"{record.dagster_run.tags.get('dagster/partition')}: {error.to_string()}")
    return found


@pytest.mark.slow
def test_a_backfill_over_run_workers_sharing_postgres_and_the_lake(postgres, tmp_path):
    """The Dagster instance in PostgreSQL, runs queued and handed by the daemon to run workers in their own
    processes, two at a time, all writing one DuckLake store: a backfill of three corpora runs each once."""
    (tmp_path / "workspace").mkdir()
    workspace = Workspace(tmp_path / "workspace")
    corpora = ["east", "north", "south"]
    for name in corpora:
        split_sample(workspace.data / name, 10)
        for part in sorted((workspace.data / name).iterdir())[1:]:
            part.unlink()
    home = tmp_path / "home"
    home.mkdir()
    config = INSTANCE_ON_POSTGRES.format(user=postgres.user, port=postgres.port, database="dagster")
    postgres.create_database("dagster")
    (home / "dagster.yaml").write_text(config)
    lake = DUCKLAKE_PREFIX + "postgres:" + postgres.create_database("backfill")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("GRAPHRAG_API_BASE", "GRAPHRAG_API_KEY")},
        "DAGSTER_HOME": str(home),
        "GRAPHRAG_DUCKDB": lake,
        "GRAPHRAG_DUCKLAKE_DATA_PATH": str(tmp_path / "lake"),
        "GRAPHRAG_CACHE_DIR": str(tmp_path / "cache"),
        "GRAPHRAG_DATA_DIR": str(workspace.data),
    }
    with open_instance(home) as instance:
        instance.add_dynamic_partitions("corpus", corpora)
    with dagster_services(env) as (client, _):
        index_assets = INDEX_ASSETS[: INDEX_ASSETS.index("relationships") + 1]  # the graph: enough to share a lake
        launched = client._execute(
            BACKFILL,
            {"params": {"assetSelection": [{"path": [a]} for a in index_assets], "partitionNames": corpora}},
        )["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        status = backfill_status(client, launched["backfillId"], timeout=600)
        assert status in ("COMPLETED", "COMPLETED_SUCCESS"), failures(home)

    with open_instance(home) as instance:
        runs = instance.get_run_records()
        assert sorted(r.dagster_run.tags["dagster/partition"] for r in runs) == corpora  # each corpus once
        assert {r.dagster_run.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
        workers = {
            r.dagster_run.run_id: [
                e.message for e in instance.all_logs(r.dagster_run.run_id) if "Started process for run" in e.message
            ]
            for r in runs
        }
    # Each run in its own run-worker process; at most two at once, and the queue did overlap them.
    assert all(len(messages) == 1 for messages in workers.values()), workers
    assert len({messages[0] for messages in workers.values()}) == len(corpora)
    spans = sorted((r.start_time, r.end_time) for r in runs)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
    assert not any(a[1] > c[0] for a, _, c in zip(spans, spans[1:], spans[2:]))
    with connect(lake, data_path=str(tmp_path / "lake"), read_only=True) as conn:
        written = conn.sql(
            "SELECT corpus, count(*) FROM lineage WHERE asset = 'entities' GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        entities = dict(conn.sql("SELECT corpus, count(*) FROM entities GROUP BY ALL").fetchall())
    assert written == [(corpus, 1) for corpus in corpora]
    assert all(entities[corpus] > 0 for corpus in corpora)
