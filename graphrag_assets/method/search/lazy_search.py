"""LazyGraphRAG search: every model call waits for the question, and a budget of relevance tests bounds them.

1. Refine: the model splits the question into a few sub-questions, each expanded with the graph's concepts it names.
2. Rank: text units by similarity to the sub-questions fused with their keyword (BM25) rank; communities by the
   rank of their best text unit.
3. Walk the community hierarchy best-first, from the top: at each community, test its best untested text units for
   relevance (the model reads a short snippet of each: one test per unit); after `patience` communities in a row
   yield nothing, go one level deeper, into the sub-communities of the relevant ones. Stop when `relevance_budget`
   tests are spent, or nothing is left to test.
4. Answer: the model lists the claims each community's relevant units make about the question; claims are ranked
   and trimmed to the context window; an answer is written for each sub-question (map) and combined (reduce).

Offline, the walk runs the same with word overlap in place of the model's tests, and the answer quotes sentences.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from ..graph.records import check_answer_text, parse_json_reply
from ..model_interface import ChatModel, Embedder, InvalidReply
from ..offline.answers import CONTINUED_CHARACTERS, best_sentences, extractive_answer, overlap_score, terms_in_order
from ..prompts import user_message
from ..schema import records
from .context import (
    NO_ANSWER,
    Index,
    SearchResult,
    csv_line,
    embed_query,
    pack,
    reciprocal_rank_fusion,
    with_recent_turns,
)
from .passages import snippet
from .settings import LazySearchSettings

# Offline, a unit is relevant when it holds this share of a sub-question's content words, or when it is among the
# units that the sub-questions' words and vectors rank highest: an answer often shares few of the question's words
# ("what came from the crown of the first spirit's head?" is answered by a unit with two of five).
OFFLINE_RELEVANT_OVERLAP = 0.5
OFFLINE_TOP_RANKED = 3
MAX_CONCEPTS_PER_SUB_QUESTION = 5
MAX_CLAIMS_PER_COMMUNITY = 10
OUTSIDE_COMMUNITIES = -1  # the walk's name for the text units no community holds
_PARAMS = {"response_format": {"type": "json_object"}}


@dataclass
class Community:
    number: int
    level: int
    children: list[int]
    units: list[str]  # its text units, best ranked first
    rank: int  # the rank of its best unit: where the walk takes it in its level


@dataclass
class Walk:
    """What the walk spent and found."""

    tests: int = 0
    relevant: dict[str, int] = field(default_factory=dict)  # unit -> the community it was found relevant in
    visits: list[dict] = field(default_factory=list)  # community, level, tested, relevant, in visiting order

    def per_level(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for visit in self.visits:
            counts[visit["level"]] = counts.get(visit["level"], 0) + 1
        return counts


async def walk_communities(
    tree: dict[int, Community],
    top: list[int],
    test: Callable[[list[str]], Awaitable[set[str]]],
    budget: int,
    units_per_visit: int,
    patience: int,
) -> Walk:
    """The best-first walk down the hierarchy, from the communities `top`; `test` says which of the units it is
    given are relevant, and is never given more than the budget has left. A relevant community without
    sub-communities is visited again at the next step down, for its next untested units."""
    walk, tested = Walk(), set()

    def best_first(numbers: list[int]) -> list[int]:
        return sorted(numbers, key=lambda n: (tree[n].rank, n))

    frontier = best_first(top)
    relevant_here: list[int] = []
    empty_streak = 0
    while frontier and walk.tests < budget:
        community = tree[frontier.pop(0)]
        batch = [u for u in community.units if u not in tested][: min(units_per_visit, budget - walk.tests)]
        found: set[str] = set()
        if batch:
            found = await test(batch) & set(batch)
            walk.tests += len(batch)
            tested.update(batch)
            for unit in batch:
                if unit in found:
                    walk.relevant.setdefault(unit, community.number)
        # Relevant: a unit of it is, found now or at a community above it (a child shares its parent's units).
        relevant = bool(found) or any(u in walk.relevant for u in community.units)
        walk.visits.append(
            {"community": community.number, "level": community.level, "tested": len(batch), "relevant": relevant}
        )
        if relevant:
            relevant_here.append(community.number)
            empty_streak = 0
        else:
            empty_streak += 1
        # Deeper: the sub-communities of the relevant ones, and a relevant community with none, for its next units.
        deeper = [
            c
            for r in relevant_here
            for c in (tree[r].children or ([r] if any(u not in tested for u in tree[r].units) else []))
        ]
        if deeper and (empty_streak >= patience or not frontier):
            frontier = best_first(deeper)  # what is left of this level is not visited
            relevant_here, empty_streak = [], 0
    return walk


def rank_units(index: Index, queries: list[np.ndarray], texts: list[str], keyword_weight: float) -> list[str]:
    """Every text unit, best first: by its best similarity to any of the queries, fused by reciprocal rank with
    the units whose words best match any of them (BM25; keyword_weight 0: similarity alone)."""
    best: dict[str, float] = {}
    for query in queries:
        for unit, score in index.nearest("text_unit", query, len(index.text_units)):
            best[unit] = max(best.get(unit, -1.0), score)
    by_vectors = sorted(best, key=lambda u: (-best[u], u))
    if keyword_weight <= 0:
        return by_vectors
    matched: dict[str, float] = {}
    for text in texts:
        for unit, score in index.keyword_search("text_unit", text, KEYWORD_CANDIDATES):
            matched[unit] = max(matched.get(unit, 0.0), score)
    by_keywords = sorted(matched, key=lambda u: (-matched[u], u))
    fused = reciprocal_rank_fusion({"vector": by_vectors, "keyword": by_keywords}, {"keyword": keyword_weight})
    return [unit for unit, _ in fused]


KEYWORD_CANDIDATES = 50  # units each sub-question's keywords rank; past them, similarity alone orders the walk


def community_tree(index: Index, ranked_units: list[str]) -> tuple[dict[int, Community], list[int]]:
    """Each community with its text units in rank order, and the communities of the top level."""
    position = {unit: i for i, unit in enumerate(ranked_units)}
    units_of_entity = dict(zip(index.entities["id"].to_list(), index.entities["text_unit_ids"].to_list()))
    tree = {}
    for row in records(index.communities):
        units = sorted(
            {u for e in row.entity_ids for u in units_of_entity.get(e, ()) if u in position}, key=position.get
        )
        tree[int(row.community)] = Community(
            int(row.community),
            int(row.level),
            [int(c) for c in row.children],
            units,
            position[units[0]] if units else len(position),
        )
    top_level = min((c.level for c in tree.values()), default=0)
    # Text no community holds (a sparse concept graph leaves some units without a phrase in one) is still searched:
    # as one more community of the top level, taken in the order of its best unit.
    held = {u for c in tree.values() for u in c.units}
    outside = [u for u in ranked_units if u not in held]
    if outside:
        tree[OUTSIDE_COMMUNITIES] = Community(OUTSIDE_COMMUNITIES, top_level, [], outside, position[outside[0]])
    return tree, [n for n, c in tree.items() if c.level == top_level]


def parse_sub_questions(reply: str, limit: int) -> list[str]:
    data, _ = parse_json_reply(reply)
    questions = data.get("sub_questions") if isinstance(data, dict) else None
    if not isinstance(questions, list) or not questions:
        raise InvalidReply('the reply has no "sub_questions" list')
    if not all(isinstance(q, str) and q.strip() for q in questions):
        raise InvalidReply("a sub-question is not a non-empty string")
    if len(questions) > limit:
        raise InvalidReply(f"the reply has {len(questions)} sub-questions, more than the {limit} asked for")
    return [" ".join(q.split()) for q in questions]


def parse_relevant(reply: str, asked: set[int]) -> set[int]:
    data, _ = parse_json_reply(reply)
    ids = data.get("relevant") if isinstance(data, dict) else None
    if not isinstance(ids, list):
        raise InvalidReply('the reply has no "relevant" list')
    try:
        found = {int(i) for i in ids}
    except (TypeError, ValueError):
        raise InvalidReply(f"relevant ids {ids!r} are not all numbers") from None
    if not found <= asked:
        raise InvalidReply(f"passages {sorted(found - asked)} were not among those given")
    return found


def parse_claims(reply: str, sources: set[int]) -> list[dict]:
    data, _ = parse_json_reply(reply)
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list):
        raise InvalidReply('the reply has no "claims" list')
    parsed = []
    for claim in claims:
        if not isinstance(claim, dict) or not isinstance(claim.get("claim"), str) or not claim["claim"].strip():
            raise InvalidReply("a claim has no text")
        try:
            cited = [int(s) for s in claim.get("sources") or []]
            score = float(claim.get("score"))
        except (TypeError, ValueError):
            raise InvalidReply("a claim's sources or score are not numbers") from None
        if not cited or not set(cited) <= sources:
            raise InvalidReply(f"a claim cites passages {cited} outside those given")
        if not 0 <= score <= 100:
            raise InvalidReply(f"a claim's score {score:g} is outside 0-100")
        parsed.append({"claim": " ".join(claim["claim"].split()), "sources": cited, "score": score})
    return parsed[:MAX_CLAIMS_PER_COMMUNITY]


async def lazy_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    question: str,
    settings: LazySearchSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    s = settings
    number = index.citation_numbers("text_units")
    unit_text = index.texts()
    # A follow-up ("and what happens to him?") is split and ranked with the user's last turns, which name its subject.
    sub_questions = await _refine(chat, index, with_recent_turns(question, conversation), s.max_sub_questions)
    queries = [await embed_query(embedder, index, q) for q in sub_questions]
    ranked = rank_units(index, queries, sub_questions, s.keyword_weight)
    tree, top = community_tree(index, ranked)
    top_ranked = set(ranked[:OFFLINE_TOP_RANKED])

    async def test(units: list[str]) -> set[str]:
        if chat is None:
            return {
                u
                for u in units
                if u in top_ranked
                or max(overlap_score(q, unit_text[u]) for q in sub_questions) >= OFFLINE_RELEVANT_OVERLAP
            }
        by_number = {int(number[u]): u for u in units}
        passages = "\n".join(
            csv_line(n, snippet(unit_text[u], sub_questions, s.snippet_tokens)) for n, u in by_number.items()
        )
        found = await chat.complete(
            user_message("lazy_relevance", question=_questions_block(question, sub_questions), passages=passages),
            parse=lambda reply: parse_relevant(reply, set(by_number)),
            **_PARAMS,
        )
        return {by_number[n] for n in found or ()}

    walk = await walk_communities(tree, top, test, s.relevance_budget, s.units_per_visit, s.patience)
    relevant = sorted(walk.relevant, key=lambda u: number[u])
    details = {
        "sub_questions": sub_questions,
        "relevance_tests": walk.tests,
        "relevance_budget": s.relevance_budget,
        "communities_visited_per_level": walk.per_level(),
        "relevant_units": len(relevant),
        "visits": walk.visits[:50],
    }
    context = {"text_units": relevant, "communities": sorted({walk.relevant[u] for u in relevant})}
    if not relevant:
        return SearchResult(NO_ANSWER, chat is None, 0, context, {**details, "claims_kept": 0})
    if chat is None:
        asked, sourced = " ".join(sub_questions), [(u, unit_text[u]) for u in relevant]
        points = best_sentences(asked, sourced, limit=8, continued=CONTINUED_CHARACTERS)
        answer = extractive_answer([(s, text, index.cite("text_units", [u])) for s, text, u in points], "Sources")
        return SearchResult(answer, True, 0, context, {**details, "claims_kept": len(points)})
    claims = await _claims(chat, index, question, sub_questions, walk, unit_text, s.claim_passage_tokens)
    kept, table, tokens = _trim(claims, s.max_context_tokens)
    details.update({"claims_found": len(claims), "claims_kept": len(kept)})
    answer = await _answer(chat, question, sub_questions, table, s.response_type)
    return SearchResult(answer, False, tokens, context, details)


def _questions_block(question: str, sub_questions: list[str]) -> str:
    if sub_questions == [question]:
        return question
    return question + "\nIn particular:\n" + "\n".join(f"- {q}" for q in sub_questions)


def _by_degree(index: Index) -> list[str]:
    """The entities' titles, best-connected first."""
    return index.entities.sort("degree", descending=True, nulls_last=True, maintain_order=True)["title"].to_list()


async def _refine(chat: ChatModel | None, index: Index, question: str, limit: int) -> list[str]:
    """Sub-questions, each followed by the concepts of the graph it names (which sharpen its ranking of units)."""
    if chat is None or limit < 2:
        sub_questions = [question]
    else:
        concepts = ", ".join(_by_degree(index)[:40])
        sub_questions = await chat.complete(
            user_message("lazy_refine", question=question, concepts=concepts, limit=limit),
            parse=lambda reply: parse_sub_questions(reply, limit),
            **_PARAMS,
        ) or [question]
    # A concept is named when its words stand in the sub-question as words, in order ("Tiny Tim", not "Tim" in "time").
    titles = _by_degree(index)
    expanded = []
    for q in sub_questions:
        words = f" {' '.join(terms_in_order(q))} "
        named = [t for t in titles if f" {' '.join(terms_in_order(t))} " in words][:MAX_CONCEPTS_PER_SUB_QUESTION]
        expanded.append(q + (f" ({', '.join(t.title() for t in named)})" if named else ""))
    return expanded


async def _claims(
    chat: ChatModel,
    index: Index,
    question: str,
    sub_questions: list[str],
    walk: Walk,
    unit_text: dict,
    passage_tokens: int,
) -> list[dict]:
    """Claims from each community's relevant units (one request per community), each with the units it rests on;
    the model reads each unit's `passage_tokens` nearest the sub-questions, not all of it."""
    number = index.citation_numbers("text_units")
    groups: dict[int, list[str]] = {}
    for unit, community in walk.relevant.items():
        groups.setdefault(community, []).append(unit)

    async def claims_of(units: list[str]) -> list[dict]:
        numbers = {int(number[u]) for u in units}
        passages = "\n\n".join(
            f"[{int(number[u])}] {snippet(unit_text[u], sub_questions, passage_tokens)}" for u in units
        )
        found = await chat.complete(
            user_message("lazy_claims", question=_questions_block(question, sub_questions), passages=passages),
            parse=lambda reply: parse_claims(reply, numbers),
            **_PARAMS,
        )
        return found or []

    found = await asyncio.gather(*(claims_of(units) for units in groups.values()))
    return [claim for claims in found for claim in claims]


def _trim(claims: list[dict], budget: int) -> tuple[list[dict], str, int]:
    """The best-scored claims that fit the context window, as the table the answer prompt reads."""
    ranked = sorted(claims, key=lambda c: (-c["score"], c["sources"], c["claim"]))
    records = [(n, csv_line(n, c["claim"], ", ".join(map(str, c["sources"])))) for n, c in enumerate(ranked)]
    table, packed, used = pack(records, "id|claim|sources", budget)
    return ranked[: len(packed)], table, used


async def _answer(chat: ChatModel, question: str, sub_questions: list[str], claims: str, response_type: str) -> str:
    """One answer per sub-question from the claims (map), combined when there are several (reduce)."""
    failed = "The model call failed after retries; the claims it would have read are recorded."
    partial = await asyncio.gather(
        *(
            chat.complete(
                user_message("lazy_answer", question=q, claims=claims, response_type=response_type),
                parse=check_answer_text,
            )
            for q in sub_questions
        )
    )
    answers = [a for a in partial if a]
    if len(sub_questions) == 1 or not answers:
        return answers[0] if answers else failed
    sections = "\n\n".join(f"----Sub-question: {q}\n{a}" for q, a in zip(sub_questions, partial) if a)
    combined = await chat.complete(
        user_message("lazy_reduce", question=question, sub_answers=sections, response_type=response_type),
        parse=check_answer_text,
    )
    return combined or failed
