"""What an answer looks like to a caller of the server (the JSON API, MCP): the same fields whether it was just
given or read back from the store."""

from __future__ import annotations

import json

from markdown_it import MarkdownIt
from pydantic import BaseModel, Field

from ..answers.asking import Answer

# Rendered for the page; raw HTML in an answer is shown as text, and links are checked by markdown-it.
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_USAGE = ("model_calls", "cache_hits", "prompt_tokens", "completion_tokens", "embedding_tokens")


class AnswerOut(BaseModel):
    answer_id: str
    corpus: str
    method: str
    level: int | None
    question: str
    answer: str = Field(description="Markdown, citing its sources as [Data: Reports (n)] or [Data: Sources (n)].")
    answer_html: str = Field(description="The answer rendered as HTML (raw HTML in it is escaped).")
    extractive: bool = Field(description="True when the offline engine quoted the index instead of a model writing.")
    sources: list[dict] = Field(
        description="Each source: kind, id, number (as the answer cites it), title, text; "
        "text units also document, document_id, pages, location; retrieved_by (vector, keyword) where hybrid "
        "retrieval chose it; passage, where the context held only that part of a text unit."
    )
    usage: dict = Field(
        description="model_calls, cache_hits, prompt_tokens, completion_tokens, embedding_tokens, cost_usd "
        "(null: the model has no known price)."
    )
    seconds: float
    conversation: list[dict] = Field(default_factory=list, description="The earlier turns it followed.")


def answer_out(found: Answer) -> AnswerOut:
    return stored_out(found.corpus, {**found.row(asked_by=""), "sources": found.sources})  # passages whole


def stored_out(corpus: str, row: dict) -> AnswerOut:
    """An answer from its query_answers row (JSON columns as text, or parsed)."""

    def parsed(value, default):
        return value if isinstance(value, list) else json.loads(value) if value else default

    level = row.get("community_level")
    return AnswerOut(
        answer_id=row["id"],
        corpus=corpus,
        method=row["method"],
        level=None if _missing(level) else int(level),
        question=row["question"],
        answer=row["answer"],
        answer_html=_MARKDOWN.render(row["answer"]),
        extractive=bool(row["extractive"]),
        sources=parsed(row.get("sources"), []),
        usage={name: 0 if _missing(row.get(name)) else int(row[name]) for name in _USAGE}
        | {"cost_usd": None if _missing(row.get("cost_usd")) else float(row["cost_usd"])},
        seconds=round(float(row.get("latency_seconds") or 0.0), 4),
        conversation=parsed(row.get("conversation"), []),
    )


def _missing(value) -> bool:
    return value is None or value != value  # NaN: a column the row has no value in
