"""The non-model steps of the index, each timed in a fresh process (see benchmark.py graph)."""

import json
import pickle
import random
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import networkx as nx
import polars as pl
from harness import run_child

REPO = Path(__file__).resolve().parents[1]
# What DESIGN.md measured for the bare libraries on this kind of machine (8,564 nodes, 17k edges).
DESIGN_REFERENCE = {"communities": "0.2 s", "node2vec": "16 s", "umap": "50 s incl. compilation"}


def synthetic_graph(nodes: int, edges: int, seed: int = 7) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A clustered power-law graph with the requested size, as entity and relationship tables."""
    graph = nx.powerlaw_cluster_graph(nodes, max(1, edges // nodes), 0.3, seed=seed)
    rng = random.Random(seed)
    while graph.number_of_edges() < edges:
        a = rng.randrange(nodes)
        graph.add_edge(a, (a + rng.randrange(1, 50)) % nodes)  # local edges keep communities visible
    titles = {n: f"ENTITY {n}" for n in graph}
    degree = dict(graph.degree())
    entities = pl.DataFrame(
        {
            "id": [f"e{n}" for n in graph],
            "human_readable_id": list(graph),
            "title": [titles[n] for n in graph],
            "type": "X",
            "description": "",
            "text_unit_ids": [[f"u{n % 500}"] for n in graph],
            "frequency": 1,
            "degree": [degree[n] for n in graph],
        }
    )
    pairs = list(graph.edges())
    relationships = pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(len(pairs))],
            "human_readable_id": list(range(len(pairs))),
            "source": [titles[a] for a, _ in pairs],
            "target": [titles[b] for _, b in pairs],
            "description": "",
            "weight": [1.0 + (a * b) % 5 for a, b in pairs],
            "combined_degree": [degree[a] + degree[b] for a, b in pairs],
            "text_unit_ids": [[f"u{a % 500}"] for a, _ in pairs],
        }
    )
    return entities, relationships


def _run_step(step: str, variant: str, data: Path) -> dict:
    """Run one step in a fresh interpreter so its peak RSS is its own."""
    return run_child([__file__, step, variant, str(data)])


def _step(step: str, variant: str, data_path: str) -> None:
    data = pickle.loads(Path(data_path).read_bytes())
    entities, relationships = data["entities"], data["relationships"]
    from graphrag_assets.method.communities.leiden import build_communities, networkx_graph

    graph = networkx_graph(entities, relationships)
    if step == "communities":
        from graspologic.partition import hierarchical_leiden  # import outside the timing

        edges = [(a, b, d["weight"]) for a, b, d in graph.edges(data=True)]
        started = time.perf_counter()
        if variant == "library":
            hierarchical_leiden(edges, max_cluster_size=10, random_seed=0xDEADBEEF)
        else:
            build_communities(entities, relationships, max_cluster_size=10)
    elif step == "node2vec":
        from graspologic.embed import node2vec_embed

        from graphrag_assets.method.embeddings.node2vec import entity_adjacency, node2vec

        started = time.perf_counter()
        if variant == "library":
            node2vec_embed(
                graph.subgraph([n for n, d in graph.degree() if d > 0]).copy(),
                dimensions=128,
                num_walks=10,
                walk_length=40,
                window_size=2,
                iterations=3,
                workers=1,
                random_seed=86,
            )
        else:
            node2vec(*entity_adjacency(entities, relationships))
    elif step == "umap":
        import numpy as np

        from graphrag_assets.method.embeddings.layouts import umap_2d

        vectors = np.random.default_rng(0).normal(size=(graph.number_of_nodes(), 128)).astype(np.float32)
        started = time.perf_counter()
        if variant == "library":  # the import is timed too: it compiles, as ours would without its cache
            import umap

            umap.UMAP(n_components=2, random_state=42, n_jobs=1).fit_transform(vectors)
        else:
            umap_2d(vectors)
    elif step == "text_embeddings":
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer

        from graphrag_assets.method.embeddings.text import LocalEmbedder

        texts = data["texts"]
        started = time.perf_counter()
        if variant == "library":
            TruncatedSVD(128, random_state=42).fit_transform(TfidfVectorizer().fit_transform(texts))
        else:
            LocalEmbedder.fit(texts, 128).embed(texts)
    wall = time.perf_counter() - started
    print(json.dumps({"wall_s": wall}))


def sample_corpus_data() -> dict | None:
    database = REPO / ".graphrag" / "graphrag.duckdb"
    if not database.exists():
        return None
    from graphrag_assets.store.tables import read_table

    with duckdb.connect(str(database), read_only=True) as conn:
        corpus = "a-christmas-carol"
        entities, relationships = read_table(conn, "entities", corpus), read_table(conn, "relationships", corpus)
        texts = (
            read_table(conn, "base_text_units", corpus)["text"].to_list()
            + (entities["title"] + ": " + entities["description"]).to_list()
        )
    return {"entities": entities, "relationships": relationships, "texts": texts}


def graph_benchmark(args) -> None:
    entities, relationships = synthetic_graph(args.nodes, args.edges)
    rng = random.Random(1)
    words = [f"w{i}" for i in range(20000)]
    synthetic = {
        "entities": entities,
        "relationships": relationships,
        "texts": [" ".join(rng.choices(words, k=300)) for _ in range(4000)],
    }
    inputs = {"synthetic": synthetic}
    sample = sample_corpus_data()
    if sample is None:
        print("(no index of the sample corpus in .graphrag/graphrag.duckdb: run bin/demo first to include it)")
    else:
        inputs = {"sample corpus": sample, **inputs}
    header = (
        f"{'input':<16}{'step':<17}{'ours s':>8}{'library s':>11}{'ratio':>7}{'peak RSS MiB':>14}"
        "  DESIGN.md (library alone)"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as folder:
        for name, data in inputs.items():
            path = Path(folder) / "data.pkl"
            path.write_bytes(pickle.dumps(data))
            size = f"{len(data['entities'])} nodes / {len(data['relationships'])} edges / {len(data['texts'])} texts"
            print(f"{name}: {size}")
            for step in ("communities", "node2vec", "umap", "text_embeddings"):
                ours, library = _run_step(step, "ours", path), _run_step(step, "library", path)
                print(
                    f"{'':<16}{step:<17}{ours['wall_s']:>8.2f}{library['wall_s']:>11.2f}"
                    f"{ours['wall_s'] / max(library['wall_s'], 1e-9):>6.2f}x{ours['peak_rss_mib']:>14.0f}"
                    f"  {DESIGN_REFERENCE.get(step, '') if name == 'synthetic' else ''}"
                )


if __name__ == "__main__":
    _step(*sys.argv[1:4])
