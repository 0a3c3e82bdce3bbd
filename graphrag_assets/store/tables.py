"""Writes (one corpus's rows replaced in one transaction, with a lineage row) and reads."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import tenacity

from .connection import memory_bound, with_room
from .schema import FAILED_STEP_USAGE, LINEAGE, MODEL_USAGE_VIEW, TABLES

_IN_THIS_DATABASE = "table_catalog = current_database()"  # not a table of the same name in another attached database


@dataclass
class Lineage:
    asset: str
    corpus: str
    run_id: str
    code_version: str
    engine: str
    upstream_versions: dict[str, str] = field(default_factory=dict)
    model_usage: dict | None = None
    inputs: str = ""  # a fingerprint of code version, engine, upstream versions and settings: see assets/publishing.py
    settings: dict | None = None


def stored_version(conn: duckdb.DuckDBPyConnection, table: str, corpus: str) -> str:
    """A content hash of the corpus's rows of a table, so unchanged outputs keep their version, worked out by DuckDB
    where the rows are: a sum of every row's hash, which no order of the rows changes. A row's hash is of its
    columns' hashes, each of the text itself or of the value as JSON: nothing is copied out of the store, no sort
    is needed, and no copy of a row is made (as JSON, a chunk of 2,048 documents' rows took 1 GiB at 200 MB)."""
    columns = conn.execute(f'DESCRIBE SELECT * EXCLUDE (corpus) FROM "{table}"').fetchall()
    hashes = ", ".join(
        f"""coalesce(md5({f'"{name}"' if kind == "VARCHAR" else f'to_json("{name}")'}), '-')"""
        for name, kind, *_ in columns
    )
    count, upper, lower = conn.execute(
        f"""SELECT count(*), sum(md5_number_upper(row_hash)), sum(md5_number_lower(row_hash))
              FROM (SELECT concat_ws(',', {hashes}) AS row_hash FROM "{table}" WHERE corpus = ?)""",
        [corpus],
    ).fetchone()
    names = ",".join(f"{name}:{kind}" for name, kind, *_ in columns)
    return hashlib.sha256(f"{names}:{count}:{upper}:{lower}".encode()).hexdigest()[:16]


def ensure_table(conn: duckdb.DuckDBPyConnection, table: str, schema: str | None = None) -> None:
    """Create the table in `schema` (the connection's current one: a run's stage while it stages), or add the
    columns a newer version of the project declares."""
    schema = schema or _current_schema(conn)
    columns = LINEAGE if table == "lineage" else {**TABLES[table], "corpus": "VARCHAR"}
    existing = {
        row[0]
        for row in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            f"WHERE table_name = ? AND table_schema = ? AND {_IN_THIS_DATABASE}",
            [table, schema],
        ).fetchall()
    }
    if existing:
        for name, kind in columns.items():
            if name not in existing:
                conn.execute(f'ALTER TABLE "{schema}"."{table}" ADD COLUMN "{name}" {kind}')
    else:
        definition = ", ".join(f'"{name}" {kind}' for name, kind in columns.items())
        conn.execute(f'CREATE TABLE "{schema}"."{table}" ({definition})')
    # The view over it, once (a store made before the view gets it at its next write). Checked before, not created
    # "if not exists" at every write: on DuckLake each DDL statement is a catalog commit of its own.
    if table == "lineage" and not (existing and _usage_view_is_current(conn, schema)):
        _create_table(conn, "main", "failed_step_usage", FAILED_STEP_USAGE)
        view = MODEL_USAGE_VIEW.format(lineage=f'"{schema}".lineage')
        conn.execute(f'CREATE OR REPLACE VIEW "{schema}".model_usage AS {view}')
    if existing:
        return
    if _is_ducklake(conn) and table != "lineage":
        # Each corpus in its own files: replacing one corpus's rows rewrites no other corpus's data.
        conn.execute(f'ALTER TABLE "{schema}"."{table}" SET PARTITIONED BY (corpus)')


def _current_schema(conn: duckdb.DuckDBPyConnection) -> str:
    return conn.execute("SELECT current_schema()").fetchone()[0]


# A run of the whole index stages its tables in a schema of its own and publishes them in one transaction at the
# end (`publish_stage`): until then readers see the last complete index, and a failed or killed run leaves it as it
# was. Unqualified names resolve through the connection's search path: the stage first, then main.
_STAGE_PREFIX = "stage_"


def stage_name(corpus: str, root_run_id: str) -> str:
    """The stage of one index run (and of its retries, which share the root run's id) of one corpus."""
    return f"{_STAGE_PREFIX}{corpus}_{root_run_id.replace('-', '')}"


class StageDropped(Exception):
    """A re-execution of a run whose stage was dropped when the run failed: its earlier steps' tables are gone."""


def use_stage(conn: duckdb.DuckDBPyConnection, stage: str) -> None:
    """Write into the stage and read from it before main, on this connection."""
    if (
        table_exists_in(conn, "main", "dropped_stages")
        and conn.execute("SELECT count(*) FROM main.dropped_stages WHERE stage = ?", [stage]).fetchone()[0]
    ):
        # Reading the published tables in place of the dropped ones would publish a mix of two runs.
        raise StageDropped(
            f"the tables this run's earlier steps staged ({stage}) were dropped when it failed, so it cannot be "
            "re-executed from where it stopped: launch a new index run of the corpus (model replies are cached and "
            "are not paid for again)"
        )
    database = conn.execute("SELECT current_database()").fetchone()[0]
    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{stage}"')
    conn.execute(f"""SET search_path = '"{database}"."{stage}","{database}"."main"'""")


def stages_of(conn: duckdb.DuckDBPyConnection, corpus: str) -> dict[str, str]:
    """The stages the corpus's index runs have in the store: {schema: root run id}."""
    prefix, hex_id = f"{_STAGE_PREFIX}{corpus}_", re.compile(r"[0-9a-f]{32}")
    return {
        name: str(uuid.UUID(name.removeprefix(prefix)))
        for (name,) in conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE catalog_name = current_database()"
        ).fetchall()
        if name.startswith(prefix) and hex_id.fullmatch(name.removeprefix(prefix))
    }


def publish_stage(
    conn: duckdb.DuckDBPyConnection, stage: str, corpus: str, leftovers: list[str] = ()
) -> dict[str, int]:
    """Replace the corpus's rows of every table the stage holds, and add its lineage rows, in one transaction;
    then drop the stage, and the `leftovers` (stages of the corpus's runs that ended without publishing).
    Returns the rows published per table."""
    staged = [
        name
        for (name,) in conn.execute(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND {_IN_THIS_DATABASE} "
            "AND table_type = 'BASE TABLE' ORDER BY table_name",  # not the model_usage view
            [stage],
        ).fetchall()
    ]
    published: dict[str, int] = {}

    def swap() -> None:
        for table in staged:
            ensure_table(conn, table, schema="main")
            columns = ", ".join(
                f'"{name}"'
                for (name,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    f"WHERE table_name = ? AND table_schema = ? AND {_IN_THIS_DATABASE} ORDER BY ordinal_position",
                    [table, stage],
                ).fetchall()
            )
            if table != "lineage":  # lineage is a log: the stage's rows are added to it
                conn.execute(f'DELETE FROM main."{table}" WHERE corpus = ?', [corpus])
            conn.execute(f'INSERT INTO main."{table}" ({columns}) SELECT {columns} FROM "{stage}"."{table}"')
            published[table] = conn.execute(f'SELECT count(*) FROM "{stage}"."{table}"').fetchone()[0]

    in_transaction(conn, swap)
    for dropped in (stage, *leftovers):
        drop_stage(conn, dropped)
    return published


def drop_stage(conn: duckdb.DuckDBPyConnection, stage: str) -> None:
    """Drop a stage, and remember it was dropped so that a re-execution of its run refuses (`use_stage`)."""
    conn.execute("CREATE TABLE IF NOT EXISTS main.dropped_stages (stage VARCHAR, dropped_at TIMESTAMP)")
    conn.execute(f'DROP SCHEMA IF EXISTS "{stage}" CASCADE')
    conn.execute("INSERT INTO main.dropped_stages VALUES (?, now())", [stage])


def _lineage(conn: duckdb.DuckDBPyConnection) -> str | None:
    """The lineage rows a reader sees (None: none yet): the published ones and, in a staged run, its own staged ones."""
    schemas = [
        row[0]
        for row in conn.execute(
            f"SELECT table_schema FROM information_schema.tables WHERE table_name = 'lineage' AND {_IN_THIS_DATABASE}"
        ).fetchall()
    ]
    current = _current_schema(conn)
    visible = [f'"{schema}".lineage' for schema in dict.fromkeys(("main", current)) if schema in schemas]
    if len(visible) < 2:
        return visible[0] if visible else None
    return f"(SELECT * FROM {visible[0]} UNION ALL BY NAME SELECT * FROM {visible[1]})"


def _is_ducklake(conn: duckdb.DuckDBPyConnection) -> bool:
    kind = conn.execute("SELECT type FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return bool(kind) and kind[0] == "ducklake"


def _usage_view_is_current(conn: duckdb.DuckDBPyConnection, schema: str) -> bool:
    """Whether the schema's model_usage view exists and counts failed steps (a store made before they were kept
    has a view without them: it is replaced once)."""
    found = conn.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = 'model_usage' AND schema_name = ? "
        "AND database_name = current_database()",
        [schema],
    ).fetchone()
    return bool(found) and "failed_step_usage" in found[0]


def _create_table(conn: duckdb.DuckDBPyConnection, schema: str, table: str, columns: dict[str, str]) -> None:
    definition = ", ".join(f'"{name}" {kind}' for name, kind in columns.items())
    conn.execute(f'CREATE TABLE IF NOT EXISTS "{schema}"."{table}" ({definition})')


def record_failed_step(
    conn: duckdb.DuckDBPyConnection, asset: str, corpus: str, run_id: str, model_usage: dict
) -> None:
    """What a step paid before it failed, in main (a failed run's stage is dropped; what it paid stays paid)."""
    ensure_table(conn, "lineage", "main")  # with it, the failed steps' table and the model_usage view over both
    conn.execute(
        'INSERT INTO "main".failed_step_usage VALUES (?, ?, ?, ?, ?)',
        [asset, corpus, run_id, json.dumps(model_usage), dt.datetime.now(dt.UTC).replace(tzinfo=None)],
    )


def record_lineage(conn: duckdb.DuckDBPyConnection, lineage: Lineage, corpus: str, version: str, rows: int) -> None:
    ensure_table(conn, "lineage")
    conn.execute(
        """INSERT INTO lineage (asset, corpus, run_id, code_version, data_version, upstream_versions, row_count,
           engine, model_usage, materialized_at, inputs, settings) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            lineage.asset,
            corpus,
            lineage.run_id,
            lineage.code_version,
            version,
            json.dumps(lineage.upstream_versions, sort_keys=True),
            rows,
            lineage.engine,
            json.dumps(lineage.model_usage) if lineage.model_usage is not None else None,
            dt.datetime.now(dt.UTC).replace(tzinfo=None),
            lineage.inputs,
            json.dumps(lineage.settings, sort_keys=True, default=str) if lineage.settings is not None else None,
        ],
    )


def write_table(conn: duckdb.DuckDBPyConnection, table: str, corpus: str, df: pl.DataFrame, lineage: Lineage) -> str:
    """Replace the corpus's rows of `table` with `df` and record a lineage row; returns the data version."""
    unknown = set(df.columns) - set(TABLES[table])
    if unknown:
        raise ValueError(f"table {table} has no columns {sorted(unknown)}; declare them in store/schema.py")
    version = ""

    def replace_rows() -> None:
        nonlocal version
        ensure_table(conn, table)
        conn.execute(f'DELETE FROM "{table}" WHERE corpus = ?', [corpus])
        if len(df):
            _insert(conn, table, corpus, df)
        version = stored_version(conn, table, corpus)
        record_lineage(conn, lineage, corpus, version, len(df))

    in_transaction(conn, replace_rows)
    return version


def write_table_from_query(
    conn: duckdb.DuckDBPyConnection, table: str, corpus: str, query: str, lineage: Lineage, sized_by: str = ""
) -> tuple[str, int]:
    """Replace the corpus's rows of `table` with the rows of `query` (which reads the corpus as `$corpus`), run by
    DuckDB itself: past its memory bound it spills, where a frame is held whole in the process. Returns the data
    version and the row count.

    With `sized_by` (a query of the bytes `query` holds at once, beyond what DuckDB can spill), `query` keeps the
    rows of part `$part` of `$parts` and runs once a part, as many parts as that takes within DuckDB's memory bound.
    """
    written: tuple[str, int] = ("", 0)

    rows = f"SELECT *, $corpus AS corpus FROM ({query})"  # the query may leave $corpus unread (a test's may)

    def replace_rows() -> None:
        nonlocal written
        ensure_table(conn, table)
        parts = parts_for(conn, sized_by, corpus) if sized_by else 0
        each = [{"corpus": corpus, "part": part, "parts": parts} for part in range(parts)] or [{"corpus": corpus}]
        described = conn.execute(f"{rows} LIMIT 0", each[0]).description
        columns = [column[0] for column in described][:-1]
        unknown = set(columns) - set(TABLES[table])
        if unknown:
            raise ValueError(f"table {table} has no columns {sorted(unknown)}; declare them in store/schema.py")
        conn.execute(f'DELETE FROM "{table}" WHERE corpus = ?', [corpus])
        for parameters in each:
            conn.execute(f'INSERT INTO "{table}" BY NAME {rows}', parameters)
        written = (stored_version(conn, table, corpus), row_count(conn, table, corpus))
        record_lineage(conn, lineage, corpus, *written)

    in_transaction(conn, replace_rows)
    return written


def parts_for(conn: duckdb.DuckDBPyConnection, sized_by: str, corpus: str) -> int:
    """How many parts a query that `sized_by` sizes is run in: its bytes over DuckDB's memory bound, at least one."""
    held = conn.execute(sized_by, {"corpus": corpus}).fetchone()[0] or 0
    return max(1, -(-int(held) // memory_bound(conn)))


# A DuckLake catalog shared by several processes settles most concurrent commits itself; the rest (an insert
# while another run deleted from the same table, two creates of one table) fail at COMMIT and are retried whole.
_conflict_retries = tenacity.Retrying(
    retry=tenacity.retry_if_exception(
        lambda error: isinstance(error, duckdb.TransactionException) and "conflict" in str(error).lower()
    ),
    stop=tenacity.stop_after_delay(300),
    wait=tenacity.wait_random_exponential(multiplier=0.1, max=5),
    reraise=True,
)


def in_transaction(conn: duckdb.DuckDBPyConnection, work: Callable[[], None]) -> None:
    """Run `work` in one transaction, again from the start when a concurrent writer's commit conflicts, or with more
    memory when one allocation did not fit DuckDB's bound (connection.with_room)."""
    with_room(conn, lambda: _transaction(conn, work))


def _transaction(conn: duckdb.DuckDBPyConnection, work: Callable[[], None]) -> None:
    for attempt in _conflict_retries.copy():
        with attempt:
            conn.execute("BEGIN TRANSACTION")
            try:
                work()
                conn.execute("COMMIT")
            except Exception:
                try:
                    conn.execute("ROLLBACK")
                except duckdb.TransactionException:
                    pass  # a failed COMMIT has ended the transaction already
                raise


def _insert(conn: duckdb.DuckDBPyConnection, table: str, corpus: str, df: pl.DataFrame) -> None:
    """The rows in one INSERT that DuckDB reads from a parquet file of them, a row group at a time.

    Handed over as a stream of Arrow batches, the same rows cost DuckDB five times their size on top of the frame:
    196 MiB of communities (200 MB of text) took the process from 889 to 1,807 MiB, against 893 from a file, which
    DuckDB reads within its memory bound. The file is written by pyarrow from the frame's own string views (no
    copy): polars' parquet writer took 526 MiB more and 11 s for 1.3M relationships, pyarrow 7 MiB and 2 s."""
    columns = ", ".join(f'"{c}"' for c in [*df.columns, "corpus"])
    with tempfile.TemporaryDirectory(prefix="graphrag-insert-") as folder:
        path = Path(folder) / f"{table}.parquet"
        rows = df.with_columns(corpus=pl.lit(corpus)).to_arrow(compat_level=pl.CompatLevel.newest())
        pq.write_table(rows, path, row_group_size=_INSERT_ROW_GROUP)
        conn.execute(f'INSERT INTO "{table}" ({columns}) SELECT {columns} FROM read_parquet(?)', [str(path)])


_INSERT_ROW_GROUP = 2000  # rows DuckDB reads from the file at once (a community's id lists can be long)


def append_rows(conn: duckdb.DuckDBPyConnection, table: str, corpus: str, df: pl.DataFrame, view: str = "") -> int:
    """Add rows to a log such as query_answers, and (re)create a view over them; returns how many were new.

    A row whose id the table holds already is left out, so rows written again after a crash (a queue replayed)
    appear once."""
    added = 0

    def append() -> None:
        nonlocal added
        ensure_table(conn, table)
        present = {
            row_id
            for (row_id,) in conn.execute(
                f'SELECT id FROM "{table}" WHERE list_contains(?, id)', [df["id"].to_list()]
            ).fetchall()
        }
        new = df.filter(~pl.col("id").is_in(list(present)))
        if len(new):
            _insert(conn, table, corpus, new)
        if view:
            conn.execute(view)
        added = len(new)

    in_transaction(conn, append)
    return added


def table_exists(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(
        conn.execute(
            f"SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND {_IN_THIS_DATABASE}",
            [table],
        ).fetchone()[0]
    )


def table_exists_in(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> bool:
    return bool(
        conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ? "
            f"AND {_IN_THIS_DATABASE}",
            [schema, table],
        ).fetchone()[0]
    )


def row_count(conn: duckdb.DuckDBPyConnection, table: str, corpus: str) -> int:
    """How many rows the corpus has in a table; 0 when the table does not exist yet."""
    if not table_exists(conn, table):
        return 0
    return conn.execute(f'SELECT count(*) FROM "{table}" WHERE corpus = ?', [corpus]).fetchone()[0]


def read_table(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    corpus: str,
    where: str = "TRUE",
    params: list | None = None,
    without: tuple[str, ...] = (),
) -> pl.DataFrame:
    """The corpus's rows of a table (without the corpus column, nor the columns `without`), those matching `where`
    if given; a clear error if the table was never materialized."""
    if not table_exists(conn, table):
        raise LookupError(f"table {table} does not exist yet: materialize it for corpus {corpus!r} first")
    excluded = ", ".join(f'"{column}"' for column in ("corpus", *without))
    query = f'SELECT * EXCLUDE ({excluded}) FROM "{table}" WHERE corpus = ? AND ({where})'
    params = [corpus, *(params or [])]
    # Through a pyarrow table (`.pl()`): measured on a 5 MB corpus's text tables, Arrow's C stream interface
    # (pl.DataFrame of a relation) took 100 MiB more to read the same rows.
    try:
        return conn.execute(f"{query} ORDER BY id", params).pl()
    except duckdb.OutOfMemoryException:
        # DuckDB's sort of wide rows (reports, text) pins them all at once past its bound, where raising the bound
        # for it cost more than sorting the frame the step holds anyway: the reports at 200 MB of text took 828 MiB
        # this way, 1,080 sorted by DuckDB at twice the bound. Ids are unique, so the order is the same.
        return with_room(conn, lambda: conn.execute(query, params).pl().sort("id"))


def read_tables(conn: duckdb.DuckDBPyConnection, tables, corpus: str) -> dict[str, pl.DataFrame]:
    """Several tables of one corpus, by name."""
    return {table: read_table(conn, table, corpus) for table in tables}


def latest_versions(conn: duckdb.DuckDBPyConnection, corpus: str, assets: list[str]) -> dict[str, str]:
    lineage = _lineage(conn)
    if lineage is None:
        return {}
    rows = conn.execute(
        f"""SELECT asset, arg_max(data_version, materialized_at) FROM {lineage}
           WHERE corpus = ? AND list_contains(?, asset) GROUP BY asset""",
        [corpus, assets],
    ).fetchall()
    return dict(rows)


def last_output(conn: duckdb.DuckDBPyConnection, asset: str, corpus: str) -> tuple[str, str, int] | None:
    """(inputs fingerprint, data version, rows) of the asset's latest output for the corpus, if any."""
    lineage = _lineage(conn)
    if lineage is None:
        return None
    return conn.execute(
        f"""SELECT inputs, data_version, row_count FROM {lineage} WHERE asset = ? AND corpus = ?
           ORDER BY materialized_at DESC LIMIT 1""",
        [asset, corpus],
    ).fetchone()


def last_settings(conn: duckdb.DuckDBPyConnection, asset: str, corpus: str) -> dict | None:
    """The settings the asset's latest output for the corpus was made with (None if unknown)."""
    lineage = _lineage(conn)
    if lineage is None:
        return None
    row = conn.execute(
        f"SELECT settings FROM {lineage} WHERE asset = ? AND corpus = ? ORDER BY materialized_at DESC LIMIT 1",
        [asset, corpus],
    ).fetchone()
    return json.loads(row[0]) if row and row[0] is not None else None


def usage_totals(conn: duckdb.DuckDBPyConnection, run_ids: list[str] | None, schema: str = "main") -> dict | None:
    """What the runs' steps spent (every run's, for None), summed over `schema`'s model_usage view; None when no
    step called a model."""
    if not table_exists_in(conn, schema, "model_usage"):  # (made with the lineage table: nothing written yet)
        return None
    row = conn.execute(
        f"""SELECT count(*), sum(requests), sum(cache_hits), sum(retries), sum(failed_calls), sum(batch_requests),
               sum(prompt_tokens) FILTER (endpoint = 'chat'), sum(completion_tokens) FILTER (endpoint = 'chat'),
               sum(prompt_tokens) FILTER (endpoint = 'embeddings'),
               CASE WHEN bool_and(cost_usd IS NOT NULL) THEN sum(cost_usd) END,
               sum(cost_usd) FILTER (batch_requests > 0)
            FROM "{schema}".model_usage WHERE ? IS NULL OR list_contains(?, run_id)""",
        [run_ids, run_ids],
    ).fetchone()
    if not row[0]:
        return None
    names = (
        "requests", "cache_hits", "retries", "failed_calls", "batch_requests",
        "prompt_tokens", "completion_tokens", "embedding_tokens",
    )  # fmt: skip
    totals = {name: int(value or 0) for name, value in zip(names, row[1:9])}
    return {**totals, "cost_usd": row[9], "batch_cost_usd": row[10] or 0.0}
