"""Answer records: every answer goes first to a small on-disk queue (SQLite), then into the store's query_answers
table when the store is free.

DuckDB lets one process write a file, and an index run writes it in short bursts: an answer recorded while the run
holds it waits in the queue, and is written by the next flush. A record leaves the queue only once the store holds
it (the write skips ids already there), so a crash at any point loses none and writes none twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path

import duckdb

from ..method.schema import typed_frame
from ..store.schema import ANSWER_SOURCES_VIEW, TABLES
from ..store.tables import append_rows, table_exists

_DATES = ("created_at",)


class AnswerJournal:
    """Answers not yet in the store, by id, in a SQLite file that any number of processes may share."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connection() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS answers (id TEXT PRIMARY KEY, corpus TEXT NOT NULL, row TEXT)")

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")  # an answer acknowledged is an answer on disk
            yield conn
        finally:
            conn.close()

    def add(self, corpus: str, row: dict) -> None:
        text = json.dumps(row, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))
        with self._lock, self._connection() as conn:
            conn.execute("INSERT OR REPLACE INTO answers (id, corpus, row) VALUES (?, ?, ?)", [row["id"], corpus, text])

    def get(self, answer_id: str) -> tuple[str, dict] | None:
        """(corpus, row) of a queued answer."""
        with self._connection() as conn:
            found = conn.execute("SELECT corpus, row FROM answers WHERE id = ?", [answer_id]).fetchone()
        return (found[0], _row(found[1])) if found else None

    def pending(self, limit: int = 5000) -> list[tuple[str, dict]]:
        with self._connection() as conn:
            rows = conn.execute("SELECT corpus, row FROM answers ORDER BY rowid LIMIT ?", [limit]).fetchall()
        return [(corpus, _row(text)) for corpus, text in rows]

    def __len__(self) -> int:
        with self._connection() as conn:
            return conn.execute("SELECT count(*) FROM answers").fetchone()[0]

    def remove(self, ids: list[str]) -> None:
        with self._lock, self._connection() as conn:
            conn.executemany("DELETE FROM answers WHERE id = ?", [[i] for i in ids])

    def flush(
        self,
        open_store: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]],
        written: Callable[[list[tuple[str, dict]]], None],
    ) -> int:
        """Write the queued answers to the store, then tell `written` (Dagster's observations) and forget them.

        `open_store` gives a read-write connection as a context manager, or raises while another process holds
        the file; the answers then stay queued. Returns how many were written."""
        queued = self.pending()
        if not queued:
            return 0
        with open_store() as conn:
            write_answers(conn, queued)
        written(queued)
        self.remove([row["id"] for _, row in queued])
        return len(queued)


def _row(text: str) -> dict:
    row = json.loads(text)
    for name in _DATES:
        if row.get(name):
            row[name] = datetime.fromisoformat(row[name])
    return row


def write_answers(conn: duckdb.DuckDBPyConnection, answers: list[tuple[str, dict]]) -> int:
    """Add answers to query_answers, per corpus, each once; returns how many were new."""
    added = 0
    by_corpus: dict[str, list[dict]] = {}
    for corpus, row in answers:
        by_corpus.setdefault(corpus, []).append(row)
    for corpus, rows in by_corpus.items():
        given = {name: kind for name, kind in TABLES["query_answers"].items() if any(name in r for r in rows)}
        added += append_rows(conn, "query_answers", corpus, typed_frame(given, rows), view=ANSWER_SOURCES_VIEW)
    return added


def stored_answer(conn: duckdb.DuckDBPyConnection, answer_id: str) -> tuple[str, dict] | None:
    """(corpus, row) of an answer in the store."""
    if not table_exists(conn, "query_answers"):
        return None
    found = conn.execute("SELECT * FROM query_answers WHERE id = ?", [answer_id]).pl()
    if found.is_empty():
        return None
    row = found.row(0, named=True)
    return row.pop("corpus"), row
