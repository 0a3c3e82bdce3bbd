"""HNSW against the exact scan on synthetic vectors (see benchmark.py vectors).

The vectors are clustered, as embeddings of related texts are: centres in a low-dimensional subspace, spread
and noise around them. They are made in batches from a seed, so the index is built from batches and the exact
top-k is found in one streaming pass, without holding every vector in memory twice.
"""

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import peak_rss_mib

from graphrag_assets.store import vector_index

BATCH = 50_000


def synthetic_batches(count: int, dimensions: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((64, dimensions), dtype=np.float32) / 8
    centres = rng.standard_normal((2000, 64), dtype=np.float32)
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        spread = centres[rng.integers(0, len(centres), size)] + 0.6 * rng.standard_normal((size, 64), dtype=np.float32)
        vectors = spread @ basis + 0.15 * rng.standard_normal((size, dimensions), dtype=np.float32)
        yield [f"v{i:08d}" for i in range(start, start + size)], vectors


def exact_top_k(count: int, dimensions: int, queries: np.ndarray, k: int) -> list[set[str]]:
    """The true k nearest by cosine similarity, merged batch by batch."""
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    best_scores = np.full((len(q), k), -np.inf, dtype=np.float32)
    best_ids = np.empty((len(q), k), dtype=object)
    for ids, vectors in synthetic_batches(count, dimensions):
        scores = q @ (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        merged_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, axis=1)], axis=1)
        merged_ids = np.concatenate([best_ids, np.asarray(ids, dtype=object)[top]], axis=1)
        keep = np.argsort(-merged_scores, axis=1)[:, :k]
        best_scores = np.take_along_axis(merged_scores, keep, axis=1)
        best_ids = np.take_along_axis(merged_ids, keep, axis=1)
    return [set(row) for row in best_ids]


def vectors_benchmark(args) -> None:
    count, dimensions, k = args.count, args.dimensions, args.k
    vector_index.HNSW_OPTIONS.update(M=args.m, ef_construction=args.ef_construction)
    queries = next(synthetic_batches(args.queries, dimensions, seed=99))[1]
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        path = Path(work) / "corpus" / "text_unit.duckdb"
        started = time.perf_counter()
        vector_index.build(path, synthetic_batches(count, dimensions), version="benchmark")
        build_seconds = time.perf_counter() - started
        size_gib = path.stat().st_size / 2**30
        print(
            f"built: {count:,} x {dimensions} vectors in {build_seconds:.0f} s, file {size_gib:.1f} GiB, "
            f"peak RSS {peak_rss_mib():,.0f} MiB",
            flush=True,
        )

        # Recall for several ef_search values: the query-time knob that trades latency for recall.
        hnsw = {}
        for ef_search in args.ef_search or [vector_index.ef_search_for(count)]:
            index = vector_index.NearestIndex.open(path, "benchmark", ef_search)
            assert "HNSW_INDEX_SCAN" in index.plan(k), "the nearest-neighbour query does not use the index"
            latency, found = [], []
            for query in queries:
                started = time.perf_counter()
                found.append({i for i, _ in index.nearest(query, k)})
                latency.append(time.perf_counter() - started)
            hnsw[ef_search] = (found, statistics.median(latency) * 1000)
            index.close()
        # The exact scan as the store does it without an index: every vector's distance, then the top k.
        index = vector_index.NearestIndex.open(path, "benchmark")
        scan = (
            f"SELECT id FROM vectors ORDER BY array_cosine_distance(embedding, $q::FLOAT[{dimensions}]) + 0 LIMIT {k}"
        )
        assert (
            "HNSW_INDEX_SCAN" not in index.conn.execute("EXPLAIN " + scan, {"q": [0.0] * dimensions}).fetchall()[0][1]
        )
        exact_latency = []
        for query in queries[: args.exact_queries]:
            started = time.perf_counter()
            index.conn.execute(scan, {"q": query.tolist()}).fetchall()
            exact_latency.append(time.perf_counter() - started)
        index.close()

    truth = exact_top_k(count, dimensions, queries, k)
    exact_ms = statistics.median(exact_latency) * 1000
    print(f"\n{count:,} vectors of {dimensions} dimensions, {len(queries)} queries, k = {k}")
    print(f"HNSW options {vector_index.HNSW_OPTIONS}; build {build_seconds:.0f} s")
    print(f"{'':<22}{'recall@' + str(k):>10}{'median ms':>12}{'speed-up':>10}")
    print(f"{'exact scan':<22}{1.0:>10.3f}{exact_ms:>12.1f}{'1x':>10}   ({len(exact_latency)} queries)")
    for ef_search, (found, ms) in hnsw.items():
        recall = statistics.mean(len(f & t) / k for f, t in zip(found, truth))
        print(f"{f'HNSW, ef_search {ef_search}':<22}{recall:>10.3f}{ms:>12.1f}{f'{exact_ms / ms:.0f}x':>10}")
    print(f"peak RSS {peak_rss_mib():,.0f} MiB")
