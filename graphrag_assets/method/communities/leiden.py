"""Hierarchical Leiden communities on the entity graph (graspologic).

Level 0 is the coarsest. graspologic only re-clusters communities larger than
max_cluster_size at the next level; as the paper does for C1-C3, a community that is not
split is carried down, so that every level is a partition of all clustered entities.
A carried-down community is a new row one level deeper whose parent is the community it
copies; `carried_from` names that parent (-1 for communities Leiden made).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import networkx as nx
import pandas as pd

COMMUNITY_COLUMNS = [
    "id",
    "human_readable_id",
    "community",
    "level",
    "parent",
    "children",
    "title",
    "entity_ids",
    "relationship_ids",
    "text_unit_ids",
    "size",
    "carried_from",
]
DEFAULT_SEED = 0xDEADBEEF


def community_id(level: int, entity_ids: list[str]) -> str:
    return hashlib.sha256(f"community:{level}:{','.join(sorted(entity_ids))}".encode()).hexdigest()[:32]


def networkx_graph(entities: pd.DataFrame, relationships: pd.DataFrame) -> nx.Graph:
    """Undirected graph over entity titles, weights summed over both directions, in a stable order."""
    graph = nx.Graph()
    for row in entities.sort_values("title").itertuples(index=False):
        graph.add_node(row.title, id=row.id, type=row.type, degree=int(row.degree))
    for row in relationships.sort_values(["source", "target"]).itertuples(index=False):
        if graph.has_edge(row.source, row.target):
            graph[row.source][row.target]["weight"] += float(row.weight)
        else:
            graph.add_edge(row.source, row.target, weight=float(row.weight))
    return graph


def cluster_graph(
    graph: nx.Graph, max_cluster_size: int = 10, seed: int = DEFAULT_SEED, use_lcc: bool = False
) -> dict[int, dict[str, tuple[int, int]]]:
    """{level: {node: (level Leiden made its cluster at, cluster)}}, every clustered node at every level.

    A cluster Leiden did not split is carried down unchanged, keeping its key; a key made at a
    shallower level therefore marks a carried copy, however many levels it is carried.
    """
    # graspologic's Leiden is this Rust module; calling it directly, as graspologic does, saves importing
    # graspologic itself (about 390 MB and seconds: umap-learn, numba, scikit-learn, seaborn ...).
    import graspologic_native

    if use_lcc and graph.number_of_nodes():
        graph = graph.subgraph(max(nx.connected_components(graph), key=len)).copy()
    edges = [(a, b, d["weight"]) for a, b, d in sorted(graph.edges(data=True), key=lambda e: (e[0], e[1]))]
    if not edges:
        # Nothing related to anything (a tiny corpus): one community of all entities, so it still gets a report.
        return {0: {node: (0, 0) for node in graph.nodes}} if graph.number_of_nodes() else {}
    clusters = graspologic_native.hierarchical_leiden(
        edges=[(a, b, float(w)) for a, b, w in edges if a != b],
        starting_communities=None,
        resolution=1.0,
        randomness=0.001,
        iterations=1,
        use_modularity=True,
        max_cluster_size=max_cluster_size,
        seed=seed,
    )
    by_level: dict[int, dict[str, tuple[int, int]]] = defaultdict(dict)
    for c in clusters:
        by_level[c.level][c.node] = (c.level, c.cluster)
    levels = sorted(by_level)
    for upper, lower in zip(levels, levels[1:]):
        for node, key in by_level[upper].items():
            by_level[lower].setdefault(node, key)
    return dict(by_level)


def build_communities(
    entities: pd.DataFrame,
    relationships: pd.DataFrame,
    max_cluster_size: int = 10,
    seed: int = DEFAULT_SEED,
    use_lcc: bool = False,
) -> pd.DataFrame:
    """One row per community per level, with ids unique across levels and full provenance."""
    graph = networkx_graph(entities, relationships)
    levels = cluster_graph(graph, max_cluster_size, seed, use_lcc)
    entity_by_title = entities.set_index("title")
    rows, number = [], {}
    for level in sorted(levels):
        members: dict[tuple[int, int], list[str]] = defaultdict(list)
        for node, cluster in sorted(levels[level].items()):
            members[cluster].append(node)
        inside: dict[tuple[int, int], list] = defaultdict(list)  # relationships with both ends in one community
        for rel in relationships.itertuples(index=False):
            cluster = levels[level].get(rel.source)
            if cluster is not None and levels[level].get(rel.target) == cluster:
                inside[cluster].append(rel)
        # Order communities by their smallest member so numbering is stable between runs.
        for cluster, titles in sorted(members.items(), key=lambda kv: kv[1][0]):
            number[(level, cluster)] = len(number)
            parent_key = None
            if level > 0:
                above = levels[level - 1][titles[0]]
                parent_key = (level - 1, above)
            rels = sorted(r.id for r in inside[cluster])
            units = sorted(
                {u for r in inside[cluster] for u in r.text_unit_ids}
                or {u for t in titles for u in entity_by_title.loc[t, "text_unit_ids"]}
            )
            rows.append(
                {
                    "key": (level, cluster),
                    "parent_key": parent_key,
                    "community": number[(level, cluster)],
                    "level": level,
                    "entity_ids": [entity_by_title.loc[t, "id"] for t in titles],
                    "relationship_ids": rels,
                    "text_unit_ids": units,
                    "size": len(titles),
                    "carried": cluster[0] < level,
                }
            )
    communities = pd.DataFrame(rows)
    if communities.empty:
        return pd.DataFrame(columns=COMMUNITY_COLUMNS)
    communities["parent"] = [number[k] if k else -1 for k in communities["parent_key"]]
    children = defaultdict(list)
    for row in communities.itertuples(index=False):
        if row.parent >= 0:
            children[row.parent].append(row.community)
    communities["children"] = communities["community"].map(lambda c: sorted(children.get(c, [])))
    communities["carried_from"] = [
        p if carried else -1 for p, carried in zip(communities["parent"], communities["carried"])
    ]
    communities["title"] = communities["community"].map(lambda c: f"Community {c}")
    communities["human_readable_id"] = communities["community"]
    communities["id"] = [community_id(lv, e) for lv, e in zip(communities["level"], communities["entity_ids"])]
    return communities[COMMUNITY_COLUMNS].reset_index(drop=True)
