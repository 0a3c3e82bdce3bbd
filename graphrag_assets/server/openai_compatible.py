"""The OpenAI chat API over the answering path, for chat front-ends and the openai client.

A model is a corpus and a method, `<corpus>:<method>` (`a-christmas-carol:local`), optionally with a community level
(`a-christmas-carol:global:1`); a bare corpus name asks with global search (local where the index has no reports).
The last user message is the question and the earlier user and assistant messages are its conversation. The
answer's sources are listed at the end of its text, and given whole in an extra `sources` field.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ..answers.asking import Answer, Question
from ..answers.service import AnswerService
from ..answers.sources import where
from .errors import ApiError


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
        """Answer the last user message, the earlier messages being its conversation."""
        caller = asking(request)
        corpus, method, level = _model(body.model, service, methods)
        turns = [m for m in body.messages if m.role in ("user", "assistant")]
        if not turns or turns[-1].role != "user" or not turns[-1].text.strip():
            raise ApiError(422, "messages: the last message must be the user's question", "invalid_request_error")
        conversation = [{"role": m.role, "content": m.text} for m in turns[:-1]]
        found = await run_in_threadpool(
            ask_now,
            caller,
            Question(corpus, turns[-1].text, method, level, conversation=conversation),
        )
        if not body.stream:
            return completion(body, found)
        headers = {"Cache-Control": "no-cache"}
        return StreamingResponse(completion_chunks(body, found), media_type="text/event-stream", headers=headers)

    return router


def _reply_parts(body: ChatRequest, found: Answer) -> tuple[str, str, int, dict, dict]:
    """The reply's content (the answer, its sources last), id, time, usage, and the fields beyond OpenAI's."""
    usage = {
        "prompt_tokens": found.usage["prompt_tokens"],
        "completion_tokens": found.usage["completion_tokens"],
        "total_tokens": found.usage["prompt_tokens"] + found.usage["completion_tokens"],
    }
    extra = {"answer_id": found.id, "sources": found.sources}
    return found.text + sources_text(found), f"chatcmpl-{found.id}", int(time.time()), usage, extra


def completion(body: ChatRequest, found: Answer) -> dict:
    """The answer as a chat completion."""
    content, reply_id, created, usage, extra = _reply_parts(body, found)
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": created,
        "model": body.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage,
        **extra,
    }


def completion_chunks(body: ChatRequest, found: Answer) -> Iterator[str]:
    """The answer as the server-sent events of a streamed chat completion."""
    content, reply_id, created, usage, extra = _reply_parts(body, found)

    def chunk(choices: list, **more) -> str:
        payload = {
            "id": reply_id,
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
    for piece in _pieces(content):
        yield delta({"content": piece})
    yield delta({}, "stop", **extra)
    if (body.stream_options or {}).get("include_usage"):
        yield chunk([], usage=usage)
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
