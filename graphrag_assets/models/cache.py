"""The persistent response cache, keyed by the full request (diskcache, safe across processes): a re-run or a
crashed run never pays twice for a call that succeeded. Only checked replies are stored, and a stored reply is
checked again when read."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import diskcache

from ..method.model_interface import InvalidReply
from .endpoint import ModelSettings, embedding_key
from .replies import Reply

T = TypeVar("T")


class ResponseCache:
    """Replies and vectors of one endpoint's model; `count` counts the hits in the client's usage."""

    def __init__(self, settings: ModelSettings, cache: diskcache.Cache | None, count: Callable[..., None]):
        self.settings, self._count = settings, count
        self._store = (
            cache if cache is not None else (diskcache.Cache(settings.cache_dir) if settings.cache_dir else None)
        )

    def reply(self, key: str, accept: Callable[[Reply], T]) -> tuple[bool, T | None]:
        """(found, value) of the reply cached under `key`, checked by `accept`. An entry that fails the check
        was cached before replies were checked: it counts as not found, and the valid reply replaces it."""
        text = self._store.get(key) if self._store is not None else None
        if text is None:
            return False, None
        try:
            value = accept(Reply(text))
        except InvalidReply:
            return False, None
        self._count(cache_hits=1)
        return True, value

    def keep(self, key: str, text: str) -> None:
        if self._store is not None:
            self._store.set(key, text)

    def vectors(self, texts: list[str]) -> list[list[float] | None]:
        """The cached vector of each text, None where there is none."""
        if self._store is None:
            return [None] * len(texts)
        return [self._store.get(embedding_key(self.settings, text)) for text in texts]

    def keep_vector(self, text: str, vector: list[float]) -> None:
        if self._store is not None:
            self._store.set(embedding_key(self.settings, text), vector)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
