"""What a model's response says, and whether a prompt of ours can use it: a reply that is cut off, refused, empty
or malformed (the caller's `parse` says what malformed means) is asked for again, never used nor cached."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..method.model_interface import InvalidReply

T = TypeVar("T")

CORRECTION = (
    "Your previous reply could not be used: {problem}. Answer the original request again, "
    "completely and exactly in the format it asks for."
)


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str | None = None
    refusal: str | None = None


def check_reply(reply: Reply, allow_truncated: bool = False) -> str:
    """The reply's text, or InvalidReply when no prompt of ours could use it."""
    if reply.refusal:
        raise InvalidReply(f"the model refused ({reply.refusal[:80]!r})")
    if reply.finish_reason == "length" and not allow_truncated:
        raise InvalidReply("the reply was cut off at max_tokens (finish_reason 'length')")
    if reply.finish_reason == "content_filter":
        raise InvalidReply("the reply was withheld by the endpoint's content filter")
    if not reply.text.strip():
        raise InvalidReply("the reply was empty")
    return reply.text


def accepted(reply: Reply, parse: Callable[[str], T] | None, allow_truncated: bool = False) -> T | str:
    """The reply checked, then parsed by the caller's `parse`; InvalidReply when either refuses it."""
    text = check_reply(reply, allow_truncated)
    return parse(text) if parse else text


def asked_again(request: dict, messages: list[dict], attempt: int, problem: Exception | None, previous: str) -> dict:
    """The request for the `attempt`-th try: as it was, then, once asking the same did not help (or cannot, for a
    reply cut off at max_tokens), with the unusable reply and a note saying what was wrong with it."""
    if attempt >= 2 or (attempt == 1 and "max_tokens" in str(problem)):
        correction = [
            {"role": "assistant", "content": previous},
            {"role": "user", "content": CORRECTION.format(problem=problem)},
        ]
        return {**request, "messages": messages + correction}
    return request


def _vector(embedding: list[float] | str) -> list[float]:
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype=np.float32).tolist()
    return embedding


def read_response(kind: str, payload: dict) -> tuple:
    """(result, prompt tokens, completion tokens) of a response body: a reply, or the vectors in input order."""
    usage = payload.get("usage") or {}
    prompt_tokens, completion_tokens = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    if kind == "embed":
        data = sorted(payload["data"], key=lambda item: item["index"])
        return [_vector(item["embedding"]) for item in data], prompt_tokens, 0
    choice = payload["choices"][0]
    message = choice["message"]
    reply = Reply(message.get("content") or "", choice.get("finish_reason"), message.get("refusal"))
    return reply, prompt_tokens, completion_tokens
