"""Keyword search over a published corpus: BM25 (DuckDB's full-text search extension) over its text units, its
entities' titles and descriptions and its community reports.

Vectors find what a question means; names, numbers and titles said once are where they miss and a keyword index
does not (`scripts/benchmark.py retrieval`). The index lives in an in-memory DuckDB of its own, built from the
tables the warm index already holds, the first time a method searches a kind: a published corpus's text never
changes under it, and a newer publication is a new Index. Porter stemming and English stop words, as the
extension's defaults; accents stripped, case folded.
"""

from __future__ import annotations

import threading

import duckdb
import polars as pl

from .connection import load_extension

KINDS = ("text_unit", "entity", "community_report")  # as text_embeddings names the same kinds


class KeywordIndex:
    """BM25 over a corpus's records of each kind, each given as a frame of (id, text)."""

    def __init__(self, texts: dict[str, pl.DataFrame]):
        self._texts = texts
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._built: set[str] = set()
        self._lock = threading.Lock()  # the server's threads share one in-memory database, one query at a time

    def search(self, kind: str, text: str, k: int) -> list[tuple[str, float]]:
        """The k records of a kind that best match the text, best first, with their BM25 scores (none when no
        word of the text is in the index)."""
        if kind not in self._texts or not text.strip() or k <= 0:
            return []
        text = text.encode("utf-8", "replace").decode()  # a lone surrogate (a JSON escape) cannot cross to DuckDB
        with self._lock:
            conn = self._connection()
            if kind not in self._built:
                self._build(conn, kind)
            return conn.execute(
                f"SELECT id, score FROM (SELECT id, fts_main_{kind}.match_bm25(id, ?) AS score FROM {kind}) "
                "WHERE score IS NOT NULL ORDER BY score DESC, id LIMIT ?",
                [text, k],
            ).fetchall()

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._conn is None:
            self._conn = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False})
            load_extension(self._conn, "fts")
        return self._conn

    def _build(self, conn: duckdb.DuckDBPyConnection, kind: str) -> None:
        conn.register("records", self._texts[kind].select("id", "text").to_arrow())
        conn.execute(f"CREATE TABLE {kind} AS SELECT id, text FROM records")
        conn.unregister("records")
        conn.execute(f"PRAGMA create_fts_index('{kind}', 'id', 'text', strip_accents = 1, lower = 1)")
        self._built.add(kind)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._built.clear()


def keyword_texts(entities: pl.DataFrame, reports: pl.DataFrame, text_units: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """What each kind is searched by: a unit's text, an entity's title and description, a report's title and
    summary (its findings elaborate the summary's names)."""
    return {
        "text_unit": text_units.select("id", "text"),
        "entity": entities.select(
            "id", pl.concat_str("title", "description", separator=". ", ignore_nulls=True).alias("text")
        ),
        "community_report": reports.select(
            "id", pl.concat_str("title", "summary", separator=". ", ignore_nulls=True).alias("text")
        ),
    }
