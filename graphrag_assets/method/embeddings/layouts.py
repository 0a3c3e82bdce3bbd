"""2-D layouts with UMAP: entities from their node2vec vectors, documents from their embeddings."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..compilation import cached_compilation
from ..schema import columns

LAYOUT_COLUMNS = columns("layouts")


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

        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=neighbours,
            min_dist=min_dist,
            random_state=seed,
            n_jobs=1,
            precomputed_knn=_exact_neighbours(vectors, neighbours),
        )
        with warnings.catch_warnings():  # that a layout without UMAP's own search index cannot place new points
            warnings.filterwarnings("ignore", message=r"precomputed_knn\[2\]")
            return reducer.fit_transform(vectors)


# Up to this many points the exact nearest neighbours take a second or two (scikit-learn), where UMAP's own
# approximate search (pynndescent) spends 20-30 s compiling functions numba cannot cache, in every process.
EXACT_NEIGHBOURS_UP_TO = 50_000


def _exact_neighbours(vectors: np.ndarray, k: int) -> tuple:
    if len(vectors) > EXACT_NEIGHBOURS_UP_TO:
        return None, None, None  # UMAP searches for itself
    from sklearn.neighbors import NearestNeighbors

    distances, indices = NearestNeighbors(n_neighbors=k).fit(vectors).kneighbors(vectors)
    return indices, distances


def layout_nodes(
    graph_embeddings: pd.DataFrame,
    entities: pd.DataFrame,
    top_community: dict[str, int],
    document_embeddings: pd.DataFrame,
    documents: pd.DataFrame,
    **umap_options,
) -> pd.DataFrame:
    """One row per entity (with a node2vec vector) and per document; `kind` tells them apart."""
    frames = []
    if len(graph_embeddings):
        xy = umap_2d(np.stack(graph_embeddings["embedding"].map(np.asarray)), **umap_options)
        degree = entities.set_index("id")["degree"]
        frames.append(
            pd.DataFrame(
                {
                    "id": graph_embeddings["id"],
                    "kind": "entity",
                    "title": graph_embeddings["title"],
                    "x": xy[:, 0],
                    "y": xy[:, 1],
                    "community": graph_embeddings["id"].map(lambda e: top_community.get(e, -1)),
                    "degree": graph_embeddings["id"].map(degree).astype("int64"),
                }
            )
        )
    if len(document_embeddings):
        xy = umap_2d(np.stack(document_embeddings["embedding"].map(np.asarray)), **umap_options)
        titles = documents.set_index("id")["title"]
        frames.append(
            pd.DataFrame(
                {
                    "id": document_embeddings["id"],
                    "kind": "document",
                    "title": document_embeddings["id"].map(titles),
                    "x": xy[:, 0],
                    "y": xy[:, 1],
                    "community": -1,
                    "degree": documents.set_index("id")
                    .loc[document_embeddings["id"], "text_unit_ids"]
                    .map(len)
                    .to_numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[LAYOUT_COLUMNS] if frames else pd.DataFrame(columns=LAYOUT_COLUMNS)


def community_labels(nodes: pd.DataFrame, names: int = 3) -> dict[int, str]:
    """A legend label per top-level community: its number and its best-connected entities."""
    entities = nodes[(nodes["kind"] == "entity") & (nodes["community"] >= 0)]
    return {
        int(community): f"{community}: " + ", ".join(str(t).title() for t in group.nlargest(names, "degree")["title"])
        for community, group in entities.groupby("community")
    }


def plot_layout(nodes: pd.DataFrame, kind: str, title: str, largest: int = 10) -> bytes:
    """A PNG scatter plot of one kind of node: a colour and a legend entry for each of the `largest` top-level
    communities (a categorical palette: community numbers are names, not quantities), grey for the rest."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = nodes[nodes["kind"] == kind]
    labels = community_labels(nodes)
    members = points[points["community"] >= 0]["community"].value_counts()
    shown = [int(c) for c in members.index[:largest]]
    figure, axes = plt.subplots(figsize=(9, 5), dpi=90)
    palette = plt.get_cmap("tab10")

    def scatter(group: pd.DataFrame, **style) -> None:
        sizes = 12 + 4 * np.sqrt(group["degree"].clip(lower=0))
        axes.scatter(group["x"], group["y"], s=sizes, alpha=0.8, linewidths=0, **style)

    rest = points[~points["community"].isin(shown)]
    if len(rest):
        scatter(rest, color="#c8c8c8", label="other communities" if kind == "entity" else "documents")
    for number, community in enumerate(shown):
        scatter(points[points["community"] == community], color=palette(number % 10), label=labels[community][:40])
    for row in points.nlargest(12, "degree").itertuples(index=False):
        axes.annotate(str(row.title).title()[:24], (row.x, row.y), fontsize=7, alpha=0.9)
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
