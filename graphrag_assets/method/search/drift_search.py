"""DRIFT search: a primer from the community reports that best match the question (vectors and keywords fused),
follow-ups answered locally, a reduce."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

from ..graph.records import parse_json_reply
from ..model_interface import ChatModel, Embedder, InvalidReply
from ..prompts import user_message
from ..schema import records
from .context import (
    EXTRACTIVE_LABEL,
    NO_ANSWER,
    Index,
    SearchResult,
    conversation_block,
    csv_line,
    embed_query,
    pack,
    with_recent_turns,
    written_answer,
)
from .local_search import LocalContext, extractive_local_answer, local_context_for, question_units
from .settings import DriftSearchSettings


def answer_parser(field: str):
    """A DRIFT reply: a JSON object whose `field` is the answer, with optional follow-up queries."""

    def parse(reply: str) -> dict:
        data, _ = parse_json_reply(reply)
        if not isinstance(data, dict) or not isinstance(data.get(field), str):
            raise InvalidReply(f"the reply is not a JSON object with a {field!r} text")
        return data

    return parse


def _follow_ups(data, limit: int) -> list[str]:
    queries = data.get("follow_up_queries") if isinstance(data, dict) else None
    return [q for q in queries if isinstance(q, str) and q.strip()][:limit] if isinstance(queries, list) else []


async def drift_search(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    question: str,
    settings: DriftSearchSettings,
    conversation: list[dict] | None = None,
) -> SearchResult:
    asked = with_recent_turns(question, conversation)
    query = await embed_query(embedder, index, asked)
    found = index.hybrid("community_report", query, asked, settings.primer_reports, settings.keyword_weight)
    reports = index.rows_of("reports", [i for i, _ in found])
    primer_text, primer_ids, primer_tokens = pack(
        [(r.id, csv_line(r.cited_as, r.title, r.full_content)) for r in reports],
        "id|title|content",
        settings.max_context_tokens,
    )
    context = {
        "reports": primer_ids,
        "entities": [],
        "relationships": [],
        "claims": [],
        "text_units": [],
        "follow_ups": [],
        "retrieved_by": {i: by for i, by in found if i in primer_ids},
        "passages": {},
    }
    primer, queue, headings = await _primer(
        chat, index, reports, primer_ids, primer_text, question, settings.follow_ups, conversation
    )
    intermediate: list[tuple[str, str]] = [("primer", primer)] if primer else []
    # Every follow-up serves the question: its context starts from the passages that best match the question, so a
    # fact said once is in front of each follow-up's answer, whatever the follow-up asks.
    units_first = question_units(index, query, asked, settings)

    def context_for(follow_up: str):
        return local_context_for(embedder, index, follow_up, settings, units_first)

    tokens = primer_tokens + await _follow_up_rounds(
        chat, context_for, index, question, queue, settings, context, intermediate
    )
    details = {
        "follow_ups_answered": sum(f["answered"] for f in context["follow_ups"]),
        "depth": settings.depth,
        "primer_reports": len(primer_ids),
    }
    if not intermediate:
        return SearchResult(NO_ANSWER, chat is None, tokens, context, details)
    if chat is None:
        body = extractive_sections([(headings.get(q, q), a) for q, a in intermediate])
        return SearchResult(f"{EXTRACTIVE_LABEL}\n\n{body}", True, tokens, context, details)
    reduce_text = "\n\n".join(f"----{q}----\n{a}" for q, a in intermediate)
    answer = await written_answer(chat, "drift_reduce", reduce_text, question, settings.response_type, conversation)
    return SearchResult(answer or reduce_text, False, tokens, context, details)


async def _follow_up_rounds(
    chat: ChatModel | None,
    context_for: Callable[[str], Awaitable[LocalContext]],
    index: Index,
    question: str,
    queue: list[str],
    settings: DriftSearchSettings,
    context: dict,
    intermediate: list[tuple[str, str]],
) -> int:
    """`settings.depth` rounds of follow-ups, each answered from its own local context (`context_for`); the
    context's ids and the intermediate answers grow in place. Returns the tokens of context read."""
    tokens = 0
    whole: set[str] = set()  # units some follow-up packed whole: no passage of theirs is all the context held

    async def answer(follow_up: str):
        local = await context_for(follow_up)
        return follow_up, local, await _answer_follow_up(chat, index, question, follow_up, local, settings.follow_ups)

    for step in range(settings.depth):
        results = await asyncio.gather(*(answer(q) for q in queue))
        queue = []
        for follow_up, local, data in results:
            tokens += local.tokens
            for kind, found in local.ids.items():
                context[kind] = sorted(set(context[kind]) | set(found))
            context["retrieved_by"] |= local.retrieved_by
            whole |= {u for u in local.ids["text_units"] if u not in local.passages}
            context["passages"] = {u: p for u, p in (context["passages"] | local.passages).items() if u not in whole}
            response = data.get("response") if isinstance(data, dict) else None
            context["follow_ups"].append({"query": follow_up, "depth": step + 1, "answered": bool(response)})
            if isinstance(response, str) and response.strip():
                intermediate.append((follow_up, response))
            if chat is not None:
                queue.extend(_follow_ups(data, settings.follow_ups))
        queue = queue[: settings.follow_ups]
    return tokens


async def _primer(
    chat: ChatModel | None,
    index: Index,
    reports: list[tuple],
    primer_ids: list[str],
    primer_text: str,
    question: str,
    follow_ups: int,
    conversation: list[dict] | None,
) -> tuple[str | None, list[str], dict[str, str]]:
    """The primer's answer from the nearest reports, the first follow-ups, and the headings an offline answer
    shows them under."""
    if chat is None:
        # Offline follow-ups are searches, not generated questions: the question plus each report's key entity,
        # shown under a heading of their own, since the search string is no question a person asked.
        headings = {
            f"{question} {t.title()}": f"More on {t.title()}" for t in _key_entities(index, reports[: len(primer_ids)])
        }
        headings["primer"] = "From the nearest community reports"
        queue = [q for q in headings if q != "primer"][:follow_ups]
        return " ".join(r.summary for r in reports[:2]), queue, headings
    data = await chat.complete(
        user_message(
            "drift_primer",
            context_data=primer_text,
            question=question,
            follow_up_count=follow_ups,
            conversation=conversation_block(conversation),
        ),
        parse=answer_parser("intermediate_answer"),
        response_format={"type": "json_object"},
    )
    return (data["intermediate_answer"] if data is not None else None), _follow_ups(data, follow_ups), {}


def _key_entities(index: Index, reports: list[tuple]) -> list[str]:
    """Each primer report's best-connected entity (the first of its community's members to have the highest
    degree), in the reports' order."""
    communities = {c.community: c for c in records(index.communities)}
    titles = []
    for report in reports:
        members = index.rows_of("entities", communities[report.community].entity_ids)
        if members:
            titles.append(max(members, key=lambda entity: entity.degree).title)
    return titles


async def _answer_follow_up(
    chat: ChatModel | None, index: Index, question: str, follow_up: str, local, follow_ups: int
) -> dict | None:
    """A follow-up answered from its local context: {"response", "follow_up_queries"?}, extractive offline."""
    if chat is None:
        return {"response": extractive_local_answer(index, follow_up, local), "score": 0}
    return await chat.complete(
        user_message(
            "drift_local",
            global_question=question,
            context_data=local.text,
            question=follow_up,
            follow_up_count=follow_ups,
        ),
        parse=answer_parser("response"),
        response_format={"type": "json_object"},
    )


def extractive_sections(sections: list[tuple[str, str]]) -> str:
    """Extractive answers under their headings, each quoted sentence once: follow-ups on neighbouring entities
    find the same passages, and the first section that quotes one keeps it. A section left empty is dropped."""
    seen: set[str] = set()
    parts = []
    for heading, answer in sections:
        kept = []
        for line in answer.replace(EXTRACTIVE_LABEL, "").strip().splitlines():
            sentence = re.sub(r"\s*\[Data:[^\]]*\]\s*$", "", line.removeprefix("- ")).strip()
            if sentence and any(sentence in earlier for earlier in seen):
                continue
            seen.add(sentence)
            kept.append(line)
        if any(line.strip() for line in kept):
            parts.append(f"**{heading}**\n" + "\n".join(kept))
    return "\n\n".join(parts)
