"""An index run publishes all or nothing: until every step has succeeded, readers see the last complete index."""

import uuid

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pytest

from graphrag_assets.automation.runs import failed_stages_sensor
from graphrag_assets.method.embeddings.text import EMBEDDING_MODEL_TABLES, LocalEmbedder
from graphrag_assets.resources import DuckDBStoreResource
from graphrag_assets.store.tables import (
    Lineage,
    StageDropped,
    parts_for,
    read_table,
    row_count,
    stage_name,
    use_stage,
    write_table,
    write_table_from_query,
)
from graphrag_assets_tests.model_server import FakeOpenAIServer, Faults

from .conftest import Workspace, chat_resource, embedding_resource
from .test_small_corpora import write_corpus

CORPUS = "letters"


def published_tables(workspace: Workspace) -> dict[str, pd.DataFrame]:
    """Every table of the corpus as a reader sees it (the logs aside: lineage has failed runs' steps too, and
    dropped_stages the stages that publishing dropped, failed_step_usage what failed steps paid)."""
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_type = 'BASE "
                "TABLE' AND table_name NOT IN ('lineage', 'dropped_stages', 'failed_step_usage') ORDER BY 1"
            ).fetchall()
        ]
        tables = {
            name: conn.execute(f'SELECT * FROM "{name}" WHERE corpus = ? ORDER BY id', [CORPUS]).df() for name in names
        }
        tables["answer_sources"] = conn.execute("SELECT * FROM answer_sources ORDER BY ALL").df()
        tables["stages"] = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'stage%' ORDER BY 1"
        ).df()
    return tables


def reindex(workspace: Workspace, faults: Faults | None = None, cache=None) -> bool:
    """Index the corpus again; `cache` apart from the workspace's, so that every step asks the model again."""
    cache = cache or workspace.cache
    with FakeOpenAIServer(faults) as server:
        result = workspace.materialize(
            CORPUS,
            chat=chat_resource(server.base_url, cache, max_retries=0, invalid_reply_retries=0),
            embeddings=embedding_resource(server.base_url, cache, max_retries=0),
            raise_on_error=False,
        )
    return result.success


@pytest.mark.slow
def test_a_reindex_that_fails_at_any_model_step_leaves_the_last_index_as_it_was(tmp_path):
    workspace = Workspace(tmp_path)
    write_corpus(workspace.data / CORPUS, "three files")
    assert reindex(workspace)
    with FakeOpenAIServer() as server:
        asked = workspace.ask(
            CORPUS,
            "local_search",
            {"question": "Who wrote letters?"},
            chat=chat_resource(server.base_url, workspace.cache),
            embeddings=embedding_resource(server.base_url, workspace.cache),
        )
    assert asked.success
    before = published_tables(workspace)
    assert len(before["answer_sources"]) > 0 and before["stages"].empty

    edited = workspace.data / CORPUS / "a.txt"
    edited.write_text("Ada Lovelace wrote the notes on the engine. Mary Somerville introduced her to Babbage.")
    for step in ("extract", "claims", "report", "embed"):  # (three short files need no description summary)
        refused = Faults(refused_kinds=frozenset({step}))
        assert not reindex(workspace, refused, tmp_path / f"cache-{step}"), f"{step} refused, yet the run passed"
        after = published_tables(workspace)
        for name, table in before.items():
            if name != "stages":
                pd.testing.assert_frame_equal(after[name], table, obj=f"{name} after a run failed at {step}")

    assert reindex(workspace)  # the next good run replaces the index whole, and drops the failed runs' stages
    final = published_tables(workspace)
    assert final["stages"].empty
    assert "Mary Somerville" in " ".join(final["documents"]["text"])
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        dangling = conn.execute(
            "SELECT count(*) FROM entities e, unnest(e.text_unit_ids) AS u(id) WHERE e.corpus = ? "
            "AND u.id NOT IN (SELECT id FROM text_units WHERE corpus = ?)",
            [CORPUS, CORPUS],
        ).fetchone()[0]
    assert dangling == 0


@pytest.mark.slow
def test_publishing_drops_the_stages_of_ended_runs_and_keeps_one_still_going(tmp_path):
    """Two index runs of one corpus can overlap (the nightly schedule and a manual run): the first to publish
    must not pull the other's stage from under it, and a failed run's stage goes with the next publication."""
    workspace = Workspace(tmp_path)
    write_corpus(workspace.data / CORPUS, "three files")
    instance = dg.DagsterInstance.ephemeral()
    going, ended = (dg.DagsterRun(job_name="index_corpus", run_id=str(uuid.uuid4())) for _ in range(2))
    instance.add_run(going.with_status(dg.DagsterRunStatus.STARTED))
    instance.add_run(ended.with_status(dg.DagsterRunStatus.FAILURE))
    workspace.materialize(CORPUS, selection=["documents", "base_text_units"])  # the store exists
    with duckdb.connect(str(workspace.database)) as conn:
        for run in (going, ended):
            conn.execute(f'CREATE SCHEMA "{stage_name(CORPUS, run.run_id)}"')
    workspace.materialize(CORPUS, instance=instance)
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        stages = {name for (name,) in conn.execute("SELECT schema_name FROM information_schema.schemata").fetchall()}
    assert stage_name(CORPUS, going.run_id) in stages and stage_name(CORPUS, ended.run_id) not in stages


def stages(workspace: Workspace) -> set[str]:
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        return {
            name
            for (name,) in conn.execute("SELECT schema_name FROM information_schema.schemata").fetchall()
            if name.startswith("stage_")
        }


@pytest.mark.slow
def test_a_failed_run_with_no_retry_to_follow_loses_its_stage_and_cannot_be_reexecuted_into_a_mix(tmp_path):
    """Staged tables and exports go when an index run ends red (`failed_stages_sensor`, as the daemon runs it),
    unless a retry of the run is coming, which needs them; a stage once dropped refuses to be staged into again,
    so re-executing the run from its failure cannot publish its later steps over another run's tables."""
    workspace = Workspace(tmp_path)
    write_corpus(workspace.data / CORPUS, "three files")
    instance = dg.DagsterInstance.ephemeral()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the parquet export wants a folder, so that the run fails after the GraphML one")
    with FakeOpenAIServer() as server:
        failed = workspace.materialize(
            CORPUS,
            chat=chat_resource(server.base_url, workspace.cache),
            embeddings=embedding_resource(server.base_url, workspace.cache),
            run_config={
                "ops": {
                    "graphml_export": {"config": {"folder": str(tmp_path / "exports")}},
                    "parquet_export": {"config": {"folder": str(blocked)}},
                }
            },
            raise_on_error=False,
            instance=instance,
        )
    assert not failed.success
    stage = stage_name(CORPUS, failed.run_id)
    assert stage in stages(workspace)
    assert list((tmp_path / "exports").rglob(f"*{stage}*"))  # the GraphML export was staged
    run = instance.get_run_by_id(failed.run_id)
    failure = next(e for e in failed.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)

    def sense(run: dg.DagsterRun) -> None:
        context = dg.build_run_status_sensor_context(
            sensor_name="failed_stages_sensor",
            dagster_instance=instance,
            dagster_run=run,
            dagster_event=failure,
            resources={"duckdb": workspace.resources()["duckdb"]},
        ).for_run_failure()
        failed_stages_sensor(context)

    # A retry is coming (the run queue's auto-retry tags the failed run so): it re-executes from the failure,
    # reading what the earlier steps staged.
    instance.add_run_tags(run.run_id, {"dagster/will_retry": "true"})
    sense(instance.get_run_by_id(run.run_id))
    assert stage in stages(workspace)

    instance.add_run_tags(run.run_id, {"dagster/will_retry": "false"})  # the last retry failed too
    sense(instance.get_run_by_id(run.run_id))
    assert stage not in stages(workspace)
    assert not list((tmp_path / "exports").rglob(f"*{stage}*"))
    with duckdb.connect(str(workspace.database)) as conn, pytest.raises(StageDropped, match="launch a new index run"):
        use_stage(conn, stage)


@pytest.mark.slow
def test_the_stores_memory_bound_is_a_target_that_an_allocation_larger_than_it_passes_never_a_failure(tmp_path):
    """Past the bound DuckDB evicts and spills rather than growing the step's process; one allocation larger than the
    bound raises it for that connection instead of failing the step (a 256 MiB bound failed the offline embedding of
    a real corpus). A memory_limit in connection_config wins."""
    database = str(tmp_path / "graphrag.duckdb")
    for store, limit in (
        (DuckDBStoreResource(database=database), "256.0 MiB"),
        (DuckDBStoreResource(database=database, memory_limit="64MiB"), "64.0 MiB"),
        (DuckDBStoreResource(database=database, connection_config={"memory_limit": "1GiB"}), "1.0 GiB"),
    ):
        with store.get_connection() as conn:
            assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == limit
    # One value of 48 MiB, written and read through a connection bounded to 16 MiB.
    whole = pl.DataFrame({"id": ["offline"], "components": [np.arange(12 * 2**20, dtype=np.float32)]})
    whole = whole.with_columns(pl.col("components").cast(pl.List(pl.Float32)))
    with DuckDBStoreResource(database=database, memory_limit="16MiB").get_connection() as conn:
        write_table(conn, "embedding_model_terms", "big", whole, Lineage("embedding_model_terms", "big", "r", "1", "o"))
        again = read_table(conn, "embedding_model_terms", "big")
        raised = conn.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert again["components"][0].len() == 12 * 2**20 and raised != "16.0 MiB"


def test_wide_rows_past_the_bound_are_read_in_id_order_without_raising_it(tmp_path):
    """DuckDB's sort of wide rows pins them all at once: past the bound, the rows are read as they lie and sorted in
    the process, which holds them anyway, in the same order (raising the bound cost more memory at 200 MB)."""
    rng = np.random.default_rng(3)
    ids = [f"{n:08x}" for n in rng.permutation(3_000)]
    texts = ["".join(rng.choice(list("abcdefgh "), 20_000)) for _ in ids]
    units = pl.DataFrame({"id": ids, "text": texts})  # 60 MB of text, in no order
    database = str(tmp_path / "graphrag.duckdb")
    with DuckDBStoreResource(database=database).get_connection() as conn:
        write_table(conn, "text_units", "big", units, Lineage("text_units", "big", "r", "1", "none"))
    with DuckDBStoreResource(database=database, memory_limit="16MiB").get_connection() as conn:
        with pytest.raises(duckdb.OutOfMemoryException):  # what read_table meets
            conn.execute("SELECT id, text FROM text_units ORDER BY id").pl()
        again = read_table(conn, "text_units", "big")
        bound = conn.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert bound == "16.0 MiB"
    assert again.select("id", "text").equals(units.sort("id"))


def test_a_large_offline_model_is_stored_in_bounded_pieces(tmp_path):
    """A row per term: no value grows with the vocabulary (the whole model as one value of a real corpus's half a
    million terms was a 256 MiB allocation)."""
    terms = 100_000
    model = LocalEmbedder(
        tuple(f"term{n}" for n in range(terms)),
        np.linspace(1.0, 9.0, terms),
        np.random.default_rng(0).random((128, terms), dtype=np.float32),
        stop_words=True,
    )
    _, rows = model.to_tables()
    assert len(rows) == terms and rows["components"].list.len().max() == 128
    with DuckDBStoreResource(database=str(tmp_path / "graphrag.duckdb")).get_connection() as conn:
        for table, rows in zip(EMBEDDING_MODEL_TABLES, model.to_tables()):
            write_table(conn, table, "big", rows, Lineage(table, "big", "run", "1", "offline"))
        again = LocalEmbedder.from_tables(*(read_table(conn, table, "big") for table in EMBEDDING_MODEL_TABLES))
    assert again.vocabulary == model.vocabulary and np.array_equal(again.components, model.components)


def test_a_table_written_by_a_query_has_the_version_of_the_same_rows_written_as_a_frame(tmp_path):
    """A step that only joins stored tables has DuckDB write its rows (they never pass through the process). The data
    version is worked out where the rows are stored, so the same rows have the same version however they came and
    in whatever order, and one changed value gives another. Another corpus's rows stay as they were."""
    units = pl.DataFrame(
        {"id": [f"u{n:05d}" for n in range(12_001)], "text": [f"text {n} \x00\x02 é" for n in range(12_001)]}
    ).with_columns(pages=pl.lit([1, 2]), entity_ids=pl.lit(["e1"]))
    lineage = Lineage("text_units", "big", "run", "1", "none")
    with DuckDBStoreResource(database=str(tmp_path / "graphrag.duckdb")).get_connection() as conn:
        as_frame = write_table(conn, "text_units", "other", units, lineage)
        conn.execute("CREATE TABLE source AS SELECT * FROM text_units")
        version, rows = write_table_from_query(
            conn, "text_units", "big", "SELECT * EXCLUDE (corpus) FROM source", lineage
        )
        assert (version, rows) == (as_frame, len(units))
        assert read_table(conn, "text_units", "big").equals(read_table(conn, "text_units", "other"))
        reordered = "SELECT entity_ids, pages, text, id FROM source ORDER BY id DESC"
        assert write_table_from_query(conn, "text_units", "big", reordered, lineage)[0] == as_frame
        changed = "SELECT * EXCLUDE (corpus, text), replace(text, 'text 7 ', 'text 8 ') AS text FROM source"
        assert write_table_from_query(conn, "text_units", "big", changed, lineage)[0] != as_frame
        write_table_from_query(conn, "text_units", "big", "SELECT * EXCLUDE (corpus) FROM source LIMIT 1", lineage)
        assert row_count(conn, "text_units", "big") == 1 and row_count(conn, "text_units", "other") == len(units)
        with pytest.raises(ValueError, match="table text_units has no columns \\['score'\\]"):
            write_table_from_query(conn, "text_units", "big", "SELECT id, 1 AS score FROM source", lineage)
        # In parts: as many as the sizing query's bytes over the memory bound, each part inserting its own rows.
        conn.execute("SET memory_limit = '64MiB'")
        sized = "SELECT 7 * 64 * 1024 * 1024 - length($corpus)"  # a sizing query reads the corpus it sizes
        assert (parts_for(conn, sized, "big"), parts_for(conn, "SELECT length($corpus) - 3", "big")) == (7, 1)
        in_parts = "SELECT * EXCLUDE (corpus) FROM source WHERE hash(id) % $parts = $part"
        assert write_table_from_query(conn, "text_units", "big", in_parts, lineage, sized) == (as_frame, len(units))
