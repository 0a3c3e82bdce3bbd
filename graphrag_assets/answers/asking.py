"""One question answered from a corpus's loaded index: checked, answered, and described with its sources, usage
and time. Every caller asks through here: the query assets, the CLI, the HTTP app and the MCP tools."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import dagster as dg

from ..configs.queries import Turn
from ..method.search.context import Index, SearchResult
from ..models.errors import EndpointError
from ..models.interrupts import run_interruptibly
from ..models.prices import total_cost
from .options import CONVERSATIONAL, METHODS
from .sources import excerpt, source_list

if TYPE_CHECKING:  # the model client imports openai: an offline answer does without it
    from ..models import ModelSettings, Usage

MAX_QUESTION_CHARS = 4000  # a question, not a document: longer is refused before any work


class QuestionRefused(ValueError):
    """The question cannot be asked as it is (an empty question, a level or method the index lacks): the asker can
    fix it, and no model was called."""


class AnswerFailed(RuntimeError):
    """The model calls of the answer failed: there is no answer, and none is recorded."""

    def __init__(self, message: str, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


def check_level(level: int | None) -> None:
    """The one check of a community level as asked, the same for the CLI, the API, MCP and the OpenAI shape; whether
    the corpus has that level is `check`'s, once its index is loaded."""
    if level is not None and level < 0:
        raise QuestionRefused(f"community level {level} does not exist: levels count from 0 (the root) down")


def options_for(
    method: str,
    question: str,
    level: int | None = None,
    dynamic: bool = False,
    conversation: list[dict] | None = None,
    **settings: object,
) -> dg.Config:
    """A method's launch options from a question and what the asker chose; the rest are the config's defaults."""
    if method not in METHODS:
        raise QuestionRefused(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    spec = METHODS[method]
    fields: dict = {"previous_questions": [question]} if method == "question_generation" else {"question": question}
    if level is not None and spec.leveled:
        fields["community_level"] = level
    if dynamic:
        if method != "global":
            raise QuestionRefused("dynamic community selection is a setting of global search only")
        fields["dynamic_community_selection"] = True
    if conversation and method in CONVERSATIONAL:
        fields["conversation"] = conversation
    try:
        return spec.options(**fields, **settings)
    except ValueError as problem:  # pydantic's: a setting out of range
        raise QuestionRefused(_first_error(problem)) from None


def _first_error(problem: ValueError) -> str:
    errors = getattr(problem, "errors", lambda: [])()
    if not errors:
        return str(problem).splitlines()[0]
    first = errors[0]
    return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"


def check(
    method: str, options: dg.Config, index: Index, embeddings_configured: bool, chat_configured: bool = True
) -> None:
    """Refuse what cannot be answered, before any model call."""
    question = getattr(options, "question", None)
    questions = getattr(options, "previous_questions", None)
    if question is not None and not question.strip() or questions is not None and not any(q.strip() for q in questions):
        raise QuestionRefused("the question is empty: ask something, for example 'Who is Scrooge?'")
    if len(question or "") > MAX_QUESTION_CHARS:
        raise QuestionRefused(f"the question is {len(question)} characters long: at most {MAX_QUESTION_CHARS}")
    roles = {turn.role for turn in getattr(options, "conversation", None) or []} - {"user", "assistant"}
    if roles:
        raise QuestionRefused(f"conversation turns have roles {sorted(roles)}: use 'user' or 'assistant'")
    level = getattr(options, "community_level", None)
    if level is not None and level not in index.levels:
        raise QuestionRefused(
            f"community level {level} does not exist: this corpus has levels {index.levels[0]}..{index.levels[-1]}"
        )
    if METHODS[method].reads_reports and index.reports.is_empty():
        able = ", ".join(
            m
            for m in CONVERSATIONAL
            if not METHODS[m].reads_reports and (chat_configured or not METHODS[m].needs_model)
        )
        raise QuestionRefused(
            f"{method} search reads community reports, and this corpus has none (a lazy index writes none): ask with "
            f"one of {able}, or re-index it with --set entity_graph.method=fast (or standard)"
        )
    if METHODS[method].needs_model and not chat_configured:
        raise QuestionRefused(
            f"{method} search has a model summarise the source text itself, and no model is set, so it would only "
            "quote random passages: ask with basic (the passages nearest the question), local or global, or set "
            "GRAPHRAG_API_BASE to use a model"
        )
    check_embeddings(index, embeddings_configured)


def check_embeddings(index: Index, embeddings_configured: bool) -> None:
    """A question is embedded as the index was: by the offline model, or by an embedding model."""
    if embeddings_configured == (index.local_embedder is not None):
        indexed_with = "the offline embedding" if index.local_embedder is not None else "an embedding model"
        now = "set (GRAPHRAG_API_BASE)" if embeddings_configured else "not set"
        raise QuestionRefused(
            f"the corpus was embedded with {indexed_with}, but an embedding model is {now} now: index the corpus "
            "again with the model you ask with (graphrag-assets index --corpus <name>)"
        )


@dataclass(frozen=True, kw_only=True)
class Question:
    """A question as an application asks it: of which corpus, by which method, at which level; `follow_up` (an
    answer id) continues a recorded conversation, `max_cost_usd` caps this answer, and `settings` are more of the
    method's launch-time options by name."""

    corpus: str | None
    text: str
    method: str | None = "global"
    level: int | None = None
    dynamic: bool = False
    conversation: list[dict] | None = None
    follow_up: str | None = None
    max_cost_usd: float | None = None
    settings: dict = field(default_factory=dict)


@dataclass
class Answer:
    """An answer with what it was built from, what it cost and how long it took."""

    corpus: str
    method: str
    question: str
    options: dg.Config
    result: SearchResult
    sources: list[dict]
    usage: dict
    cost_usd: float | None  # None: a model with no known price
    seconds: float
    index_version: str = ""
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))

    @property
    def text(self) -> str:
        return self.result.answer

    @property
    def level(self) -> int | None:
        return getattr(self.options, "community_level", None)

    @property
    def conversation(self) -> list[dict]:
        return [
            turn.model_dump() if isinstance(turn, Turn) else turn for turn in getattr(self.options, "conversation", [])
        ]

    def row(self, asked_by: str, run_id: str | None = None) -> dict:
        """The answer as a row of query_answers."""
        return {
            "id": self.id,
            "question": self.question,
            "method": self.method,
            "community_level": self.level,
            "config": self.options.model_dump_json(),
            "conversation": json.dumps(self.conversation),
            "answer": self.text,
            "extractive": self.result.extractive,
            "context": self.result.context_json(),
            "context_tokens": self.result.context_tokens,
            "details": json.dumps(self.result.details, default=str),
            "model_calls": self.usage["model_calls"],
            "cache_hits": self.usage["cache_hits"],
            "prompt_tokens": self.usage["prompt_tokens"],
            "completion_tokens": self.usage["completion_tokens"],
            "embedding_tokens": self.usage["embedding_tokens"],
            "latency_seconds": self.seconds,
            "run_id": run_id,
            "created_at": self.created_at,
            "cost_usd": self.cost_usd,
            "asked_by": asked_by,
            # A passage's text is in text_units: the record keeps its beginning (service.stored() gives it whole).
            "sources": json.dumps([excerpt(source) for source in self.sources], default=str),
            "index_version": self.index_version,
        }


def answer(
    corpus: str,
    index: Index,
    method: str,
    options: dg.Config,
    chat: ModelSettings | None,
    embeddings: ModelSettings | None,
    index_version: str = "",
) -> Answer:
    """Answer with the method, with fresh model clients (None: the offline engine) in an event loop of its own, so
    that questions asked in several threads at once share no state but the cache and the rate-limit ledger.

    Raises AnswerFailed when any model call of the answer failed after its retries: an answer written from part
    of its context, or from none, must not read as an answer."""
    spec = METHODS[method]
    question = getattr(options, "question", None) or "\n".join(getattr(options, "previous_questions", []))
    started = time.perf_counter()

    async def run() -> tuple[SearchResult, Usage | None, Usage | None]:
        if chat or embeddings:
            from ..models import ModelClient
        chat_client = ModelClient(chat) if chat else None
        embed_client = ModelClient(embeddings) if embeddings else None
        try:
            result = await spec.run(chat_client, embed_client, index, options)
            return result, chat_client and chat_client.usage, embed_client and embed_client.usage
        except RuntimeError as problem:  # embed_query's, when the question could not be embedded
            if embed_client is not None and embed_client.usage.failures:
                raise AnswerFailed(_failed(method, embed_client.usage)) from None
            raise problem
        finally:
            for client in (chat_client, embed_client):
                if client is not None:
                    await client.close()

    try:
        result, chat_usage, embed_usage = run_interruptibly(run())
    except EndpointError as error:
        raise AnswerFailed(f"{error}; no answer was recorded", retryable=error.retryable) from None
    for usage in (chat_usage, embed_usage):
        if usage is not None and usage.failures:
            raise AnswerFailed(_failed(method, usage))
    seconds = time.perf_counter() - started
    figures = {
        "model_calls": sum(u.calls for u in (chat_usage, embed_usage) if u),
        "cache_hits": sum(u.cache_hits for u in (chat_usage, embed_usage) if u),
        # chat and embedding tokens apart: their prices differ
        "prompt_tokens": chat_usage.prompt_tokens if chat_usage else 0,
        "completion_tokens": chat_usage.completion_tokens if chat_usage else 0,
        "embedding_tokens": embed_usage.prompt_tokens if embed_usage else 0,
    }
    cost = total_cost(
        usage.cost(settings) for usage, settings in ((chat_usage, chat), (embed_usage, embeddings)) if usage
    )
    return Answer(
        corpus=corpus,
        method=method,
        question=question,
        options=options,
        result=result,
        sources=source_list(index, result),
        usage=figures,
        cost_usd=None if cost is None else round(cost, 6),
        seconds=seconds,
        index_version=index_version,
    )


def _failed(method: str, usage: Usage) -> str:
    cause = usage.errors[0] if usage.errors else "no valid reply"
    return (
        f"{usage.failures} model call(s) of the {method.replace('_', ' ')} answer failed after retries, so there is "
        f"no answer (none was recorded): {cause}"
    )


def model_reply(
    chat: ModelSettings, messages: list[dict], parse: Callable[[str], str]
) -> tuple[str | None, dict[str, int]]:
    """One checked chat completion outside any question, and its tokens; None when no valid reply came after the
    client's re-asks, or the endpoint failed (the caller has an answer of its own to fall back on)."""

    async def run() -> tuple[str | None, Usage]:
        from ..models import ModelClient

        client = ModelClient(chat)
        try:
            return await client.complete(messages, parse=parse), client.usage
        finally:
            await client.close()

    try:
        reply, usage = run_interruptibly(run())
    except EndpointError:
        return None, {"prompt_tokens": 0, "completion_tokens": 0}
    return reply, {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
