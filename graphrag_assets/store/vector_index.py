"""Approximate nearest neighbours for large corpora: an HNSW index (DuckDB's vss extension) in a file of its own.

Why a file of its own: DuckDB persists HNSW indexes only under the experimental
`hnsw_enable_experimental_persistence` setting, whose recovery of an index from the write-ahead log is not yet
reliable, and a DuckLake store holds no indexes at all. The side file is derived data: it is built complete under
a temporary name, renamed into place, only ever opened read-only afterwards, and rebuilt from text_embeddings
whenever it is missing or older than them. So the experimental setting never touches the store.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from .connection import load_extension

# Build cost grows with M and ef_construction; a larger ef_search at query time buys back recall cheaply.
# `scripts/benchmark.py vectors` measures them (recall@10 against the exact scan): on 50,000 clustered 1536-d
# vectors these give 0.986 at ef_search 512, where M 12 / ef_construction 32 gives 0.967 at half the build time.
HNSW_OPTIONS = {"metric": "'cosine'", "M": 16, "ef_construction": 64}
BUILD_MEMORY_MIB = 2048  # DuckDB's buffers while the vectors are written


def ef_search_for(count: int) -> int:
    """The search width for an index of `count` vectors: recall falls as the graph grows, so the search widens.

    Measured with the options above on clustered 1536-d vectors (recall@10): 0.986 at 50,000 vectors with 512,
    0.992 at 200,000 with 1,024, 0.922 at 1,000,000 with 2,048, 0.960 with 3,072 and 0.975 with 4,096 (68 ms a
    query there, against 2.8 s for the exact scan). Beyond a million vectors the rule is extrapolated, not measured.
    """
    return 512 * 2 ** max(0, math.ceil(math.log2(max(count, 1) / 125_000)))


def index_path(folder: str | Path, corpus: str, kind: str) -> Path:
    return Path(folder) / corpus / f"{kind}.duckdb"


def _connect(path: Path | str, read_only: bool) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(str(path), read_only=read_only, config={"autoinstall_known_extensions": False})
    load_extension(conn, "vss")
    conn.execute("SET hnsw_enable_experimental_persistence = true")
    return conn


def build(path: Path, batches: Iterable[tuple[list[str], np.ndarray]], version: str) -> int:
    """Write vectors, given in batches of (ids, matrix), and their HNSW index to `path`; returns how many.

    Batches keep a large corpus's vectors out of memory until the index itself is built. An older file at `path`
    is replaced only once the new one is complete.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.unlink(missing_ok=True)
    count, dimensions = 0, None
    try:
        with _connect(staging, read_only=False) as conn:
            # The vectors go to the file and stay out of memory until the index is built.
            conn.execute(f"SET memory_limit = '{BUILD_MEMORY_MIB}MiB'")
            for ids, matrix in batches:
                if dimensions is None:
                    dimensions = matrix.shape[1]
                    conn.execute(f"CREATE TABLE vectors (id VARCHAR, embedding FLOAT[{dimensions}])")
                flat = pa.array(np.ascontiguousarray(matrix, dtype=np.float32).ravel())
                batch = pa.table(
                    {"id": pa.array(ids, pa.string()), "embedding": pa.FixedSizeListArray.from_arrays(flat, dimensions)}
                )
                conn.register("incoming", batch)
                conn.execute(f"INSERT INTO vectors SELECT id, embedding::FLOAT[{dimensions}] FROM incoming")
                conn.unregister("incoming")
                count += len(ids)
            if dimensions is None:
                raise ValueError("no vectors to index")
            # The index's blocks are DuckDB's to count: room for the vectors once more, besides the buffers.
            conn.execute(f"SET memory_limit = '{BUILD_MEMORY_MIB + count * dimensions * 4 // 2**20}MiB'")
            options = ", ".join(f"{name} = {value}" for name, value in HNSW_OPTIONS.items())
            conn.execute(f"CREATE INDEX nearest ON vectors USING HNSW (embedding) WITH ({options})")
            conn.execute("CREATE TABLE built_from AS SELECT ? AS data_version, ? AS dimensions", [version, dimensions])
            conn.execute("CHECKPOINT")
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    return count


def ids_and_matrix(table: pa.Table) -> tuple[list[str], np.ndarray]:
    """An (id, embedding) Arrow table as ids and one float32 matrix, with no Python list per vector."""
    flat = table["embedding"].combine_chunks().flatten().to_numpy().astype(np.float32, copy=False)
    return table["id"].to_pylist(), flat.reshape(len(table), -1)


def open_all(folder: str | Path, corpus: str, version: str | None) -> dict[str, NearestIndex]:
    """The corpus's indexes built from this data version of text_embeddings, by kind."""
    found = {}
    for path in sorted((Path(folder) / corpus).glob("*.duckdb")) if version else []:
        index = NearestIndex.open(path, version)
        if index is not None:
            found[path.stem] = index
    return found


class NearestIndex:
    """A built index, read-only: the k nearest ids to a query by cosine similarity."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, dimensions: int):
        self.conn, self.dimensions = conn, dimensions

    @classmethod
    def open(cls, path: Path, version: str, ef_search: int | None = None) -> NearestIndex | None:
        """The index at `path` if it was built from this data version of text_embeddings, else None.

        `ef_search` defaults to the width its size needs (`ef_search_for`).
        """
        if not path.exists():
            return None
        try:
            conn = _connect(path, read_only=True)
            built = conn.execute("SELECT data_version, dimensions FROM built_from").fetchone()
        except duckdb.Error:
            return None  # half-written or from another DuckDB version: the exact scan answers instead
        if built is None or built[0] != version:
            conn.close()
            return None
        count = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
        conn.execute(f"SET hnsw_ef_search = {int(ef_search or ef_search_for(count))}")
        return cls(conn, built[1])

    NEAREST = (
        "SELECT id, array_cosine_distance(embedding, $query::FLOAT[{d}]) AS distance FROM vectors ORDER BY distance"
    )

    def nearest(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        # This exact shape (the distance as a column, ordered by, with a LIMIT) is what vss turns into an index scan.
        sql = self.NEAREST.format(d=self.dimensions) + f" LIMIT {int(k)}"
        rows = self.conn.execute(sql, {"query": query.astype(np.float32).tolist()}).fetchall()
        return [(row[0], 1.0 - float(row[1])) for row in rows]

    def plan(self, k: int) -> str:
        """The query plan of `nearest`, to check that it scans the index."""
        sql = "EXPLAIN " + self.NEAREST.format(d=self.dimensions) + f" LIMIT {int(k)}"
        return self.conn.execute(sql, {"query": [0.0] * self.dimensions}).fetchall()[0][1]

    def all(self) -> tuple[list[str], np.ndarray]:
        """Every id and vector, for the methods that score all of them."""
        return ids_and_matrix(self.conn.execute("SELECT id, embedding FROM vectors ORDER BY id").fetch_arrow_table())

    def close(self) -> None:
        self.conn.close()
