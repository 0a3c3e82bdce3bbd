"""Documents from a SQL query instead of a folder: a table of the user's (often one their own assets make) in a
DuckDB file, in PostgreSQL, or in files DuckDB reads (parquet on S3).

The rows are written as one parquet file per corpus in a folder of its own, which the index then reads as it reads
any corpus folder: one path from there on. The file is rewritten only when the rows changed, so an unchanged table
costs a re-index nothing but the query.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from filelock import FileLock

from ..method.corpus_folder import SAFE_CORPUS_NAME
from .connection import load_extension, redacted, sql_literal

DOCUMENTS_FILE = "documents.parquet"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class QueryRefused(ValueError):
    """The query cannot give documents: it failed, or lacks a column it was told to read."""


@dataclass(frozen=True, kw_only=True)
class DocumentQuery:
    sql: str
    database: str | None = None  # a DuckDB file, read only; None: an in-memory DuckDB (it can read files itself)
    postgres: str | None = None  # a libpq connection string, attached as `pg` (the query reads pg.<schema>.<table>)
    text_column: str = "text"
    title_column: str | None = "title"
    id_column: str | None = None
    metadata_columns: tuple[str, ...] = ()
    corpus_column: str | None = None  # rows split into corpora by this column; else all are `corpus`
    corpus: str = "documents"

    def columns(self) -> list[str]:
        """The columns the documents keep, in order."""
        wanted = [self.text_column, self.title_column, self.id_column, *self.metadata_columns]
        return list(dict.fromkeys(c for c in wanted if c))

    def metadata(self) -> list[str]:
        """The columns the index keeps as each document's metadata: the id and the metadata columns."""
        return [c for c in dict.fromkeys([self.id_column, *self.metadata_columns]) if c]

    def _documents(self, rows: pa.Table) -> pa.Table:
        """The kept columns, the text and title under the names the index reads by default."""
        kept = rows.select(self.columns())
        renamed = {self.text_column: "text", **({self.title_column: "title"} if self.title_column else {})}
        return kept.rename_columns([renamed.get(name, name) for name in kept.column_names])

    def _connection(self) -> duckdb.DuckDBPyConnection:
        config = {"autoinstall_known_extensions": False}
        if self.database and not Path(self.database).is_file():
            raise QueryRefused(f"the documents' database {self.database} does not exist")
        conn = duckdb.connect(self.database or ":memory:", read_only=bool(self.database), config=config)
        if self.postgres:
            load_extension(conn, "postgres")
            conn.execute(f"ATTACH {sql_literal(self.postgres)} AS pg (TYPE postgres, READ_ONLY)")
        return conn

    def read(self) -> dict[str, pa.Table]:
        """The rows by corpus, each with the columns the documents keep (and no others)."""
        for column in (*self.columns(), *([self.corpus_column] if self.corpus_column else [])):
            if not _IDENTIFIER.fullmatch(column):
                raise QueryRefused(f"column {column!r} is not a plain column name")
        for column in self.metadata():
            if column in ("text", "title") and column not in (self.text_column, self.title_column):
                raise QueryRefused(f"metadata column {column!r} would take the name of the documents' {column}")
        try:
            with self._connection() as conn:
                rows = conn.execute(self.sql).fetch_arrow_table()
        except duckdb.Error as problem:  # the connection string may carry a password
            raise QueryRefused(f"the documents' query failed: {redacted(str(problem))}") from None
        missing = [c for c in (*self.columns(), self.corpus_column) if c and c not in rows.column_names]
        if missing:
            raise QueryRefused(
                f"the documents' query returns no column {', '.join(map(repr, missing))} (it returns "
                f"{', '.join(rows.column_names)}): rename it in the query or set the component's columns"
            )
        if not self.corpus_column:
            return {self.corpus: self._documents(rows)}
        corpora = {}
        for corpus in sorted({str(c) for c in rows[self.corpus_column].to_pylist() if c is not None}):
            matching = pc.equal(rows[self.corpus_column].cast(pa.string()), corpus)
            corpora[corpus] = self._documents(rows.filter(matching))
        return corpora


def write_corpora(query: DocumentQuery, folder: Path) -> tuple[dict[str, Path], list[str]]:
    """Each corpus's rows as `folder/<corpus>/documents.parquet`, rewritten only when they changed; returns each
    written corpus's folder, and every corpus name the query returned (an unsafe one is not written)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    with FileLock(str(folder / ".lock")):
        corpora = query.read()
        for corpus, rows in corpora.items():
            if not SAFE_CORPUS_NAME.fullmatch(corpus):
                continue  # scan() names it refused, with the rule a name must follow; the others go on
            target = folder / corpus / DOCUMENTS_FILE
            target.parent.mkdir(parents=True, exist_ok=True)
            sink = pa.BufferOutputStream()
            pq.write_table(rows, sink)
            data = sink.getvalue().to_pybytes()
            if not target.is_file() or hashlib.sha256(target.read_bytes()).digest() != hashlib.sha256(data).digest():
                staged = target.with_suffix(".tmp")
                staged.write_bytes(data)
                staged.replace(target)
            written[corpus] = target.parent
    return written, sorted(corpora)
