"""Which prompt a chat request is, and the reply the test server gives it (index_replies, query_replies); what a
fault puts in its place."""

from __future__ import annotations

import json
import re

from .index_replies import (
    _between,
    claims_reply,
    generic_report_reply,
    gleaning_reply,
    graph_reply,
    listed_types,
    names_in,
    report_batch_reply,
    report_reply,
    summary_reply,
    tagged,
)
from .query_replies import microsoft_query_reply, query_reply, structured_reply

CORRECTION_MARK = "Your previous reply could not be used"


# Replies that are prose by design: "prose instead of the format" is no fault for them.
PROSE_KINDS = frozenset({"summarize", "reduce", "answer", "drift_reduce", "questions", "corpus_description", "other"})


REFUSAL = "I'm sorry, I can't help with that."


def wrong_kind_reply(kind: str, text: str) -> str | None:
    """A well-formed reply to another prompt than the one asked, as a confused model gives."""
    if kind in ("claims", "claims_gleaning"):
        return graph_reply(text)
    if kind in ("extract", "gleaning"):
        return claims_reply(text) if names_in(text) else None
    if kind == "report":
        return json.dumps({"title": "A title", "summary": "A summary", "rating": 5.0, "rating_explanation": ""})
    return None


def front_end_task_reply(prompt: str) -> str:
    """What a model answers to Open WebUI's task prompts: the JSON object named under `### Output:`, a title made of
    the quoted chat's first words."""
    key = re.search(r'\{\s*"(\w+)"\s*:', prompt.split("### Output:", 1)[-1]).group(1)
    question = re.search(r"USER:\s*(.*)", prompt)
    words = re.findall(r"\w+", question.group(1) if question else "")
    value = {"title": " ".join(words[:3]).title(), "tags": ["Literature", "Victorian London"]}.get(key, [])
    return json.dumps({key: value})


def chat_reply(messages: list[dict], more_gleaning: bool = False, full_reports: bool = False) -> tuple[str, str]:
    """(kind, reply) for a conversation. `more_gleaning`: answer Y when asked whether entities were missed.
    `full_reports`: community reports as long as the prompt asks (see community_report)."""
    if len(messages) > 2 and CORRECTION_MARK in messages[-1]["content"]:
        kind, reply = chat_reply(messages[:-2], more_gleaning, full_reports)
        return f"{kind}_corrected", reply
    first, last = messages[0]["content"], messages[-1]["content"]
    if messages[0]["role"] == "system" and ("---Data tables---" in first or "---Analyst Reports---" in first):
        return microsoft_query_reply(first, last)
    if messages == [{"role": "user", "content": "ping"}]:
        return "probe", "pong"
    if len(messages) > 1 and "Y or N" in last:
        return "loop", "Y" if more_gleaning else "N"
    if first.lstrip().startswith("### Task:"):  # a chat front-end's housekeeping (server/front_end_tasks.py)
        return "front_end_task", front_end_task_reply(first)
    text = tagged(first, "text") if "<text>" in first else _between(first, "Text:", "Output:")
    if "Claims to look for:" in first:
        return ("claims_gleaning", "<|COMPLETE|>") if len(messages) > 1 else ("claims", claims_reply(text))
    if "Entity types:" in first or "Entity_types:" in first:  # ours, or another GraphRAG's
        if len(messages) > 1:
            return "gleaning", gleaning_reply(text, listed_types(first)[-1])
        return "extract", graph_reply(text, listed_types(first))
    evaluated = structured_reply(first)
    if evaluated:
        return evaluated
    if '<community id="' in first:
        return ("report_batch_repair" if len(messages) > 1 else "report_batch"), report_batch_reply(first, full_reports)
    if "<community>" in first:
        return ("report_repair" if len(messages) > 1 else "report"), report_reply(first, full_reports)
    if "# Real Data" in first and "report" in first:  # another GraphRAG's report prompt (the comparison benchmark)
        return "report", generic_report_reply(_between(first, "# Real Data", "Output:"))
    if "<descriptions>" in first or "Description List:" in first:
        return "summarize", summary_reply(first)
    if "<question>" in first or "<earlier_questions>" in first:
        return query_reply(first)
    return "other", "I have no answer for this prompt."
