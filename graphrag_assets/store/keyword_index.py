"""Keyword search over a published corpus: BM25 (DuckDB's full-text search extension) over its text units, its
entities' titles and descriptions and its community reports.

Vectors find what a question means; names, numbers and titles said once are where they miss and a keyword index
does not (`scripts/benchmark.py retrieval`). The keyword_index asset builds the index into a DuckDB file of its own
beside the HNSW indexes, named by what it was built from, and publishes a row that names it; the warm index opens
that file read-only. A store without one (an index published before the asset existed, or a file since deleted)
gets the same index built in memory the first time a method searches a kind. Porter stemming and English stop
words, as the extension's defaults; accents stripped, case folded.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl

from .connection import load_extension
from .tables import latest_versions, table_exists_in

KINDS = ("text_unit", "entity", "community_report")  # as text_embeddings names the same kinds
# What an index is built from; with FORMAT, the name of its file. A new format is a new file, never a misread one.
SOURCES = ("text_units", "entities", "entity_aliases", "community_reports")
FORMAT = "fts-1: porter, english stop words, strip_accents, lower"
# Past it, DuckDB spills the index's build to its temporary folder: on 50 MB of generated text 128 MiB built it in
# the same time as 512 MiB, and the step's peak fell from 1,078 to 833 MiB (its reading of the tables is the rest).
BUILD_MEMORY = "128MiB"


def fingerprint(versions: dict[str, str]) -> str:
    """The name of the index built from these data versions of SOURCES."""
    parts = [FORMAT, {table: versions.get(table, "") for table in SOURCES}]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def current_fingerprint(conn: duckdb.DuckDBPyConnection, corpus: str) -> str:
    """The name of the index built from the corpus's tables as the connection sees them (a run's stage first)."""
    return fingerprint(latest_versions(conn, corpus, list(SOURCES)))


def index_path(folder: str | Path, corpus: str, built_from: str) -> Path:
    return Path(folder) / corpus / f"keywords-{built_from}.duckdb"


def build(
    path: Path,
    texts: Callable[[], dict[str, pl.DataFrame]],
    built_from: str,
    store: duckdb.DuckDBPyConnection,
    corpus: str,
) -> None:
    """Write each kind's records and their BM25 index to `path`, replaced only once complete. The text units are
    copied by DuckDB from the store (a corpus's text never passes through the process); `texts()` reads the other
    kinds' records, once the copy is done: copied beside them, the text units were the step's peak (1,706 MiB at
    200 MB of text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.unlink(missing_ok=True)
    try:
        _copy_text_units(store, staging, corpus)
        others = texts()
        with duckdb.connect(str(staging), config={"autoinstall_known_extensions": False}) as conn:
            conn.execute(f"SET memory_limit = '{BUILD_MEMORY}'")
            load_extension(conn, "fts")
            for kind, records in others.items():
                _add_kind(conn, kind, records)
            for kind in ("text_unit", *others):
                _index_kind(conn, kind)
            conn.execute("CREATE TABLE built_from AS SELECT ? AS built_from", [built_from])
            conn.execute("CHECKPOINT")
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


def _copy_text_units(store: duckdb.DuckDBPyConnection, staging: Path, corpus: str) -> None:
    store.execute("ATTACH '{}' AS keyword_staging".format(str(staging).replace("'", "''")))
    try:
        store.execute(
            "CREATE TABLE keyword_staging.text_unit AS SELECT id, text FROM text_units WHERE corpus = ?", [corpus]
        )
    finally:
        store.execute("DETACH keyword_staging")


def _add_kind(conn: duckdb.DuckDBPyConnection, kind: str, records: pl.DataFrame) -> None:
    conn.register("records", records.select("id", "text").to_arrow())
    conn.execute(f"CREATE TABLE {kind} AS SELECT id, text FROM records")
    conn.unregister("records")


def _index_kind(conn: duckdb.DuckDBPyConnection, kind: str) -> None:
    conn.execute(f"PRAGMA create_fts_index('{kind}', 'id', 'text', strip_accents = 1, lower = 1)")


def published(conn: duckdb.DuckDBPyConnection, corpus: str) -> set[str]:
    """What the corpus's published keyword_index rows were built from (none before the first)."""
    if not table_exists_in(conn, "main", "keyword_index"):
        return set()
    rows = conn.execute('SELECT built_from FROM main."keyword_index" WHERE corpus = ?', [corpus]).fetchall()
    return {row[0] for row in rows}


def prune(folder: str | Path, corpus: str, keep: set[str]) -> list[str]:
    """Delete the corpus's index files but those built from what `keep` names (the published one, a run's new
    one); returns the paths deleted."""
    kept = {index_path(folder, corpus, built_from) for built_from in keep}
    gone = []
    for path in sorted((Path(folder) / corpus).glob("keywords-*.duckdb")):
        if path not in kept:
            path.unlink(missing_ok=True)
            gone.append(str(path))
    return gone


class KeywordIndex:
    """BM25 over a corpus's records of each kind: a built file opened read-only (`open`), or frames of (id, text)
    indexed in memory the first time a kind is searched."""

    def __init__(self, texts: dict[str, pl.DataFrame], conn: duckdb.DuckDBPyConnection | None = None):
        self._texts = texts
        self._conn = conn
        self._built: set[str] = set(KINDS) if conn is not None else set()
        self._lock = threading.Lock()  # the server's threads share one database, one query at a time
        self.built_from = None  # the file's name part when opened from one

    @classmethod
    def open(cls, path: Path, built_from: str) -> KeywordIndex | None:
        """The index in `path` if it was built from `built_from`, else None (missing, half-written, stale)."""
        if not path.exists():
            return None
        try:
            conn = duckdb.connect(str(path), read_only=True, config={"autoinstall_known_extensions": False})
            load_extension(conn, "fts")
            found = conn.execute("SELECT built_from FROM built_from").fetchone()
        except duckdb.Error:
            return None
        if found is None or found[0] != built_from:
            conn.close()
            return None
        index = cls({}, conn)
        index.built_from = built_from
        return index

    def search(self, kind: str, text: str, k: int) -> list[tuple[str, float]]:
        """The k records of a kind that best match the text, best first, with their BM25 scores (none when no
        word of the text is in the index)."""
        if (kind not in self._texts and kind not in self._built) or not text.strip() or k <= 0:
            return []
        text = text.encode("utf-8", "replace").decode()  # a lone surrogate (a JSON escape) cannot cross to DuckDB
        with self._lock:
            conn = self._connection()
            if kind not in self._built:
                self._build(conn, kind)
            # Rounded: a score's last bits depend on the order DuckDB sums its terms in (the rows' order, its
            # threads), and two records that tie would otherwise swap places from one build or run to the next.
            return conn.execute(
                f"SELECT id, round(score, 9) AS score FROM (SELECT id, fts_main_{kind}.match_bm25(id, ?) AS score "
                f"FROM {kind}) "
                "WHERE score IS NOT NULL ORDER BY score DESC, id LIMIT ?",
                [text, k],
            ).fetchall()

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._conn is None:
            self._conn = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False})
            load_extension(self._conn, "fts")
        return self._conn

    def _build(self, conn: duckdb.DuckDBPyConnection, kind: str) -> None:
        _add_kind(conn, kind, self._texts[kind])
        _index_kind(conn, kind)
        self._built.add(kind)

    def sizes(self) -> dict[str, dict[str, int]]:
        """Each kind's records and distinct terms (every kind built so far)."""
        with self._lock:
            conn = self._connection()
            return {
                kind: {
                    "records": conn.execute(f"SELECT count(*) FROM {kind}").fetchone()[0],
                    "terms": conn.execute(f"SELECT count(*) FROM fts_main_{kind}.dict").fetchone()[0],
                }
                for kind in KINDS
                if kind in self._built
            }

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._built.clear()


def keyword_texts(
    entities: pl.DataFrame, reports: pl.DataFrame, text_units: pl.DataFrame | None = None
) -> dict[str, pl.DataFrame]:
    """What each kind is searched by: a unit's text, an entity's title and description, a report's title and
    summary (its findings elaborate the summary's names). Without text units, the other kinds (`build` copies
    the units itself)."""
    units = {} if text_units is None else {"text_unit": text_units.select("id", "text")}
    return {
        **units,
        "entity": entities.select(
            "id", pl.concat_str("title", "description", separator=". ", ignore_nulls=True).alias("text")
        ),
        "community_report": reports.select(
            "id", pl.concat_str("title", "summary", separator=". ", ignore_nulls=True).alias("text")
        ),
    }
