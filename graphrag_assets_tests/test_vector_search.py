"""Nearest-neighbour search through HNSW indexes (DuckDB's vss) above a threshold, the exact scan below it."""

import json
import shutil

import numpy as np
import pytest

from graphrag_assets.method.search.context import nearest
from graphrag_assets.store import vector_index

from .conftest import SAMPLE_CORPUS, Workspace, materialization_metadata

QUESTION = "Who is Bob Cratchit?"


def test_an_index_scans_hnsw_and_finds_what_the_exact_scan_finds(tmp_path):
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((3000, 48)).astype(np.float32)
    ids = [f"v{i:04d}" for i in range(len(matrix))]
    path = vector_index.index_path(tmp_path, "corpus", "entity")
    batches = [(ids[start : start + 1000], matrix[start : start + 1000]) for start in range(0, len(ids), 1000)]
    assert vector_index.build(path, batches, version="one") == len(ids)

    assert vector_index.NearestIndex.open(path, version="two") is None  # built from other data: not used
    index = vector_index.NearestIndex.open(path, version="one")
    assert "HNSW_INDEX_SCAN" in index.plan(10)
    assert index.conn.execute("SELECT current_setting('hnsw_ef_search')").fetchone()[0] == 512
    queries = rng.standard_normal((40, 48)).astype(np.float32)
    recall = np.mean(
        [len({i for i, _ in index.nearest(q, 10)} & {i for i, _ in nearest(q, ids, matrix, 10)}) / 10 for q in queries]
    )
    assert recall >= 0.95
    best, score = index.nearest(matrix[123], 1)[0]
    assert best == "v0123" and abs(score - 1.0) < 1e-5
    stored_ids, stored = index.all()
    assert stored_ids == ids and np.array_equal(stored, matrix)
    index.close()


def test_the_search_widens_as_the_index_grows():
    widths = [vector_index.ef_search_for(n) for n in (100, 125_000, 200_000, 500_000, 1_000_000)]
    assert widths == [512, 512, 1024, 2048, 4096]


@pytest.mark.slow
def test_queries_use_the_hnsw_index_of_a_corpus_above_the_threshold(offline_index, tmp_path):
    (tmp_path / "workspace").mkdir()
    workspace = Workspace(tmp_path / "workspace")
    workspace.add_sample_corpus()
    shutil.copy(offline_index[0].database, workspace.database)

    def answers() -> dict[str, tuple[str, str]]:
        found = {}
        for asset, config in [
            ("local_search", {"question": QUESTION, "community_level": 0}),
            ("basic_search", {"question": QUESTION}),
            ("drift_search", {"question": QUESTION, "community_level": 0}),
        ]:
            meta = materialization_metadata(workspace.ask(SAMPLE_CORPUS, asset, config), asset)
            found[asset] = (meta["answer"], meta["hnsw_searched"])
        return found

    exact = answers()
    assert {searched for _, searched in exact.values()} == {"none (exact scan)"}

    built = workspace.materialize(
        SAMPLE_CORPUS,
        selection=["text_embeddings"],
        run_config={"ops": {"text_embeddings": {"config": {"approximate_search_above": 10}}}},
    )
    search = json.loads(json.dumps(materialization_metadata(built, "text_embeddings")["vector_search"]))
    assert all(how.startswith("HNSW index") for how in search.values()), search
    assert sorted(p.stem for p in (workspace.root / "vector-index" / SAMPLE_CORPUS).glob("*.duckdb")) == sorted(search)

    approximate = answers()
    assert {searched for _, searched in approximate.values()} == {"community_report, entity, text_unit"}
    # On a corpus this small the HNSW graph finds the exact neighbours, so the answers are the same.
    assert {k: a for k, (a, _) in approximate.items()} == {k: a for k, (a, _) in exact.items()}

    # New vectors (another offline dimension) leave the index stale: queries go back to the exact scan.
    workspace.materialize(
        SAMPLE_CORPUS,
        selection=["text_embeddings"],
        run_config={"ops": {"text_embeddings": {"config": {"offline_dimensions": 64}}}},
    )
    assert {searched for _, searched in answers().values()} == {"none (exact scan)"}
