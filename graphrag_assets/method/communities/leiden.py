"""Hierarchical Leiden communities on the entity graph (graspologic's Leiden).

Level 0 is the coarsest. Only communities larger than max_cluster_size are clustered
again at the next level; as the paper does for C1-C3, a community that is not
split is carried down, so that every level is a partition of all clustered entities.
A carried-down community is a new row one level deeper whose parent is the community it
copies; `carried_from` names that parent (-1 for communities Leiden made).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict, deque

import networkx as nx
import polars as pl

from ..defaults import COMMUNITY_SEED, MAX_CLUSTER_SIZE
from ..graph.tables import undirected_edges
from ..schema import OUTPUT_TABLES, columns, frame, polars_type

COMMUNITY_COLUMNS = columns("communities")


def community_id(level: int, entity_ids: list[str]) -> str:
    return hashlib.sha256(f"community:{level}:{','.join(sorted(entity_ids))}".encode()).hexdigest()[:32]


def networkx_graph(entities: pl.DataFrame, relationships: pl.DataFrame) -> nx.Graph:
    """Undirected graph over entity titles, weights summed over both directions, in a stable order.

    A relationship naming a title that is no entity (Microsoft GraphRAG's own outputs have some) stays in its
    table but is no edge here: the graph's nodes are exactly the entities.
    """
    graph = nx.Graph()
    for title, entity, kind, degree in entities.sort("title").select("title", "id", "type", "degree").iter_rows():
        graph.add_node(title, id=entity, type=kind, degree=int(degree))
    for source, target, weight in (
        relationships.sort(["source", "target"]).select("source", "target", "weight").iter_rows()
    ):
        if source not in graph or target not in graph:
            continue
        if graph.has_edge(source, target):
            graph[source][target]["weight"] += float(weight)
        else:
            graph.add_edge(source, target, weight=float(weight))
    return graph


# Leiden is re-run from its own result until the partition stops changing (at most this often). A converged
# partition is a fixed point: started from it, the same graph gives it back, so a re-run or an edit elsewhere
# leaves a community as it was. One pass, as graspologic runs it, moves a third of the communities when a
# document adds two relationships to a 300-edge graph, and many more under another seed.
MAX_LEIDEN_ROUNDS = 32

Partition = dict[str, tuple[int, int]]
Edge = tuple[str, str, float]


def weighted_edges(entities: pl.DataFrame, relationships: pl.DataFrame) -> tuple[list[str], list[Edge]]:
    """The entity graph as Leiden takes it, without building it: its nodes (entity titles, sorted) and its edges
    (a, b, weight) with a < b, sorted, weights summed over both directions, no self-loop. The edges networkx_graph
    lists, without the graph (the step took 2,548 -> 1,972 MiB at 200 MB of text)."""
    nodes = entities["title"].unique().sort()
    edges = undirected_edges(entities, relationships).filter(pl.col("a") != pl.col("b")).sort("a", "b")
    # Each name one Python string, which its edges share: a string for each end of each edge was 140 MiB of the
    # step at 200 MB of text, held while Leiden ran. Every end is a node, found by bisection.
    names = nodes.to_list()
    ends = (map(names.__getitem__, nodes.search_sorted(edges[end]).to_list()) for end in ("a", "b"))
    return names, list(zip(*ends, edges["weight"].to_list()))


def cluster_graph(
    graph: nx.Graph,
    max_cluster_size: int = MAX_CLUSTER_SIZE,
    seed: int = COMMUNITY_SEED,
    use_lcc: bool = False,
    previous: dict[int, dict[str, int]] | None = None,
) -> dict[int, Partition]:
    """cluster_edges on a networkx graph, each edge the way round the graph lists it."""
    if use_lcc and graph.number_of_nodes():
        graph = graph.subgraph(max(nx.connected_components(graph), key=len))
    edges = sorted((a, b, float(d["weight"])) for a, b, d in graph.edges(data=True) if a != b)
    return cluster_edges(list(graph.nodes), edges, max_cluster_size, seed, False, previous)


def cluster_edges(
    nodes: list[str],
    edges: list[Edge],
    max_cluster_size: int = MAX_CLUSTER_SIZE,
    seed: int = COMMUNITY_SEED,
    use_lcc: bool = False,
    previous: dict[int, dict[str, int]] | None = None,
) -> dict[int, Partition]:
    """{level: {node: (level Leiden made its cluster at, cluster)}}, every clustered node at every level.

    Level 0 clusters the whole graph; a cluster larger than max_cluster_size is clustered again, alone,
    one level down, with a seed drawn from its members (so an unchanged cluster splits the same way
    whatever happened elsewhere). `previous` ({level: {node: community}}, an earlier run's partition)
    is where Leiden starts from, nodes it does not know each alone: an edit then moves only the
    communities it touches. A cluster not split is carried down unchanged, keeping its key; a key made
    at a shallower level therefore marks a carried copy, however many levels it is carried.
    """
    if use_lcc and nodes:
        graph = nx.Graph()
        graph.add_nodes_from(nodes)
        graph.add_edges_from((a, b) for a, b, _ in edges)
        largest = max(nx.connected_components(graph), key=len)
        del graph
        nodes, edges = [n for n in nodes if n in largest], [e for e in edges if e[0] in largest]
    if not edges:
        # Nothing related to anything (a tiny corpus): one community of all entities, so it still gets a report.
        return {0: {node: (0, 0) for node in nodes}} if nodes else {}
    previous = previous or {}
    by_level: dict[int, Partition] = defaultdict(dict)
    made_at: Counter = Counter()  # clusters made at each level so far, to number the next ones
    to_split = deque([(0, edges)])
    while to_split:
        level, cluster_edges = to_split.popleft()
        nodes = sorted({node for edge in cluster_edges for node in edge[:2]})
        cluster_seed = seed if level == 0 else _seed_for(seed, nodes)
        clusters = _converged_leiden(cluster_edges, _start_from(previous.get(level), nodes), cluster_seed)
        sizes = Counter(clusters.values())
        if level > 0 and len(sizes) == 1:
            continue  # Leiden keeps it whole: it stays as its parent, carried down
        for node, cluster in clusters.items():
            by_level[level][node] = (level, made_at[level] + cluster)
        made_at[level] += len(sizes)
        inside: dict[int, list] = defaultdict(list)
        for a, b, weight in cluster_edges:
            if clusters[a] == clusters[b]:
                inside[clusters[a]].append((a, b, weight))
        to_split += [(level + 1, inside[c]) for c in sorted(sizes) if sizes[c] > max_cluster_size and inside[c]]
    levels = sorted(by_level)
    for upper, lower in zip(levels, levels[1:]):
        for node, key in by_level[upper].items():
            by_level[lower].setdefault(node, key)
    return dict(by_level)


def _converged_leiden(edges: list[tuple[str, str, float]], start: dict[str, int] | None, seed: int) -> dict[str, int]:
    # graspologic's Leiden is this Rust module; calling it directly saves importing graspologic itself
    # (about 390 MB and seconds: umap-learn, numba, scikit-learn, seaborn ...).
    import graspologic_native

    clusters = start
    for _ in range(MAX_LEIDEN_ROUNDS):
        _, found = graspologic_native.leiden(
            edges=edges,
            starting_communities=clusters,
            resolution=1.0,
            randomness=0.001,
            iterations=1,
            use_modularity=True,
            seed=seed,
        )
        # Numbered the one way before it is compared or started from: Leiden's moves depend on the labels.
        found = _numbered(found)
        if found == clusters:
            break
        clusters = found
    return clusters


def _start_from(previous: dict[str, int] | None, nodes: list[str]) -> dict[str, int] | None:
    """The earlier partition restricted to these nodes; a node it did not have starts alone."""
    if not previous:
        return None
    return _numbered({node: previous.get(node, f"new:{node}") for node in nodes})


def _numbered(clusters: dict) -> dict[str, int]:
    """Clusters numbered 0, 1, ... in order of their smallest member, so equal partitions compare equal."""
    first: dict = {}
    for node in sorted(clusters):
        first.setdefault(clusters[node], len(first))
    return {node: first[cluster] for node, cluster in clusters.items()}


def _seed_for(seed: int, members: list[str]) -> int:
    return int(hashlib.sha256(f"{seed}:{','.join(members)}".encode()).hexdigest()[:8], 16)


def previous_partition(communities: pl.DataFrame, entities: pl.DataFrame) -> dict[int, dict[str, int]]:
    """{level: {entity title: community}} of a stored communities table, for the entities that still exist."""
    title_of = dict(zip(entities["id"], entities["title"]))
    partition: dict[int, dict[str, int]] = defaultdict(dict)
    for level, community, entity_ids in communities.select("level", "community", "entity_ids").iter_rows():
        for entity in entity_ids:
            if entity in title_of:
                partition[level][title_of[entity]] = community
    return dict(partition)


def build_communities(
    entities: pl.DataFrame,
    relationships: pl.DataFrame,
    max_cluster_size: int = MAX_CLUSTER_SIZE,
    seed: int = COMMUNITY_SEED,
    use_lcc: bool = False,
    previous: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per community per level, with ids unique across levels and full provenance.

    `previous`, an earlier communities table of the same corpus and settings, is where clustering starts.
    Columnar, a level at a time: a Python record per relationship and per community held a 50 MB corpus's
    relationships and their text units several times over. A caller that holds no other reference to `entities`
    and `relationships` has them let go once their text units are coded as numbers.
    """
    start = previous_partition(previous, entities) if previous is not None else None
    # The graph is let go as soon as it is clustered: it held more memory than the rows made from it.
    levels = cluster_edges(*weighted_edges(entities, relationships), max_cluster_size, seed, use_lcc, start)
    del start
    if not levels:
        return frame("communities")
    # Text units as numbers in the order of their ids while the levels are built: every level gathers every
    # relationship's list, and strings of 32 characters made each list ten times larger.
    units = (
        pl.concat([entities["text_unit_ids"].explode(), relationships["text_unit_ids"].explode()])
        .drop_nulls()
        .unique()
        .sort()
    )
    numbers = pl.int_range(len(units), dtype=pl.UInt32, eager=True)
    coded = pl.element().replace_strict(units, numbers, return_dtype=pl.UInt32)
    members = _membership(levels).join(
        entities.select("title", "id", pl.col("text_unit_ids").list.eval(coded).alias("entity_units")),
        on="title",
        how="left",
    )
    edges = relationships.select(
        "source", "target", pl.col("id").alias("relationship"), pl.col("text_unit_ids").list.eval(coded)
    )
    # Their text units as strings are not read again; let go here when the caller handed the frames over.
    del entities, relationships
    groups = pl.concat(
        [_level_communities(members.filter(pl.col("level") == level), edges) for level in sorted(levels)]
    )
    # Numbered by level, then by smallest member, so numbering is stable between runs.
    groups = groups.sort("level", "first").with_row_index("community").with_columns(pl.col("community").cast(pl.Int32))
    number = groups.select("level", "made_at", "cluster", "community")
    parents = (
        groups.filter(pl.col("level") > 0)
        .select("community", pl.col("level") - 1, pl.col("first").alias("title"))
        .join(members.select("level", "title", "made_at", "cluster"), on=["level", "title"], how="left")
        .join(number.rename({"community": "parent"}), on=["level", "made_at", "cluster"], how="left")
        .select("community", "parent")
    )
    groups = groups.join(parents, on="community", how="left", maintain_order="left").with_columns(
        pl.col("parent").fill_null(-1)
    )
    children = groups.filter(pl.col("parent") >= 0).group_by("parent").agg(pl.col("community").sort().alias("children"))
    groups = groups.join(children.rename({"parent": "community"}), on="community", how="left", maintain_order="left")
    return groups.select(
        pl.Series("id", [community_id(level, ids) for level, ids in groups.select("level", "entity_ids").iter_rows()]),
        pl.col("community").alias("human_readable_id"),
        "community",
        "level",
        "parent",
        pl.col("children").fill_null([]),
        pl.format("Community {}", "community").alias("title"),
        "entity_ids",
        "relationship_ids",
        pl.col("text_unit_ids").list.eval(pl.element().replace_strict(numbers, units, return_dtype=pl.String)),
        "size",
        pl.when(pl.col("made_at") < pl.col("level")).then(pl.col("parent")).otherwise(-1).alias("carried_from"),
    ).cast({name: polars_type(kind) for name, kind in OUTPUT_TABLES["communities"].items()})


def _membership(levels: dict[int, Partition]) -> pl.DataFrame:
    """(level, title, made_at, cluster): each clustered entity's community key at each level."""
    rows = [(level, title, key[0], key[1]) for level, partition in levels.items() for title, key in partition.items()]
    return pl.DataFrame(
        rows, schema={"level": pl.Int32, "title": pl.String, "made_at": pl.Int32, "cluster": pl.Int64}, orient="row"
    )


def _level_communities(members: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """One level's communities: members (entity ids in title order), the relationships with both ends inside,
    and the text units of those relationships (of the members, when none has any)."""
    key = ["level", "made_at", "cluster"]
    communities = (
        members.sort("title")
        .group_by(key, maintain_order=True)
        .agg(
            pl.col("title").first().alias("first"),
            pl.col("id").alias("entity_ids"),
            pl.len().cast(pl.Int32).alias("size"),
        )
    )
    ends = members.select("title", *key)
    inside = (
        edges.join(ends.rename({"title": "source"}), on="source")
        .join(ends.rename({"title": "target"}), on=["target", *key])
        .group_by(key)
        .agg(
            pl.col("relationship").sort().alias("relationship_ids"),
            pl.col("text_unit_ids").list.explode(keep_nulls=False, empty_as_null=False).alias("units"),
        )
    )
    communities = communities.join(inside, on=key, how="left", maintain_order="left")
    bare = communities.filter(pl.col("units").list.len().fill_null(0) == 0).select(key)
    from_members = (
        members.join(bare, on=key)
        .group_by(key)
        .agg(pl.col("entity_units").list.explode(keep_nulls=False, empty_as_null=False).alias("member_units"))
    )
    return communities.join(from_members, on=key, how="left", maintain_order="left").select(
        *key,
        "first",
        "entity_ids",
        pl.col("relationship_ids").fill_null([]),
        pl.coalesce(pl.when(pl.col("units").list.len() > 0).then(pl.col("units")), pl.col("member_units"))
        .list.unique()
        .list.sort()
        .alias("text_unit_ids"),
        "size",
    )
