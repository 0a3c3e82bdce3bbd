"""Exports other tools read: GraphML for Gephi and networkx, parquet with GraphRAG's column names."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pandas as pd


def graphml(
    entities: pd.DataFrame, relationships: pd.DataFrame, communities: pd.DataFrame, nodes: pd.DataFrame, path: Path
) -> nx.Graph:
    """Write the entity graph with type, description, degree, community per level and x, y."""
    graph = nx.Graph()
    position = nodes[nodes["kind"] == "entity"].set_index("id")[["x", "y"]]
    levels: dict[str, dict[str, int]] = {}
    for row in communities.itertuples(index=False):
        for entity in row.entity_ids:
            levels.setdefault(entity, {})[f"community_level_{row.level}"] = int(row.community)
    for row in entities.itertuples(index=False):
        attributes = {
            "id": row.id,
            "type": row.type or "",
            "description": row.description or "",
            "degree": int(row.degree),
            "frequency": int(row.frequency),
            "community": levels.get(row.id, {}).get("community_level_0", -1),
            **levels.get(row.id, {}),
        }
        if row.id in position.index:
            attributes["x"], attributes["y"] = (float(v) for v in position.loc[row.id])
        graph.add_node(row.title, **attributes)
    for row in relationships.itertuples(index=False):
        graph.add_edge(row.source, row.target, id=row.id, weight=float(row.weight), description=row.description or "")
    path.parent.mkdir(parents=True, exist_ok=True)
    nx.write_graphml(graph, path)
    return graph


def parquet(tables: dict[str, pd.DataFrame], folder: Path) -> dict[str, Path]:
    """One parquet file per table, named as GraphRAG names its outputs."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, df in tables.items():
        path = folder / f"{name}.parquet"
        df.to_parquet(path, index=False)
        written[name] = path
    return written
