"""The MCP server: tools an agent or an IDE calls to ask the indexed corpora, over streamable HTTP at /mcp of
`graphrag-assets serve`, or over standard input and output with `graphrag-assets mcp` (a desktop client starts it).

Over HTTP a tool sees the caller's key (its scopes and rate); over stdio the caller is the local user.
"""

from __future__ import annotations

from typing import Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ..answers.asking import AnswerFailed, Question, QuestionRefused
from ..answers.service import AnswerService, StoreBusy, UnknownAnswer, UnknownCorpus
from .keys import LOCAL, Caller, RateLimits
from .shapes import stored_out

INSTRUCTIONS = (
    "Answers questions about indexed document collections (corpora) with GraphRAG. Call list_corpora first. For a "
    "question about a whole corpus (themes, trends, summaries) ask with method 'global'; about particular people, "
    "places or things, 'local'; for both, 'drift'; 'basic' is plain vector search over passages and 'lazy' works "
    "on any index. Answers cite their sources; answer_sources gives them whole."
)
_REFUSED = (QuestionRefused, UnknownCorpus, UnknownAnswer, AnswerFailed, StoreBusy)


def _caller(ctx: Context | None) -> Caller:
    request = getattr(ctx.request_context, "request", None) if ctx is not None else None
    return request.scope.get("state", {}).get("caller", LOCAL) if request is not None else LOCAL


def build_mcp(service: AnswerService, limits: RateLimits | None = None) -> MCPServer:
    mcp = MCPServer("graphrag-assets", instructions=INSTRUCTIONS)

    @mcp.tool()
    def list_corpora(ctx: Context) -> list[dict]:
        """The corpora that can be asked: for each, its name, the methods it answers with, its community levels
        (0 is the coarsest), when its index was published and how it was built."""
        caller = _caller(ctx)
        return [p.as_json() for p in service.corpora() if caller.may_read(p.corpus)]

    add_ask_tool(mcp, service, limits)
    add_reading_tools(mcp, service)
    return mcp


def add_ask_tool(mcp: MCPServer, service: AnswerService, limits: RateLimits | None) -> None:
    """ask: an answer, recorded, within the caller's rate."""

    @mcp.tool()
    async def ask(
        corpus: str,
        question: str,
        ctx: Context,
        method: Literal["global", "local", "drift", "basic", "lazy"] = "global",
        level: int | None = None,
        follow_up: str | None = None,
    ) -> dict:
        """Ask a question of a corpus. Returns the answer (markdown citing [Data: Reports (n)] or
        [Data: Sources (n)]), its sources, usage and answer_id.

        Args:
            corpus: a name from list_corpora.
            question: what to ask, in plain words.
            method: global for questions about the whole corpus, local for particular entities, drift for both,
                basic for vector search over passages, lazy for an index without community reports.
            level: community level for global, local and drift (0 is the coarsest); the default is 0.
            follow_up: the answer_id of an earlier answer, to continue its conversation.
        """
        caller = _caller(ctx)
        if limits is not None and (wait := limits.retry_after(caller)) is not None:
            raise ToolError(f"{caller.name} asked more than its questions a minute: ask again in {wait} s")
        try:
            found = await anyio.to_thread.run_sync(
                lambda: service.ask(
                    Question(corpus=corpus, text=question, method=method, level=level, follow_up=follow_up),
                    asked_by=caller.name,
                    allowed=caller.may_read,
                )
            )
        except _REFUSED as problem:
            raise ToolError(str(problem)) from None
        return {
            "answer_id": found.id,
            "answer": found.text,
            "method": found.method,
            "level": found.level,
            "sources": found.sources,
            "usage": {**found.usage, "cost_usd": found.cost_usd},
        }


def add_reading_tools(mcp: MCPServer, service: AnswerService) -> None:
    """A graph's entities, and a recorded answer's sources."""

    @mcp.tool()
    async def find_entities(corpus: str, text: str, ctx: Context, limit: int = 10) -> list[dict]:
        """The entities of a corpus's graph nearest to a text (a name, a phrase, a question), each with its type,
        description and strongest relationships.

        Args:
            corpus: a name from list_corpora.
            text: what to look for.
            limit: how many entities, at most 50.
        """
        caller = _caller(ctx)
        if not caller.may_read(corpus):
            raise ToolError(str(UnknownCorpus(corpus)))
        try:
            return await anyio.to_thread.run_sync(lambda: service.entities(corpus, text, max(1, min(limit, 50))))
        except _REFUSED as problem:
            raise ToolError(str(problem)) from None

    @mcp.tool()
    def answer_sources(answer_id: str, ctx: Context) -> dict:
        """A recorded answer with its question and its sources whole: reports, entities and the passages (with
        their document and page) it was written from.

        Args:
            answer_id: the answer_id that ask returned.
        """
        caller = _caller(ctx)
        try:
            corpus, row = service.stored(answer_id, caller.may_read)
        except _REFUSED as problem:
            raise ToolError(str(problem)) from None
        found = stored_out(corpus, row)
        return {
            "answer_id": found.answer_id,
            "corpus": corpus,
            "question": found.question,
            "answer": found.answer,
            "sources": found.sources,
        }


def run_stdio(instance=None) -> None:
    """An MCP server on standard input and output, answering from the store; answers are recorded when it ends
    and whenever the store is free meanwhile."""
    import functools
    import logging
    import sys

    from ..answers.service import endpoint_settings_from_environment, observe_in_dagster

    # Standard output is the protocol: anything said goes to standard error.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    chat, embeddings = endpoint_settings_from_environment()
    observe = functools.partial(observe_in_dagster, instance=instance) if instance is not None else None
    service = AnswerService(chat=chat, embeddings=embeddings, observe=observe)
    service.start()
    try:
        build_mcp(service).run("stdio")
    finally:
        service.stop()
