"""The OpenAI chat API over the answering path, for chat front-ends and the openai client.

A model is a corpus and a method, `<corpus>:<method>` (`a-christmas-carol:local`), optionally with a community level
(`a-christmas-carol:global:1`); a bare corpus name asks with global search (local where the index has no reports).
The last user message is the question and the earlier user and assistant messages are its conversation. The
answer's sources are listed at the end of its text, and travel in two fields beyond OpenAI's: `sources`, in the
shape Open WebUI renders as citation chips (its own field of that name), and `graphrag`, ours in full with the
answer's id, for programs. The official client ignores both.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ..answers.asking import Answer, Question
from ..answers.service import AnswerService, StoreBusy, UnknownCorpus
from ..answers.sources import where
from .errors import ApiError
from .front_end_tasks import FrontEndTask, front_end_task, reply_to


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict] | None = None

    @property
    def text(self) -> str:
        """The text of the message: a string, or the text parts of a list of parts."""
        if isinstance(self.content, list):
            return "\n".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    # Front-ends send sampling settings (temperature, top_p, ...): accepted, and left to the index's own settings.
    model_config = ConfigDict(extra="allow")
    model: str = Field(max_length=100)
    messages: list[Message] = Field(min_length=1, max_length=200)
    stream: bool = False
    stream_options: dict | None = None


def sources_text(found: Answer) -> str:
    """The sources as the end of a chat message: one line each, as the answer cites them."""
    labels = {"report": "Reports", "text_unit": "Sources", "entity": "Entities", "relationship": "Relationships"}
    lines = []
    for source in found.sources:
        if source["kind"] in ("entity", "relationship"):
            continue  # the answer cites reports and text units; the rest is in the sources field
        place = where(source) if source["kind"] == "text_unit" else source["title"]
        lines.append(f"- [{labels[source['kind']]} ({source['number']})] {place}")
    return "\n\n**Sources**\n\n" + "\n".join(lines) if lines else ""


def citations(found: Answer) -> list[dict]:
    """The passages and reports the answer cites, as Open WebUI reads a reply's `sources`: each a `source`, its
    `document` texts and one `metadata` per text. The page groups the passages of one document under one chip
    (`metadata.source`) and shows `metadata.page` counted from 0."""
    shown = []
    for source in found.sources:
        if source["kind"] == "report":
            name = f"Report {source['number']}: {source['title']}"
            metadata = {"source": f"report {source['id']}", "name": name}
        elif source["kind"] == "text_unit":
            name = source["document"] or source["document_id"]
            metadata = {"source": source["document_id"], "name": name, "passage": source["number"]}
            if source.get("pages"):
                metadata["page"] = source["pages"][0] - 1
            if source.get("location") and not source.get("pages"):
                metadata["location"] = source["location"]
        else:
            continue  # entities and relationships are not passages to open; the graphrag field has them
        shown.append(
            {"source": {"id": metadata["source"], "name": name}, "document": [source["text"]], "metadata": [metadata]}
        )
    return shown


def _pieces(text: str) -> Iterator[str]:
    """The reply in pieces of a few words, as a model's stream would arrive."""
    words = re.findall(r"\S+\s*|\s+", text)
    for start in range(0, len(words), 8):
        yield "".join(words[start : start + 8])


def routes(
    service: AnswerService,
    asking: Callable[[Request], object],
    ask_now: Callable[..., Answer],
    methods: tuple[str, ...],
    question_budget: float | None = None,
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["openai-compatible"])

    @router.get("/models")
    def models(request: Request) -> dict:
        """One model per corpus and method the corpus's index can answer."""
        caller = request.scope.get("state", {}).get("caller")
        listed = []
        for publication in service.corpora():
            if caller is not None and not caller.may_read(publication.corpus):
                continue
            created = int(publication.published_at.timestamp())
            listed += [
                {"id": f"{publication.corpus}:{method}", "object": "model", "created": created, "owned_by": "graphrag"}
                for method in publication.methods
                if method in methods
            ]
        return {"object": "list", "data": listed}

    @router.post("/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request):
        """Answer the last user message, the earlier messages being its conversation; a front-end's housekeeping
        (a title, tags, follow-up suggestions) is done without retrieval, and neither recorded nor counted as a
        question."""
        corpus, method, level = _model(body.model, service, methods)
        turns = [m for m in body.messages if m.role in ("user", "assistant")]
        if not turns or turns[-1].role != "user" or not turns[-1].text.strip():
            raise ApiError(422, "messages: the last message must be the user's question", "invalid_request_error")
        task = front_end_task(turns[-1].text)
        if task is not None:
            reply = await run_in_threadpool(housekeeping, request, task, corpus)
        else:
            caller = asking(request)
            conversation = [{"role": m.role, "content": m.text} for m in turns[:-1]]
            question = Question(
                corpus=corpus,
                text=turns[-1].text,
                method=method,
                level=level,
                conversation=conversation,
                max_cost_usd=question_budget,
            )
            reply = answer_reply(await run_in_threadpool(ask_now, caller, question))
        if not body.stream:
            return completion(body, reply)
        headers = {"Cache-Control": "no-cache"}
        return StreamingResponse(completion_chunks(body, reply), media_type="text/event-stream", headers=headers)

    def housekeeping(request: Request, task: FrontEndTask, corpus: str) -> Reply:
        caller = request.scope.get("state", {}).get("caller")
        if caller is not None and not caller.may_read(corpus) or corpus not in {p.corpus for p in service.corpora()}:
            raise ApiError(404, str(UnknownCorpus(corpus)), "not_found_error")
        try:
            content, spent = reply_to(task, corpus, service)
        except StoreBusy as problem:
            raise ApiError(503, str(problem), "store_busy", {"Retry-After": "2"}) from None
        return Reply(content, f"chatcmpl-{uuid.uuid4().hex}", _usage(spent), {"graphrag": {"front_end_task": task.key}})

    return router


@dataclass(frozen=True)
class Reply:
    content: str
    id: str
    usage: dict[str, int]
    extra: dict  # the fields beyond OpenAI's, on the completion (the last chunk of a stream)
    events: tuple[dict, ...] = ()  # Open WebUI's events, one on each chunk of a stream from the first


def _usage(spent: dict[str, int]) -> dict[str, int]:
    prompt, completion_tokens = spent["prompt_tokens"], spent["completion_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}


def answer_reply(found: Answer) -> Reply:
    """The answer with its sources last, its citations for front-ends and ours in full. Open WebUI keeps a stream's
    `source` events with the message (they survive a reload); it reads the `sources` field of a whole reply."""
    shown = citations(found)
    return Reply(
        found.text + sources_text(found),
        f"chatcmpl-{found.id}",
        _usage(found.usage),
        {"sources": shown, "graphrag": {"answer_id": found.id, "sources": found.sources}},
        tuple({"type": "source", "data": citation} for citation in shown),
    )


def completion(body: ChatRequest, reply: Reply) -> dict:
    """The reply as a chat completion."""
    return {
        "id": reply.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content}, "finish_reason": "stop"}],
        "usage": reply.usage,
        **reply.extra,
    }


def completion_chunks(body: ChatRequest, reply: Reply) -> Iterator[str]:
    """The reply as the server-sent events of a streamed chat completion. Each event rides on a chunk of its own
    that has content too, so that no client meets a chunk without a choice before the end."""
    created = int(time.time())

    def chunk(choices: list, **more) -> str:
        payload = {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": body.model,
            "choices": choices,
            **more,
        }
        return f"data: {json.dumps(payload)}\n\n"

    def delta(part: dict, finish: str | None = None, **more) -> str:
        return chunk([{"index": 0, "delta": part, "finish_reason": finish}], **more)

    yield delta({"role": "assistant", "content": ""})
    pieces = list(_pieces(reply.content))
    pieces += [""] * (len(reply.events) - len(pieces))
    for number, piece in enumerate(pieces):
        yield delta({"content": piece}, **({"event": reply.events[number]} if number < len(reply.events) else {}))
    yield delta({}, "stop", **reply.extra)
    if (body.stream_options or {}).get("include_usage"):
        yield chunk([], usage=reply.usage)
    yield "data: [DONE]\n\n"


def _model(model: str, service: AnswerService, methods: tuple[str, ...]) -> tuple[str, str, int | None]:
    """(corpus, method, level) of a model name."""
    corpus, _, rest = model.partition(":")
    method, _, level = rest.partition(":")
    if method and method not in methods:
        raise ApiError(
            404, f"model {model!r}: {method!r} is not a method; use <corpus>:<{'|'.join(methods)}>", "not_found_error"
        )
    if level and not level.isdigit():
        raise ApiError(
            404, f"model {model!r}: the level after the method is a number (0 is the root)", "not_found_error"
        )
    if not method:
        found = next((p for p in service.corpora() if p.corpus == corpus), None)
        method = "global" if found is None or "global" in found.methods else "local"
    return corpus, method, int(level) if level else None
