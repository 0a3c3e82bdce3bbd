"""Local search: the entities nearest the question, and one context around them.

The context has fixed shares of the token budget: community reports of the chosen level that
hold the entities, source text units, and the rest for the entity, relationship and claim tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph.records import ChatModel, Embedder
from ..offline.answers import cited_sentences
from ..prompts import user_message
from .context import Index, SearchResult, conversation_block, csv_line, embed_query, pack, with_recent_turns


@dataclass
class LocalContext:
    text: str
    tokens: int
    ids: dict[str, list[str]]


def build_local_context(
    index: Index,
    entity_ids: list[str],
    level: int,
    budget: int,
    community_prop: float = 0.25,
    text_unit_prop: float = 0.5,
) -> LocalContext:
    if community_prop + text_unit_prop > 1:
        raise ValueError("community_prop + text_unit_prop must not exceed 1")
    entities = index.entities.set_index("id").loc[entity_ids]
    titles = list(entities["title"])
    chosen = set(titles)

    level_communities = index.communities[index.communities["level"] == level]
    counts = {row.community: len(set(row.entity_ids) & set(entity_ids)) for row in level_communities.itertuples()}
    reports = index.reports[
        (index.reports["status"] == "ok") & index.reports["community"].isin([c for c, n in counts.items() if n])
    ].copy()
    reports["matches"] = reports["community"].map(counts)
    reports = reports.sort_values(["matches", "rank", "community"], ascending=[False, False, True])
    report_text, report_ids, report_tokens = pack(
        [(r.id, csv_line(r.cited_as, r.title, r.full_content)) for r in reports.itertuples()],
        "-----Reports-----\nid|title|content",
        int(budget * community_prop),
    )

    tables_budget = int(budget * (1 - community_prop - text_unit_prop))
    entity_text, entity_packed, used = pack(
        [
            (row.Index, csv_line(row.human_readable_id, row.title, row.description, row.degree))
            for row in entities.itertuples()
        ],
        "-----Entities-----\nid|entity|description|degree",
        tables_budget,
    )
    rels = index.relationships
    in_network = rels[rels["source"].isin(chosen) & rels["target"].isin(chosen)]
    out_network = rels[(rels["source"].isin(chosen) ^ rels["target"].isin(chosen))].sort_values(
        ["combined_degree", "weight"], ascending=False
    )
    rel_text, rel_ids, rel_used = pack(
        [
            (r.id, csv_line(r.human_readable_id, r.source, r.target, r.description, r.weight))
            for r in list(in_network.sort_values("weight", ascending=False).itertuples())
            + list(out_network.itertuples())
        ],
        "-----Relationships-----\nid|source|target|description|weight",
        tables_budget - used,
    )
    claims = index.covariates[index.covariates["subject_id"].isin(chosen)]
    claim_text, claim_ids, _ = pack(
        [
            (c.id, csv_line(c.human_readable_id, c.subject_id, c.type, c.status, c.description))
            for c in claims.itertuples()
        ],
        "-----Claims-----\nid|subject|type|status|description",
        tables_budget - used - rel_used,
    )

    # Text units of the chosen entities, nearest entity first, then those with more of the relationships.
    rel_units = {u for units in rels[rels["id"].isin(rel_ids)]["text_unit_ids"] for u in units}
    ordered, seen = [], set()
    for units in entities["text_unit_ids"]:
        for unit in sorted(units, key=lambda u: (u not in rel_units, u)):
            if unit not in seen:
                seen.add(unit)
                ordered.append(unit)
    unit_text = index.text_units.set_index("id")["text"]
    number = {u: i for i, u in enumerate(index.text_units["id"])}
    source_text, unit_ids, _ = pack(
        [(u, csv_line(number[u], unit_text[u])) for u in ordered if u in unit_text.index],
        "-----Sources-----\nid|text",
        int(budget * text_unit_prop),
    )
    sections = [
        s
        for s, ids in (
            (report_text, report_ids),
            (entity_text, entity_packed),
            (rel_text, rel_ids),
            (claim_text, claim_ids),
            (source_text, unit_ids),
        )
        if ids
    ]
    text = "\n\n".join(sections)
    from ..ingest.tokens import count_tokens

    return LocalContext(
        text,
        count_tokens(text),
        {
            "reports": report_ids,
            "entities": entity_packed,
            "relationships": rel_ids,
            "claims": claim_ids,
            "text_units": unit_ids,
        },
    )


async def local_context_for(
    embedder,
    index: Index,
    question: str,
    level: int,
    top_k_entities: int,
    budget: int,
    community_prop: float,
    text_unit_prop: float,
) -> LocalContext:
    query = await embed_query(embedder, index, question)
    chosen = list(dict.fromkeys(index.aliases.get(i, i) for i, _ in index.nearest("entity", query, top_k_entities)))
    return build_local_context(index, chosen, level, budget, community_prop, text_unit_prop)


def extractive_local_answer(index: Index, question: str, context: LocalContext) -> str:
    return cited_sentences(
        index, question, "text_units", context.ids["text_units"], index.text_units.set_index("id")["text"].to_dict()
    )


async def local_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    *,
    question: str,
    community_level: int,
    response_type: str,
    top_k_entities: int,
    max_context_tokens: int,
    community_prop: float,
    text_unit_prop: float,
    conversation: list[dict] | None = None,
) -> SearchResult:
    # What chooses the context, and offline the sentences quoted: a follow-up ("and who read them?") alone
    # shares no words with the passages its conversation is about.
    asked = with_recent_turns(question, conversation)
    context = await local_context_for(
        embedder,
        index,
        asked,
        community_level,
        top_k_entities,
        max_context_tokens,
        community_prop,
        text_unit_prop,
    )
    if chat is None:
        answer = extractive_local_answer(index, asked, context)
    else:
        answer = await chat.complete(
            user_message(
                "local_search",
                context_data=context.text,
                question=question,
                response_type=response_type,
                conversation=conversation_block(conversation),
            )
        )
        answer = answer or "The model call failed after retries; the context it would have read is recorded."
    return SearchResult(answer, chat is None, context.tokens, context.ids)


async def basic_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    *,
    question: str,
    response_type: str,
    top_k: int,
    max_context_tokens: int,
    conversation: list[dict] | None = None,
) -> SearchResult:
    """The paper's SS baseline: vector search over text units, packed into the budget."""
    asked = with_recent_turns(question, conversation)
    query = await embed_query(embedder, index, asked)
    units = index.text_units.set_index("id")["text"]
    number = {u: i for i, u in enumerate(index.text_units["id"])}
    hits = index.nearest("text_unit", query, top_k)
    text, packed, tokens = pack(
        [(u, csv_line(number[u], units[u])) for u, _ in hits], "-----Sources-----\nid|text", max_context_tokens
    )
    context = {"text_units": packed, "scores": {u: round(s, 4) for u, s in hits if u in packed}}
    if chat is None:
        answer = cited_sentences(index, asked, "text_units", packed, units.to_dict())
    else:
        answer = await chat.complete(
            user_message(
                "basic_search",
                context_data=text,
                question=question,
                response_type=response_type,
                conversation=conversation_block(conversation),
            )
        )
        answer = answer or "The model call failed after retries; the context it would have read is recorded."
    return SearchResult(answer, chat is None, tokens, context)
