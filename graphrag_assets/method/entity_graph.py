"""The entity graph of a corpus, by either engine: a chat model's extraction (graph/), or offline noun-phrase
co-occurrence (offline/). The one place that chooses between them, so neither package needs the other's."""

from __future__ import annotations

import asyncio
from dataclasses import astuple, dataclass, field

import polars as pl

from . import defaults
from .graph.extraction import DEFAULT_ENTITY_TYPES, ExtractionStats, extract_graph
from .graph.summaries import SummaryStats, joined_descriptions, summarize_descriptions
from .graph.tables import finalize_graph
from .model_interface import ChatModel
from .offline.nlp_graph import extract_concept_graph, extract_nlp_graph, prune_concept_graph
from .progress import Progress
from .prompts import DEFAULT_PROMPTS, PromptSet

# How an index builds its graph: `standard` extracts it with the chat model (the paper's method); `fast` and `lazy`
# take noun phrases and their co-occurrence instead, with no model call (Microsoft GraphRAG's fast method, and
# LazyGraphRAG's concept graph). They differ downstream: fast has the model write reports from each community's
# text units; lazy writes none, deferring all model work to the question.
INDEX_METHODS = ("standard", "fast", "lazy")


@dataclass
class GraphBuild:
    entities: pl.DataFrame
    relationships: pl.DataFrame
    extraction: ExtractionStats
    summaries: SummaryStats
    pruned: dict = field(default_factory=dict)


@dataclass(frozen=True)
class GraphSettings:
    """How the entity graph is built (entity_graph's config builds one). `concept_max_unit_fraction` (set for the
    fast and lazy methods) prunes the co-occurrence graph: see prune_concept_graph. `concept_phrases`: "names"
    (capitalised names, the offline engine's rule) or "noun_phrases" (the noun phrases a part-of-speech chunker
    finds that name something particular)."""

    entity_types: tuple[str, ...] = DEFAULT_ENTITY_TYPES
    max_gleanings: int = defaults.MAX_GLEANINGS
    summary_max_input_tokens: int = defaults.SUMMARY_MAX_INPUT_TOKENS
    summary_max_tokens: int = defaults.SUMMARY_MAX_TOKENS
    summarize_above_tokens: int = defaults.SUMMARIZE_ABOVE_TOKENS
    offline_min_mentions: int = defaults.OFFLINE_MIN_MENTIONS
    concept_max_unit_fraction: float | None = None
    concept_min_edge_weight: float = 1.0
    concept_phrases: str = "names"
    prompts: PromptSet = DEFAULT_PROMPTS


async def build_entity_graph(
    chat: ChatModel | None,
    text_units: pl.DataFrame,
    settings: GraphSettings = GraphSettings(),
    progress: Progress | None = None,
) -> GraphBuild:
    """Extract, merge, summarize and finalize: with a chat model, or offline by noun-phrase co-occurrence."""
    pruned: dict = {}
    if chat is None:
        extract = extract_concept_graph if settings.concept_phrases == "noun_phrases" else extract_nlp_graph
        entities, relationships = extract(text_units, settings.offline_min_mentions)
        if settings.concept_max_unit_fraction is not None:
            entities, relationships, pruned = prune_concept_graph(
                entities,
                relationships,
                len(text_units),
                settings.concept_max_unit_fraction,
                settings.concept_min_edge_weight,
            )
        stats = ExtractionStats(units=len(text_units))
        (entities, entity_stats), (relationships, relationship_stats) = map(
            joined_descriptions, (entities, relationships)
        )
    else:
        entities, relationships, stats = await extract_graph(
            chat, text_units, settings.entity_types, settings.max_gleanings, progress, settings.prompts
        )
        (entities, entity_stats), (relationships, relationship_stats) = await asyncio.gather(
            _summarized(chat, entities, entities["title"], settings),
            _summarized(
                chat,
                relationships,
                [
                    f"the relationship between {s} and {t}"
                    for s, t in zip(relationships["source"], relationships["target"])
                ],
                settings,
            ),
        )
    entities, relationships, stats.orphan_relationships = finalize_graph(entities, relationships)
    summary_stats = SummaryStats(*(a + b for a, b in zip(astuple(entity_stats), astuple(relationship_stats))))
    return GraphBuild(entities, relationships, stats, summary_stats, pruned)


async def _summarized(
    chat: ChatModel, table: pl.DataFrame, names, settings: GraphSettings
) -> tuple[pl.DataFrame, SummaryStats]:
    """The table with one `description` in place of its `descriptions`, the model summarizing long lists."""
    summaries, stats = await summarize_descriptions(
        chat,
        list(zip(names, table["descriptions"])),
        settings.summary_max_input_tokens,
        settings.summary_max_tokens,
        settings.summarize_above_tokens,
        settings.prompts,
    )
    return table.drop("descriptions").with_columns(description=pl.Series(summaries, dtype=pl.String)), stats
