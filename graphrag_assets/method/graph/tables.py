"""Turning merged extraction records into the entities and relationships tables."""

from __future__ import annotations

import pandas as pd

from ..schema import columns
from .extraction import entity_id, relationship_id

ENTITY_COLUMNS = columns("entities")
RELATIONSHIP_COLUMNS = columns("relationships")


def finalize_graph(entities: pd.DataFrame, relationships: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Add ids and degrees; drop relationships whose endpoints were never extracted as entities.

    Returns (entities, relationships, number of relationships dropped as orphans).
    """
    titles = set(entities["title"])
    keep = relationships["source"].isin(titles) & relationships["target"].isin(titles)
    orphans = int((~keep).sum())
    relationships = relationships[keep].sort_values(["source", "target"]).reset_index(drop=True)

    # Degree counts distinct neighbours in the undirected graph, as Leiden and the reports see it.
    pairs = {tuple(sorted(pair)) for pair in zip(relationships["source"], relationships["target"])}
    degree: dict[str, int] = {}
    for a, b in pairs:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1

    entities = entities.sort_values("title").reset_index(drop=True)
    entities["id"] = entities["title"].map(entity_id)
    entities["human_readable_id"] = range(len(entities))
    entities["degree"] = entities["title"].map(lambda t: degree.get(t, 0)).astype("int64")

    relationships["id"] = [relationship_id(s, t) for s, t in zip(relationships["source"], relationships["target"])]
    relationships["human_readable_id"] = range(len(relationships))
    relationships["combined_degree"] = [
        degree.get(s, 0) + degree.get(t, 0) for s, t in zip(relationships["source"], relationships["target"])
    ]
    return entities[ENTITY_COLUMNS], relationships[RELATIONSHIP_COLUMNS], orphans


def link_text_units(
    base_text_units: pd.DataFrame, entities: pd.DataFrame, relationships: pd.DataFrame, covariates: pd.DataFrame
) -> pd.DataFrame:
    """The final text units: each knows the entities, relationships and claims extracted from it."""

    def ids_by_unit(ids: pd.Series, unit_ids: pd.Series) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for element_id, units in zip(ids, unit_ids):
            for unit in [units] if isinstance(units, str) else units:
                found.setdefault(unit, []).append(element_id)
        return found

    entity_ids = ids_by_unit(entities["id"], entities["text_unit_ids"])
    relationship_ids = ids_by_unit(relationships["id"], relationships["text_unit_ids"])
    covariate_ids = ids_by_unit(covariates["id"], covariates["text_unit_id"])
    units = base_text_units.copy()
    units["entity_ids"] = units["id"].map(lambda u: entity_ids.get(u, []))
    units["relationship_ids"] = units["id"].map(lambda u: relationship_ids.get(u, []))
    units["covariate_ids"] = units["id"].map(lambda u: covariate_ids.get(u, []))
    return units
