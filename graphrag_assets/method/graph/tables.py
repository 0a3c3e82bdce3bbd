"""Turning merged extraction records into the entities and relationships tables."""

from __future__ import annotations

import polars as pl

from ..schema import columns
from .extraction import entity_id, relationship_id

ENTITY_COLUMNS = columns("entities")
RELATIONSHIP_COLUMNS = columns("relationships")


def finalize_graph(entities: pl.DataFrame, relationships: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Add ids and degrees; drop relationships whose endpoints were never extracted as entities.

    Returns (entities, relationships, number of relationships dropped as orphans).
    """
    titles = entities["title"].implode()
    kept = relationships.filter(pl.col("source").is_in(titles) & pl.col("target").is_in(titles))
    orphans = len(relationships) - len(kept)
    relationships = kept.sort(["source", "target"])

    # Degree counts distinct neighbours in the undirected graph, as Leiden and the reports see it.
    pairs = {tuple(sorted(pair)) for pair in zip(relationships["source"], relationships["target"])}
    degree: dict[str, int] = {}
    for a, b in pairs:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1

    entities = entities.sort("title")
    entities = entities.with_columns(
        id=pl.Series([entity_id(t) for t in entities["title"]], dtype=pl.String),
        human_readable_id=pl.int_range(pl.len(), dtype=pl.Int32),
        degree=pl.Series([degree.get(t, 0) for t in entities["title"]], dtype=pl.Int32),
    )
    ends = list(zip(relationships["source"], relationships["target"]))
    relationships = relationships.with_columns(
        id=pl.Series([relationship_id(s, t) for s, t in ends], dtype=pl.String),
        human_readable_id=pl.int_range(pl.len(), dtype=pl.Int32),
        combined_degree=pl.Series([degree.get(s, 0) + degree.get(t, 0) for s, t in ends], dtype=pl.Int32),
    )
    return entities.select(ENTITY_COLUMNS), relationships.select(RELATIONSHIP_COLUMNS), orphans


def link_text_units(
    base_text_units: pl.DataFrame, entities: pl.DataFrame, relationships: pl.DataFrame, covariates: pl.DataFrame
) -> pl.DataFrame:
    """The final text units: each knows the entities, relationships and claims extracted from it."""

    def ids_by_unit(ids: pl.Series, unit_ids: pl.Series) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for element_id, units in zip(ids, unit_ids):
            for unit in [units] if isinstance(units, str) else units:
                found.setdefault(unit, []).append(element_id)
        return found

    linked = {
        "entity_ids": ids_by_unit(entities["id"], entities["text_unit_ids"]),
        "relationship_ids": ids_by_unit(relationships["id"], relationships["text_unit_ids"]),
        "covariate_ids": ids_by_unit(covariates["id"], covariates["text_unit_id"]),
    }
    return base_text_units.with_columns(
        *(
            pl.Series(column, [ids.get(unit, []) for unit in base_text_units["id"]], dtype=pl.List(pl.String))
            for column, ids in linked.items()
        ),
        pages=pl.col("pages").fill_null([]),  # the final table has always said "no pages" with an empty list
    )
