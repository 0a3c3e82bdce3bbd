"""What the method needs of a model, and of its replies: the chat and embedding interfaces every operation is
written against (models/client.py serves them; tests and the estimate's dry run stand in for them), and the error
a reply that does not answer its prompt raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class InvalidReply(ValueError):
    """A reply that does not answer what the prompt asked: cut off, refused, empty or in the wrong format."""


class ChatModel(Protocol):
    """What the method needs of a chat model.

    `parse` turns the reply text into what the caller needs, raising InvalidReply when the reply does
    not answer the prompt; the model then asks again, and caches only replies that parse. The result
    is None when no valid reply came after every retry.
    """

    async def complete(
        self,
        messages: list[dict],
        *,
        parse: Callable[[str], T] | None = None,
        allow_truncated: bool = False,
        **params: object,
    ) -> T | str | None: ...

    def cached(
        self, messages: list[dict], *, parse: Callable[[str], T] | None = None, **params: object
    ) -> T | str | None:
        """The valid cached reply to this request, or None: what `complete` would answer without a call."""

    def remember(self, messages: list[dict], text: str, **params: object) -> None:
        """Keep a checked reply to this request that came another way (several requests answered in one)."""


class Embedder(Protocol):
    """What the method needs of an embedding model: one vector per text, None when the batch failed for good."""

    async def embed(self, texts: list[str]) -> list[list[float]] | None: ...
