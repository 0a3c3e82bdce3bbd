"""The Batch API's batches, recorded in the store before a step waits on them (models/batches.py).

A step that is killed or retried finds its unfinished batches here and waits for them again instead of paying
for the same requests twice. The table lives in the main schema, beside lineage, not in a run's stage: a retry
of the run is a new stage, and must still find the batches.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime

import duckdb
import polars as pl

_COLUMNS = {
    "batch_id": "VARCHAR",
    "endpoint": "VARCHAR",
    "kind": "VARCHAR",
    "step": "VARCHAR",
    "corpus": "VARCHAR",
    "run_id": "VARCHAR",
    "custom_ids": "VARCHAR[]",
    "status": "VARCHAR",
    "input_file_id": "VARCHAR",
    "output_file_id": "VARCHAR",
    "error_file_id": "VARCHAR",
    "consumed": "BOOLEAN",  # its output was read and handed out; only its failures remain, asked again
    "submitted_at": "TIMESTAMP",
    "updated_at": "TIMESTAMP",
}


def _table(conn: duckdb.DuckDBPyConnection, create: bool = True) -> str | None:
    """The table's qualified name (made when missing and `create`), or None when it does not exist."""
    database = conn.execute("SELECT current_database()").fetchone()[0]
    name = f'"{database}".main.model_batches'
    if create:
        columns = ", ".join(f"{column} {kind}" for column, kind in _COLUMNS.items())
        conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
        return name
    found = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
        "AND table_name = 'model_batches'",
        [database],
    ).fetchone()[0]
    return name if found else None


class DuckDBBatchLedger:
    """models.batches.BatchLedger over a DuckDB store; each call opens a short connection of its own."""

    def __init__(
        self,
        connect: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]],
        labels: dict[str, str],
        progress: Callable[[str], None],
    ):
        self._connect = connect
        self.labels = labels
        self._progress = progress

    def record(self, batch: dict) -> None:
        now = datetime.now(UTC).replace(tzinfo=None)
        row = {column: batch.get(column) for column in _COLUMNS} | {
            "consumed": False,
            "submitted_at": now,
            "updated_at": now,
        }
        with self._connect() as conn:
            table = _table(conn)
            conn.execute(
                f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values())
            )

    def update(self, recorded_id: str, **fields) -> None:
        """Change a recorded batch (its id too, once the endpoint has given it one)."""
        fields = {k: v for k, v in fields.items() if k in _COLUMNS} | {
            "updated_at": datetime.now(UTC).replace(tzinfo=None)
        }
        with self._connect() as conn:
            table = _table(conn)
            assignments = ", ".join(f"{column} = ?" for column in fields)
            conn.execute(f"UPDATE {table} SET {assignments} WHERE batch_id = ?", [*fields.values(), recorded_id])

    def unfinished(self, endpoint: str, custom_ids: list[str]) -> list[dict]:
        with self._connect() as conn:
            table = _table(conn)
            found = conn.execute(
                f"SELECT * FROM {table} WHERE endpoint = ? AND NOT consumed AND list_has_any(custom_ids, ?) "
                "ORDER BY submitted_at",
                [endpoint, custom_ids],
            )
            return found.pl().to_dicts()

    def progress(self, message: str) -> None:
        self._progress(message)


def recorded_batches(conn: duckdb.DuckDBPyConnection, corpus: str | None = None) -> list[dict]:
    """The batches recorded for `corpus` (all when None), newest first, without their request ids."""
    table = _table(conn, create=False)
    if table is None:
        return []
    where, params = ("WHERE corpus = ?", [corpus]) if corpus else ("", [])
    rows = conn.execute(
        f"SELECT * EXCLUDE (custom_ids), len(custom_ids) AS requests FROM {table} {where} ORDER BY submitted_at DESC",
        params,
    ).pl()
    # times as text, ready for JSON and a person
    return rows.with_columns(pl.col(pl.Datetime).dt.to_string("%Y-%m-%dT%H:%M:%S%.3f")).to_dicts()
