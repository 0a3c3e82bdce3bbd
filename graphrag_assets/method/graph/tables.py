"""Turning merged extraction records into the entities and relationships tables."""

from __future__ import annotations

import asyncio
from dataclasses import astuple, dataclass

import pandas as pd

from ..offline.nlp_graph import extract_nlp_graph
from ..progress import Progress
from .extraction import DEFAULT_ENTITY_TYPES, ExtractionStats, entity_id, extract_graph, relationship_id
from .records import ChatModel
from .summaries import SummaryStats, summarize_descriptions

ENTITY_COLUMNS = ["id", "human_readable_id", "title", "type", "description", "text_unit_ids", "frequency", "degree"]
RELATIONSHIP_COLUMNS = [
    "id",
    "human_readable_id",
    "source",
    "target",
    "description",
    "weight",
    "combined_degree",
    "text_unit_ids",
]


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


@dataclass
class GraphBuild:
    entities: pd.DataFrame
    relationships: pd.DataFrame
    extraction: ExtractionStats
    summaries: SummaryStats


async def build_entity_graph(
    chat: ChatModel | None,
    text_units: pd.DataFrame,
    entity_types: tuple[str, ...] = DEFAULT_ENTITY_TYPES,
    max_gleanings: int = 1,
    summary_max_input_tokens: int = 4000,
    summary_max_tokens: int = 500,
    summarize_above_tokens: int = 500,
    offline_min_mentions: int = 2,
    progress: Progress | None = None,
) -> GraphBuild:
    """Extract, merge, summarize and finalize: with a chat model, or offline by noun-phrase co-occurrence."""
    if chat is None:
        entities, relationships = extract_nlp_graph(text_units, offline_min_mentions)
        stats = ExtractionStats(units=len(text_units))
    else:
        entities, relationships, stats = await extract_graph(chat, text_units, entity_types, max_gleanings, progress)
    entity_summaries, relationship_summaries = await asyncio.gather(
        summarize_descriptions(
            chat,
            list(zip(entities["title"], entities["descriptions"])),
            summary_max_input_tokens,
            summary_max_tokens,
            summarize_above_tokens,
        ),
        summarize_descriptions(
            chat,
            [
                (f"the relationship between {s} and {t}", d)
                for s, t, d in zip(relationships["source"], relationships["target"], relationships["descriptions"])
            ],
            summary_max_input_tokens,
            summary_max_tokens,
            summarize_above_tokens,
        ),
    )
    entities = entities.drop(columns="descriptions").assign(description=entity_summaries[0])
    relationships = relationships.drop(columns="descriptions").assign(description=relationship_summaries[0])
    entities, relationships, stats.orphan_relationships = finalize_graph(entities, relationships)
    summary_stats = SummaryStats(
        *(a + b for a, b in zip(astuple(entity_summaries[1]), astuple(relationship_summaries[1])))
    )
    return GraphBuild(entities, relationships, stats, summary_stats)


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
