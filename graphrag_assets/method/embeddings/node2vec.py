"""node2vec over the entity graph: weighted random walks, then skip-gram (gensim), seeded."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy.sparse import csr_array, sparray

from ..graph.tables import undirected_edges
from ..schema import frame, vector_column


def entity_adjacency(entities: pl.DataFrame, relationships: pl.DataFrame) -> tuple[list[str], list[str], sparray]:
    """(titles, ids, adjacency) of the entities that have a relationship, in title order, as networkx_graph and
    node2vec walked them, without the graph itself (the step took 1,897 -> 1,078 MiB at 200 MB of text): weights
    summed over both directions, a relationship naming no entity left out, a self-loop once on the diagonal."""
    known = entities.sort("title").unique("title", keep="last", maintain_order=True)
    pairs = undirected_edges(known, relationships)
    titles = pl.concat([pairs["a"], pairs["b"]]).unique().sort()
    ids = known.join(titles.to_frame("title"), on="title").sort("title")["id"].to_list()
    position = pl.DataFrame({"title": titles, "at": pl.int_range(len(titles), dtype=pl.Int64, eager=True)})
    placed = pairs.join(position.rename({"title": "a", "at": "i"}), on="a").join(
        position.rename({"title": "b", "at": "j"}), on="b"
    )
    apart = placed.filter(pl.col("i") != pl.col("j"))
    rows = np.concatenate([placed["i"].to_numpy(), apart["j"].to_numpy()])
    columns = np.concatenate([placed["j"].to_numpy(), apart["i"].to_numpy()])
    weights = np.concatenate([placed["weight"].to_numpy(), apart["weight"].to_numpy()])
    adjacency = csr_array((weights, (rows, columns)), shape=(len(titles), len(titles)))
    adjacency.sum_duplicates()  # sorted within each row, as networkx's array is: a walk's draw depends on it
    return titles.to_list(), ids, adjacency


def node2vec(
    titles: list[str],
    ids: list[str],
    adjacency: sparray,
    dimensions: int = 128,
    num_walks: int = 10,
    walk_length: int = 40,
    window_size: int = 2,
    iterations: int = 3,
    seed: int = 86,
) -> pl.DataFrame:
    """One vector per node of `adjacency` (every one with a neighbour); columns id, title, embedding.

    GraphRAG's node2vec settings (return and in-out parameters of 1) make the walk first-order: each step
    goes to a neighbour with probability proportional to the edge's weight. graspologic simulates that
    one step at a time in Python (10 s of the 19 s on an 8,500-node graph); here every walk takes its
    step at once, with numpy. As in graspologic (GraphRAG's node2vec), walks from low-degree nodes are
    shorter, and skip-gram is gensim's with the parameters graspologic gives it.
    """
    from gensim.models import Word2Vec  # only this step needs it

    if not titles:
        return frame("graph_embeddings")
    walks = random_walks(adjacency, num_walks, walk_length, seed)
    entries = adjacency.tocoo()
    loops = np.bincount(entries.row[entries.row == entries.col], minlength=len(titles))
    degrees = np.diff(adjacency.indptr) + loops  # networkx's degree, where a self-loop counts twice
    lengths = walk_lengths(degrees, walk_length)[walks[:, 0]]
    # One worker: gensim is only reproducible single-threaded.
    model = Word2Vec(
        _Walks(walks, lengths),
        vector_size=dimensions,
        window=window_size,
        min_count=0,
        sg=1,
        workers=1,
        epochs=iterations,
        seed=seed,
    )
    vectors = np.stack([model.wv.get_vector(str(i)) for i in range(len(titles))]).astype(np.float32)
    return frame("graph_embeddings").vstack(
        pl.DataFrame({"id": ids, "title": titles, "embedding": vector_column(vectors)})
    )


class _Walks:
    """The walks as gensim reads its sentences, one list of node tokens at a time and again for each epoch: as one
    list of lists they were a Python string per step (3 million walks on a real corpus's graph, gigabytes)."""

    def __init__(self, walks: np.ndarray, lengths: np.ndarray):
        self.walks, self.lengths = walks, lengths
        self.tokens = [str(node) for node in range(int(walks.max()) + 1)]

    def __iter__(self):
        tokens = self.tokens
        for walk, length in zip(self.walks, self.lengths.tolist()):
            yield [tokens[step] for step in walk[:length].tolist()]


def random_walks(adjacency: sparray, num_walks: int, walk_length: int, seed: int) -> np.ndarray:
    """`num_walks` walks of `walk_length` nodes from every node (as row numbers of the CSR `adjacency`), steps
    weighted.

    Every node must have a neighbour. Each step draws, for all walks together, a point in the current
    node's share of the cumulative edge weights and finds the neighbour it falls on.
    """
    count = adjacency.shape[0]
    cumulative = np.cumsum(adjacency.data, dtype=np.float64)
    before = np.concatenate([[0.0], cumulative])  # before[k]: the weight of the entries ahead of entry k
    rng = np.random.default_rng(seed)
    walks = np.empty((num_walks * count, walk_length), dtype=np.int32)  # node positions: half of int64's memory
    walks[:, 0] = np.concatenate([rng.permutation(count) for _ in range(num_walks)])
    for step in range(1, walk_length):
        current = walks[:, step - 1]
        first, last = adjacency.indptr[current], adjacency.indptr[current + 1]
        low, high = before[first], before[last]
        entry = np.searchsorted(cumulative, low + rng.random(len(current)) * (high - low), side="right")
        walks[:, step] = adjacency.indices[np.clip(entry, first, last - 1)]
    return walks


def walk_lengths(degrees: np.ndarray, walk_length: int) -> np.ndarray:
    """graspologic's walk length per start node: 1 below the 20th degree percentile, then 20%, 30%, ... 80% of
    `walk_length` up to the 80th, and the whole length above it (fewer tokens to train on, same structure)."""
    percentiles = np.percentile(degrees, range(20, 90, 10))
    lengths = np.full(len(degrees), walk_length)
    for bucket in reversed(range(len(percentiles))):
        lengths[degrees <= percentiles[bucket]] = max(1, math.floor(walk_length * (bucket * 0.1 + 0.2)))
    lengths[degrees < percentiles[0]] = 1
    return lengths
