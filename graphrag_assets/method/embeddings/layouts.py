"""2-D layouts with UMAP: entities from their node2vec vectors, documents from their embeddings."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import polars as pl

from ..compilation import cached_compilation
from ..schema import frame, vector_matrix


def umap_2d(vectors: np.ndarray, n_neighbors: int = 15, min_dist: float = 0.75, seed: int = 42) -> np.ndarray:
    """UMAP to two dimensions; fewer than 4 points cannot be fitted and are placed on a line by PCA."""
    if len(vectors) < 4:
        if len(vectors) <= 1:
            return np.zeros((len(vectors), 2))
        centred = vectors - vectors.mean(axis=0)
        first = np.linalg.svd(centred, full_matrices=False)[2][0]
        return np.column_stack([centred @ first, np.zeros(len(vectors))])
    neighbours = min(n_neighbors, len(vectors) - 1)
    with cached_compilation():
        import umap  # slow to import (numba); only this step needs it

        large = len(vectors) > EXACT_NEIGHBOURS_UP_TO
        neighbour_graph = (
            _approximate_neighbours(vectors, neighbours, seed) if large else _exact_neighbours(vectors, neighbours)
        )
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=neighbours,
            min_dist=min_dist,
            random_state=seed,
            n_jobs=1,
            precomputed_knn=neighbour_graph,
            # The spectral start solves an eigenproblem of the whole neighbour graph: 390 MiB more than PCA's at
            # 148,000 points.
            init="pca" if large else "spectral",
        )
        with warnings.catch_warnings():  # that a layout without UMAP's own search index cannot place new points
            warnings.filterwarnings("ignore", message=r"precomputed_knn\[2\]")
            return reducer.fit_transform(vectors)


# Up to this many points the exact nearest neighbours take a second or two (scikit-learn), where the approximate
# search (pynndescent) spends 20-30 s compiling functions numba cannot cache, in every process. Past it, the exact
# search's n^2 cost grows too fast, and the approximate one (n log n) takes over.
EXACT_NEIGHBOURS_UP_TO = 50_000


def _exact_neighbours(vectors: np.ndarray, k: int) -> tuple:
    from sklearn.neighbors import NearestNeighbors

    distances, indices = NearestNeighbors(n_neighbors=k).fit(vectors).kneighbors(vectors)
    return indices, distances


def _approximate_neighbours(vectors: np.ndarray, k: int, seed: int) -> tuple:
    """The neighbour graph UMAP would search for, without the search index it keeps to place new points (a layout
    places none): 130 MiB less at 148,000 points."""
    from pynndescent import NNDescent

    search = NNDescent(vectors, n_neighbors=k, random_state=seed, n_jobs=1, low_memory=True, compressed=True)
    return search.neighbor_graph


def layout_nodes(
    graph_embeddings: pl.DataFrame,
    entities: pl.DataFrame,
    top_community: dict[str, int],
    document_embeddings: pl.DataFrame,
    documents: pl.DataFrame,
    **umap_options,
) -> pl.DataFrame:
    """One row per entity (with a node2vec vector) and per document; `kind` tells them apart."""
    rows = []
    if len(graph_embeddings):
        # In single precision, as UMAP's neighbour search computes: a double copy cost 146 MiB at 148K entities.
        xy = umap_2d(vector_matrix(graph_embeddings["embedding"]), **umap_options)
        degree = dict(zip(entities["id"], entities["degree"], strict=True))
        for (entity, title), (x, y) in zip(graph_embeddings.select("id", "title").iter_rows(), xy):
            row = {"id": entity, "kind": "entity", "title": title, "x": x, "y": y}
            rows.append(row | {"community": top_community.get(entity, -1), "degree": degree[entity]})
    if len(document_embeddings):
        xy = umap_2d(vector_matrix(document_embeddings["embedding"]), **umap_options)
        by_id = {row["id"]: row for row in documents.select("id", "title", "text_unit_ids").iter_rows(named=True)}
        for document, (x, y) in zip(document_embeddings["id"], xy):
            row = {"id": document, "kind": "document", "title": by_id[document]["title"], "x": x, "y": y}
            rows.append(row | {"community": -1, "degree": len(by_id[document]["text_unit_ids"])})
    return frame("layouts", rows)


def community_labels(nodes: pl.DataFrame, names: int = 3) -> dict[int, str]:
    """A legend label per top-level community: its number and its best-connected entities."""
    entities = nodes.filter((pl.col("kind") == "entity") & (pl.col("community") >= 0))
    return {
        community: f"{community}: "
        + ", ".join(str(t).title() for t in group.sort("degree", descending=True, maintain_order=True)["title"][:names])
        for (community,), group in entities.group_by("community", maintain_order=True)
    }


def plot_layout(nodes: pl.DataFrame, kind: str, title: str, largest: int = 10) -> bytes:
    """A PNG scatter plot of one kind of node: a colour and a legend entry for each of the `largest` top-level
    communities (a categorical palette: community numbers are names, not quantities), grey for the rest."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = nodes.filter(pl.col("kind") == kind)
    labels = community_labels(nodes)
    members = Counter(points.filter(pl.col("community") >= 0)["community"])
    shown = [community for community, _ in members.most_common(largest)]
    figure, axes = plt.subplots(figsize=(9, 5), dpi=90)
    palette = plt.get_cmap("tab10")

    def scatter(group: pl.DataFrame, **style) -> None:
        sizes = 12 + 4 * np.sqrt(group["degree"].clip(lower_bound=0).to_numpy())
        axes.scatter(group["x"].to_numpy(), group["y"].to_numpy(), s=sizes, alpha=0.8, linewidths=0, **style)

    rest = points.filter(~pl.col("community").is_in(shown))
    if len(rest):
        scatter(rest, color="#c8c8c8", label="other communities" if kind == "entity" else "documents")
    for number, community in enumerate(shown):
        scatter(
            points.filter(pl.col("community") == community), color=palette(number % 10), label=labels[community][:40]
        )
    for name, x, y in (
        points.sort("degree", descending=True, maintain_order=True).head(12).select("title", "x", "y").iter_rows()
    ):
        axes.annotate(str(name).title()[:24], (x, y), fontsize=7, alpha=0.9)
    axes.set_title(title)
    axes.set_xticks([])
    axes.set_yticks([])
    if len(points):
        axes.legend(
            loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False, title="top-level community"
        )
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
