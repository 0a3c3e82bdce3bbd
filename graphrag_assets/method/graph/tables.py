"""Turning merged extraction records into the entities and relationships tables."""

from __future__ import annotations

import polars as pl

from ..schema import columns
from .extraction import entity_id, relationship_id

ENTITY_COLUMNS = columns("entities")
RELATIONSHIP_COLUMNS = columns("relationships")


def undirected_edges(entities: pl.DataFrame, relationships: pl.DataFrame) -> pl.DataFrame:
    """The entity graph's edges as networkx_graph holds them, without the graph: columns a, b (a <= b) and weight,
    summed over both directions, self-loops kept; a relationship naming no entity is no edge. Unsorted."""
    titles = entities["title"].implode()
    return (
        relationships.filter(pl.col("source").is_in(titles) & pl.col("target").is_in(titles))
        .group_by(pl.min_horizontal("source", "target").alias("a"), pl.max_horizontal("source", "target").alias("b"))
        .agg(pl.col("weight").cast(pl.Float64).sort().sum())  # summed in one order whatever the rows' order
    )


def finalize_graph(entities: pl.DataFrame, relationships: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Add ids and degrees; drop relationships whose endpoints were never extracted as entities.

    Returns (entities, relationships, number of relationships dropped as orphans).
    """
    titles = entities["title"].implode()
    kept = relationships.filter(pl.col("source").is_in(titles) & pl.col("target").is_in(titles))
    orphans = len(relationships) - len(kept)
    relationships = kept.sort(["source", "target"])

    # Degree counts distinct neighbours in the undirected graph, as Leiden and the reports see it (a self-loop twice).
    pairs = relationships.select(
        pl.min_horizontal("source", "target").alias("a"), pl.max_horizontal("source", "target").alias("b")
    ).unique()
    degree = (
        pl.concat([pairs["a"], pairs["b"]])
        .value_counts(name="degree")
        .rename({"a": "title"})
        .with_columns(pl.col("degree").cast(pl.Int32))
    )
    del pairs
    entities = entities.sort("title").join(degree, on="title", how="left", maintain_order="left")
    entities = entities.with_columns(
        id=_hashed(entity_id, entities["title"]),
        human_readable_id=pl.int_range(pl.len(), dtype=pl.Int32),
        degree=pl.col("degree").fill_null(0),
    )
    of = degree.lazy()
    relationships = (
        relationships.lazy()
        .join(of.rename({"title": "source", "degree": "of_source"}), on="source", how="left", maintain_order="left")
        .join(of.rename({"title": "target", "degree": "of_target"}), on="target", how="left", maintain_order="left")
        .collect()
    )
    relationships = relationships.with_columns(
        id=_hashed(relationship_id, relationships["source"], relationships["target"]),
        human_readable_id=pl.int_range(pl.len(), dtype=pl.Int32),
        combined_degree=(pl.col("of_source") + pl.col("of_target")).cast(pl.Int32),
    )
    return entities.select(ENTITY_COLUMNS), relationships.select(RELATIONSHIP_COLUMNS), orphans


def _hashed(id_of, *columns: pl.Series, batch: int = 100_000) -> pl.Series:
    """`id_of` of each row's values, made a batch at a time: a Python string per row of 1.3M relationships stayed
    in Python's allocator after they were let go."""
    parts = [
        pl.Series([id_of(*row) for row in zip(*(c.slice(start, batch) for c in columns), strict=True)], dtype=pl.String)
        for start in range(0, len(columns[0]), batch)
    ]
    return pl.concat(parts) if parts else pl.Series([], dtype=pl.String)


# The final text units: each knows the entities, relationships and claims extracted from it, in id order. A query
# the store runs over the corpus's tables ($corpus), so a large corpus's text is never held in the process. Its
# aggregates gather every (id, unit) pair of the entities and relationships (5.6M at 200 MB of text), more than DuckDB
# holds within its memory bound at once: at 256 MiB the step failed, and ran again at 1 GiB (1,597 MiB peak). So the
# query is run in parts ($part of $parts, by the hash of the unit's id), each gathering only its own units' pairs.
LINKED_TEXT_UNITS = """
SELECT units.* EXCLUDE (corpus, pages),
       coalesce(units.pages, []) AS pages,  -- the final table has always said "no pages" with an empty list
       coalesce(by_entity.ids, []) AS entity_ids,
       coalesce(by_relationship.ids, []) AS relationship_ids,
       coalesce(by_claim.ids, []) AS covariate_ids
  FROM base_text_units units
  LEFT JOIN (
      SELECT unit, list(id ORDER BY id) AS ids
        FROM (SELECT id, unnest(text_unit_ids) AS unit FROM entities WHERE corpus = $corpus)
       WHERE hash(unit) % $parts = $part GROUP BY unit
  ) by_entity ON by_entity.unit = units.id
  LEFT JOIN (
      SELECT unit, list(id ORDER BY id) AS ids
        FROM (SELECT id, unnest(text_unit_ids) AS unit FROM relationships WHERE corpus = $corpus)
       WHERE hash(unit) % $parts = $part GROUP BY unit
  ) by_relationship ON by_relationship.unit = units.id
  LEFT JOIN (
      SELECT text_unit_id AS unit, list(id ORDER BY id) AS ids
        FROM covariates WHERE corpus = $corpus AND hash(text_unit_id) % $parts = $part GROUP BY unit
  ) by_claim ON by_claim.unit = units.id
 WHERE units.corpus = $corpus AND hash(units.id) % $parts = $part
"""

# What LINKED_TEXT_UNITS's aggregates hold, in bytes: 512 a pair, measured with room (at 256 MiB, 700K pairs a part
# fitted and 1.4M did not).
LINKED_TEXT_UNITS_BYTES = """
SELECT 512 * (
    (SELECT coalesce(sum(len(text_unit_ids)), 0) FROM entities WHERE corpus = $corpus)
    + (SELECT coalesce(sum(len(text_unit_ids)), 0) FROM relationships WHERE corpus = $corpus)
    + (SELECT count(*) FROM covariates WHERE corpus = $corpus)
)
"""
