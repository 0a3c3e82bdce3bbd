"""Global search: map-reduce over the community reports of one level (or over text units: TS).

Map: records are shuffled with a seed and packed into windows; each window yields points with
a 0-100 helpfulness score. Reduce: points scored 0 are dropped, the rest sorted by score and
packed into one window from which the answer is written. Dynamic community selection rates
reports from the root down and keeps only the relevant branches.
"""

from __future__ import annotations

import asyncio
import random

import polars as pl

from ..graph.records import check_answer_text, parse_json_reply
from ..model_interface import ChatModel, Embedder, InvalidReply
from ..offline.answers import BROAD_WORDS, best_sentences, clean_sentence, extractive_answer, terms, terms_in_order
from ..prompts import load_prompt, user_message
from ..schema import records
from ..words import split_sentences
from .context import (
    NO_ANSWER,
    Index,
    SearchResult,
    conversation_block,
    csv_line,
    embed_query,
    nearest,
    pack,
    windows,
    with_recent_turns,
)
from .settings import GlobalSearchSettings, MapReduceSettings

MAP_HEADERS = {"reports": "id|title|rank|content", "text_units": "id|text"}


def report_records(
    index: Index, report_ids: list[str] | None = None, level: int | None = None
) -> list[tuple[str, str]]:
    reports = index.reports.filter(pl.col("status") == "ok")
    if report_ids is not None:
        reports = reports.filter(pl.col("id").is_in(report_ids))
    if level is not None:
        reports = reports.filter(pl.col("level") == level)
    return [
        (r.id, csv_line(r.cited_as, r.title, r.rank, r.full_content))
        for r in records(reports.sort("community", maintain_order=True))
    ]


def unit_records(index: Index) -> list[tuple[str, str]]:
    return [
        (unit, csv_line(number, text))
        for number, (unit, text) in enumerate(index.text_units.select("id", "text").iter_rows())
    ]


def parse_points(reply: str) -> list[dict]:
    """The map step's points, each a description with a 0-100 score; InvalidReply for anything else."""
    data, _ = parse_json_reply(reply)
    points = data.get("points") if isinstance(data, dict) else data
    if not isinstance(points, list):
        raise InvalidReply("the map reply has no list of points")
    parsed = []
    for point in points:
        try:
            score = int(float(point["score"]))
            description = point["description"]
        except (TypeError, KeyError, ValueError):
            raise InvalidReply(f"a point is not a description with a score: {str(point)[:80]}") from None
        if not isinstance(description, str):
            raise InvalidReply("a point's description is not text")
        parsed.append({"description": description, "score": max(0, min(100, score))})
    return parsed


def parse_rating(reply: str) -> int:
    """Dynamic selection's 0-5 relevance rating."""
    data, _ = parse_json_reply(reply)
    try:
        return max(0, min(5, int(float(data["rating"]))))
    except (TypeError, KeyError, ValueError):
        raise InvalidReply("the reply has no numeric rating") from None


def reduce_points(points: list[dict], budget: int) -> tuple[str, list[dict], int]:
    """Drop points scored 0, sort by score (stable), pack "analyst" sections into the reduce window."""
    kept = sorted((p for p in points if p["score"] > 0), key=lambda p: -p["score"])
    records = [
        (str(i), f"----Analyst {i + 1}----\nImportance Score: {p['score']}\n{p['description']}")
        for i, p in enumerate(kept)
    ]
    text, ids, tokens = pack(records, "", budget)
    return text.strip(), [kept[int(i)] for i in ids], tokens


async def map_reduce(
    chat: ChatModel | None,
    embedder,
    index: Index,
    question: str,
    records: list[tuple[str, str]],
    kind: str,
    settings: MapReduceSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    shuffled = list(records)
    random.Random(settings.seed).shuffle(shuffled)
    packed = windows(shuffled, MAP_HEADERS[kind], settings.map_window_tokens)
    map_tokens = sum(tokens for _, _, tokens in packed)
    if chat is None:
        points = await _extractive_map(embedder, index, with_recent_turns(question, conversation), packed, kind)
        map_failed = 0
    else:
        points, map_failed = await _model_map(chat, packed, question, conversation)
    report_data, used_points, reduce_tokens = reduce_points(points, settings.reduce_window_tokens)
    context = {
        kind: sorted({i for _, ids, _ in packed for i in ids}),
        "points": [
            {"score": p["score"], "description": p["description"][:300], "source_ids": p["source_ids"]}
            for p in used_points
        ],
    }
    details = {
        "map_windows": len(packed),
        "map_windows_failed": map_failed,
        "points": len(points),
        "points_scored_0": sum(p["score"] == 0 for p in points),
        "points_in_reduce": len(used_points),
        "map_context_tokens": map_tokens,
        "reduce_context_tokens": reduce_tokens,
    }
    if not used_points:
        return SearchResult(NO_ANSWER, chat is None, map_tokens, context, details)
    answer = await _reduce(chat, index, kind, used_points, report_data, question, settings.response_type, conversation)
    return SearchResult(answer, chat is None, map_tokens + reduce_tokens, context, details)


async def _model_map(
    chat: ChatModel, packed: list, question: str, conversation: list[dict] | None
) -> tuple[list[dict], int]:
    """Each window's scored points, with the ids the window held; and how many windows got no valid reply."""
    replies = await asyncio.gather(
        *(
            chat.complete(
                user_message(
                    "global_search_map",
                    context_data=text,
                    question=question,
                    conversation=conversation_block(conversation),
                ),
                parse=parse_points,
                response_format={"type": "json_object"},
            )
            for text, _, _ in packed
        )
    )
    points = [{**point, "source_ids": ids} for (_, ids, _), window in zip(packed, replies) for point in window or []]
    return points, sum(reply is None for reply in replies)


async def _reduce(
    chat: ChatModel | None,
    index: Index,
    kind: str,
    points: list[dict],
    report_data: str,
    question: str,
    response_type: str,
    conversation: list[dict] | None,
) -> str:
    """The answer from the points in the reduce window: the model's, or offline the best points quoted."""
    if chat is None:
        return extractive_answer(
            [(p["score"], p["description"], index.cite(kind, p["source_ids"][:5])) for p in points[:8]],
            "Reports" if kind == "reports" else "Sources",
        )
    answer = await chat.complete(
        user_message(
            "global_search_reduce",
            report_data=report_data,
            question=question,
            response_type=response_type,
            conversation=conversation_block(conversation),
        ),
        parse=check_answer_text,
    )
    return answer or "The reduce step failed after retries; the scored points are in the context."


def mentioned_entities(index: Index, question: str) -> set[str]:
    """Ids of the entities the question names (whole words, any case)."""
    lowered = f" {' '.join(terms_in_order(question))} "
    return {
        row.id
        for row in records(index.entities)
        if len(row.title) >= 3 and f" {' '.join(terms_in_order(row.title))} " in lowered
    }


def offline_relevance(
    index: Index, question: str, similarity: dict[str, float], named: set[str] | None = None
) -> dict[str, float]:
    """Offline, how much each report bears on the question (0-1), by its intent as well as its words.

    A question that names entities is about the communities holding them; a broad one (themes, the main
    characters, a summary: no entity named, or words like "main" and "themes") is about the central
    communities, those with the highest rank. Similarity to the question's embedding counts in both.
    `named`: the question's entities, when the caller has found them already.
    """
    reports = index.reports.filter(pl.col("status") == "ok")
    members = {c.community: set(c.entity_ids) for c in records(index.communities)}
    named = mentioned_entities(index, question) if named is None else named
    broad = not named or bool(terms(question) & BROAD_WORDS)
    top_rank = max(float(reports["rank"].max() or 0.0), 1e-9) if len(reports) else 1.0
    relevance = {}
    for report in records(reports):
        score = 0.4 * max(0.0, similarity.get(report.id, 0.0))
        if named:
            score += 0.6 * len(members.get(report.community, set()) & named) / len(named)
        if broad:
            score += 0.6 * float(report.rank) / top_rank
        relevance[report.id] = min(1.0, score)
    return relevance


async def _extractive_map(embedder, index: Index, question: str, packed, kind: str) -> list[dict]:
    """Offline map. Reports are scored by `offline_relevance`, and each gives its title with the sentences that
    name what the question names (or, for a broad question, its summary); text units score their similarity."""
    query = await embed_query(embedder, index, question)
    ids, matrix = index.vectors("community_report" if kind == "reports" else "text_unit")
    similarity = dict(nearest(query, ids, matrix, len(ids)))
    if kind != "reports":
        texts = index.texts(i for _, window_ids, _ in packed for i in window_ids)
        points = []
        for record_id in (i for _, window_ids, _ in packed for i in window_ids):
            sentences = best_sentences(question, [(record_id, texts.get(record_id, ""))], limit=1)
            score = int(round(100 * max(0.0, similarity.get(record_id, 0.0)))) if sentences else 0
            points.append(
                {"description": sentences[0][1] if sentences else "", "score": score, "source_ids": [record_id]}
            )
        return points
    named_ids = mentioned_entities(index, question)
    relevance = offline_relevance(index, question, similarity, named_ids)
    reports = index.rows("reports")
    texts = index.report_text()
    named = [entity.title for entity in index.rows_of("entities", sorted(named_ids))]
    wanted = " ".join([question, *named])
    points = []
    for record_id in (i for _, window_ids, _ in packed for i in window_ids):
        report = reports[record_id]
        sentences = [s for _, s, _ in best_sentences(wanted, [(record_id, texts.get(record_id, ""))], limit=2)]
        if not named or not sentences:
            sentences = [clean_sentence(s) for s in split_sentences(report.summary)[:2]]
        points.append(
            {
                "description": f"**{report.title}**: {' '.join(sentences)}",
                "score": int(round(100 * relevance.get(record_id, 0.0))),
                "source_ids": [record_id],
            }
        )
    return points


async def select_communities(
    chat: ChatModel | None, embedder, index: Index, question: str, max_level: int, threshold: int = 1
) -> tuple[list[str], list[int]]:
    """Dynamic community selection: rate the root reports, descend into the relevant ones' children.

    `max_level` is the deepest level it descends to (the query's community level). A relevant child
    replaces its parent; carried-down copies repeat their parent's report and are never rated.
    Returns (selected report ids, the communities rated).
    """
    reports = {r.community: r for r in records(index.reports.filter(pl.col("status") == "ok"))}
    communities = {c.community: c for c in records(index.communities)}
    query = None if chat else await embed_query(embedder, index, question)
    ids, matrix = index.vectors("community_report")
    similarity = dict(nearest(query, ids, matrix, len(ids))) if query is not None else {}
    relevance = offline_relevance(index, question, similarity) if chat is None else {}
    prompt = load_prompt("rate_community")

    async def rate(number: int) -> int:
        if chat is None:
            return int(5 * relevance.get(reports[number].id, 0.0))
        rating = await chat.complete(
            [{"role": "user", "content": prompt.format(report=reports[number].full_content, question=question)}],
            parse=parse_rating,
            response_format={"type": "json_object"},
        )
        return rating or 0

    frontier = [c for c in reports if communities[c].level == 0]
    selected: set[int] = set()
    rated: list[int] = []
    while frontier:
        ratings = await asyncio.gather(*(rate(c) for c in frontier))
        rated += frontier
        relevant = [c for c, r in zip(frontier, ratings) if r >= threshold]
        selected.update(relevant)
        selected.difference_update(communities[c].parent for c in relevant)
        frontier = [
            child
            for c in relevant
            for child in communities[c].children
            if child in reports and communities[child].carried_from != c and communities[child].level <= max_level
        ]
    return [reports[c].id for c in sorted(selected)], list(rated)


async def global_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    question: str,
    settings: GlobalSearchSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    level, dynamic = settings.community_level, settings.dynamic_community_selection
    if dynamic:
        selected, rated = await select_communities(chat, embedder, index, question, level, settings.dynamic_threshold)
        records = report_records(index, report_ids=selected)
    else:
        records = report_records(index, level=level)
    result = await map_reduce(chat, embedder, index, question, records, "reports", settings, conversation)
    if dynamic:
        level_size = index.reports.filter(pl.col("level") == level).height
        result.details.update(
            {
                "reports_rated": len(rated),
                "rated_communities": rated,
                "reports_selected": len(records),
                f"reports_at_level_{level}": level_size,
            }
        )
    return result


async def text_summary_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    question: str,
    settings: MapReduceSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    """The paper's TS baseline: the same map-reduce over shuffled source text units."""
    return await map_reduce(chat, embedder, index, question, unit_records(index), "text_units", settings, conversation)
