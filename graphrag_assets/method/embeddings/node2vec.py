"""node2vec over the entity graph (graspologic), seeded."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd

from ..compilation import cached_compilation


def node2vec(
    graph: nx.Graph,
    dimensions: int = 128,
    num_walks: int = 10,
    walk_length: int = 40,
    window_size: int = 2,
    iterations: int = 3,
    seed: int = 86,
) -> pd.DataFrame:
    """One vector per entity that has at least one relationship; columns id, title, embedding."""
    with cached_compilation():  # graspologic imports umap-learn
        from graspologic.embed import node2vec_embed  # slow to import; only this step needs it

    connected = graph.subgraph([n for n, d in graph.degree() if d > 0]).copy()
    if connected.number_of_nodes() == 0:
        return pd.DataFrame(columns=["id", "title", "embedding"])
    # One worker: gensim is only reproducible single-threaded.
    vectors, labels = node2vec_embed(
        connected,
        num_walks=num_walks,
        walk_length=walk_length,
        dimensions=dimensions,
        window_size=window_size,
        iterations=iterations,
        workers=1,
        random_seed=seed,
    )
    order = np.argsort(labels)
    return pd.DataFrame(
        {
            "id": [connected.nodes[labels[i]]["id"] for i in order],
            "title": [labels[i] for i in order],
            "embedding": [vectors[i].astype(np.float32).tolist() for i in order],
        }
    )
