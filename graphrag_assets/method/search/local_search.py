"""Local search: the entities nearest the question, and one context around them.

The context has fixed shares of the token budget: community reports of the chosen level that
hold the entities, source text units, and the rest for the entity, relationship and claim tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ..ingest.tokens import count_tokens
from ..model_interface import ChatModel, Embedder
from ..offline.answers import cited_sentences
from ..schema import records
from .context import (
    MODEL_FAILED,
    Index,
    SearchResult,
    csv_line,
    embed_query,
    pack,
    with_recent_turns,
    written_answer,
)
from .passages import passage
from .settings import BasicSearchSettings, LocalContextSettings, LocalSearchSettings


@dataclass
class LocalContext:
    text: str
    tokens: int
    ids: dict[str, list[str]]
    retrieved_by: dict[str, list[str]] = field(default_factory=dict)  # record id -> "vector", "keyword" or both
    passages: dict[str, str] = field(default_factory=dict)  # unit id -> the part of it packed, where not whole


Section = tuple[str, list[str]]  # a context table's text and the ids of the rows it holds


def build_local_context(
    index: Index,
    entity_ids: list[str],
    level: int,
    budget: int,
    community_prop: float = 0.25,
    text_unit_prop: float = 0.5,
    question_units: list[str] | None = None,
    passages: dict[str, str] | None = None,
) -> LocalContext:
    """One context for the chosen entities, in the paper's proportions of the budget: their communities' reports,
    then the entities, relationships and claims, then the text units that best match the question itself
    (`question_units`; those in `passages` as the passage given) and those the entities come from."""
    if community_prop + text_unit_prop > 1:
        raise ValueError("community_prop + text_unit_prop must not exceed 1")
    entities = index.rows_of("entities", entity_ids)
    reports = _report_section(index, entity_ids, level, int(budget * community_prop))
    tables = _graph_sections(index, entities, int(budget * (1 - community_prop - text_unit_prop)))
    passages = passages or {}
    sources = _source_section(
        index, entities, tables[1][1], int(budget * text_unit_prop), question_units or [], passages
    )
    sections = [reports, *tables, sources]
    text = "\n\n".join(section for section, ids in sections if ids)
    kinds = ("reports", "entities", "relationships", "claims", "text_units")
    ids = {kind: ids for kind, (_, ids) in zip(kinds, sections)}
    packed = {unit: passage for unit, passage in passages.items() if unit in ids["text_units"]}
    return LocalContext(text, count_tokens(text), ids, passages=packed)


def _report_section(index: Index, entity_ids: list[str], level: int, budget: int) -> Section:
    """Reports of the level's communities that hold the chosen entities, those holding more of them first."""
    level_communities = index.communities.filter(pl.col("level") == level)
    counts = {row.community: len(set(row.entity_ids) & set(entity_ids)) for row in records(level_communities)}
    reports = index.reports.filter(
        (pl.col("status") == "ok") & pl.col("community").is_in([c for c, n in counts.items() if n])
    )
    reports = reports.with_columns(matches=pl.col("community").replace_strict(counts, return_dtype=pl.Int64)).sort(
        ["matches", "rank", "community"], descending=[True, True, False], nulls_last=True, maintain_order=True
    )
    text, ids, _ = pack(
        [(r.id, csv_line(r.cited_as, r.title, r.full_content)) for r in records(reports)],
        "-----Reports-----\nid|title|content",
        budget,
    )
    return text, ids


def _graph_sections(index: Index, entities: list[tuple], budget: int) -> tuple[Section, Section, Section]:
    """The entities, then relationships among them and out of them (the strongest first), then claims about
    them, sharing one budget in that order."""
    chosen = list({row.title: None for row in entities})
    entity_text, entity_ids, used = pack(
        [(row.id, csv_line(row.human_readable_id, row.title, row.description, row.degree)) for row in entities],
        "-----Entities-----\nid|entity|description|degree",
        budget,
    )
    rels = index.relationships
    in_source, in_target = pl.col("source").is_in(chosen), pl.col("target").is_in(chosen)
    strongest = {"descending": True, "nulls_last": True, "maintain_order": True}
    in_network = rels.filter(in_source & in_target).sort("weight", **strongest)
    out_network = rels.filter(in_source ^ in_target).sort(["combined_degree", "weight"], **strongest)
    rel_text, rel_ids, rel_used = pack(
        [
            (r.id, csv_line(r.human_readable_id, r.source, r.target, r.description, r.weight))
            for r in [*records(in_network), *records(out_network)]
        ],
        "-----Relationships-----\nid|source|target|description|weight",
        budget - used,
    )
    claims = index.covariates.filter(pl.col("subject_id").is_in(chosen))
    claim_text, claim_ids, _ = pack(
        [(c.id, csv_line(c.human_readable_id, c.subject_id, c.type, c.status, c.description)) for c in records(claims)],
        "-----Claims-----\nid|subject|type|status|description",
        budget - used - rel_used,
    )
    return (entity_text, entity_ids), (rel_text, rel_ids), (claim_text, claim_ids)


def _source_section(
    index: Index,
    entities: list[tuple],
    relationship_ids: list[str],
    budget: int,
    question_units: list[str],
    passages: dict[str, str],
) -> Section:
    """The units that best match the question (as their `passages` where given), then the text units of the
    chosen entities, nearest entity first, each entity's units holding more of the relationships first. An answer
    said once, in a passage none of the nearest entities came from, is in the first group (benchmark.py
    retrieval); packing only a unit's passage makes room for more such units."""
    rel_units = {u for r in index.rows_of("relationships", relationship_ids) for u in r.text_unit_ids}
    ordered, seen = list(dict.fromkeys(question_units)), set(question_units)
    for units in (entity.text_unit_ids for entity in entities):
        for unit in sorted(units, key=lambda u: (u not in rel_units, u)):
            if unit not in seen:
                seen.add(unit)
                ordered.append(unit)
    unit_text = index.texts(ordered) | passages
    number = index.citation_numbers("text_units")
    text, ids, _ = pack(
        [(u, csv_line(number[u], unit_text[u])) for u in ordered if u in unit_text],
        "-----Sources-----\nid|text",
        budget,
    )
    return text, ids


async def local_context_for(
    embedder, index: Index, question: str, settings: LocalContextSettings, units_first: list[tuple] = ()
) -> LocalContext:
    """The context around the entities that best match the question (vectors and keywords fused), with the units
    that best match it after `units_first` (DRIFT's: those that best match the question its follow-ups serve); the
    context's `retrieved_by` says which retriever found each of those."""
    s = settings
    query = await embed_query(embedder, index, question)
    entities = index.hybrid("entity", query, question, s.top_k_entities, s.keyword_weight)
    units = [*units_first, *question_units(index, query, question, s)]
    ranked = list(dict.fromkeys(u for u, _ in units))  # the first question_units whole, the rest as passages
    chosen = list(dict.fromkeys(index.aliases.get(i, i) for i, _ in entities))
    context = build_local_context(
        index,
        chosen,
        s.community_level,
        s.max_context_tokens,
        s.community_prop,
        s.text_unit_prop,
        ranked,
        _passages(index, ranked[s.question_units :], question, s.passage_tokens),
    )
    kept = {i for ids in context.ids.values() for i in ids}
    found = {index.aliases.get(i, i): by for i, by in entities} | dict(units)
    context.retrieved_by = {i: by for i, by in found.items() if i in kept}
    return context


def _passages(index: Index, units: list[str], question: str, tokens: int) -> dict[str, str]:
    """Unit -> its passage that best matches the question, for the units longer than `tokens`."""
    texts = index.texts(units)
    found = {unit: passage(text, question, tokens) for unit, text in texts.items()}
    return {unit: part for unit, part in found.items() if part != texts[unit]}


def question_units(index: Index, query, question: str, settings: LocalContextSettings) -> list[tuple]:
    """(unit, retrieved by) of the text units that best match the question itself, vectors and keywords fused:
    `question_units` to pack whole, then `question_passages` to pack as their best passage."""
    count = settings.question_units + settings.question_passages
    return index.hybrid("text_unit", query, question, count, settings.keyword_weight) if count else []


def extractive_local_answer(index: Index, question: str, context: LocalContext) -> str:
    """The best sentences of the sources as packed: a unit's passage where only that is in the context."""
    units = context.ids["text_units"]
    return cited_sentences(index, question, "text_units", units, index.texts(units) | context.passages)


async def local_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    question: str,
    settings: LocalSearchSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    # What chooses the context, and offline the sentences quoted: a follow-up ("and who read them?") alone
    # shares no words with the passages its conversation is about.
    asked = with_recent_turns(question, conversation)
    context = await local_context_for(embedder, index, asked, settings)
    if chat is None:
        answer = extractive_local_answer(index, asked, context)
    else:
        answer = await written_answer(
            chat, "local_search", context.text, question, settings.response_type, conversation
        )
        answer = answer or MODEL_FAILED
    found = context.ids | {"retrieved_by": context.retrieved_by, "passages": context.passages}
    return SearchResult(answer, chat is None, context.tokens, found)


async def basic_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    question: str,
    settings: BasicSearchSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    """The paper's SS baseline, hybrid: the text units nearest the question and those its words match best (BM25),
    fused by reciprocal rank and packed into the budget."""
    asked = with_recent_turns(question, conversation)
    query = await embed_query(embedder, index, asked)
    hits = index.hybrid("text_unit", query, asked, settings.top_k, settings.keyword_weight)
    units = index.texts(u for u, _ in hits)
    number = index.citation_numbers("text_units")
    text, packed, tokens = pack(
        [(u, csv_line(number[u], units[u])) for u, _ in hits], "-----Sources-----\nid|text", settings.max_context_tokens
    )
    context = {"text_units": packed, "retrieved_by": {u: by for u, by in hits if u in packed}}
    if chat is None:
        answer = cited_sentences(index, asked, "text_units", packed, units)
    else:
        answer = await written_answer(chat, "basic_search", text, question, settings.response_type, conversation)
        answer = answer or MODEL_FAILED
    return SearchResult(answer, chat is None, tokens, context)
