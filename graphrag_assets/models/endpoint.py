"""What a model endpoint is set to and what a client used of it, apart from the client itself: the resources,
the estimate and the store read these, and loading them must not load the openai package (a second or more at
every process start: the CLI, each step, the server)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from .prices import Price, price_of


class BatchLedger(Protocol):
    """Where submitted batches are recorded, so a later process can find them again."""

    labels: dict[str, str]  # step, corpus and run, recorded with each batch and sent as its metadata

    def record(self, batch: dict) -> None: ...

    def update(self, recorded_id: str, **fields: Any) -> None: ...

    def unfinished(self, endpoint: str, custom_ids: list[str]) -> list[dict]:
        """Recorded batches of `endpoint` covering any of `custom_ids` whose output was not yet read."""
        ...

    def progress(self, message: str) -> None: ...


@dataclass(frozen=True)
class BatchSettings:
    gather_seconds: float = 1.0  # quiet time that closes a round of requests
    min_requests: int = 20  # fewer chat requests than this in a round: sent synchronously
    poll_seconds: float = 5.0  # first wait between status checks; doubles up to poll_max_seconds
    poll_max_seconds: float = 60.0
    completion_window: str = "24h"
    prompt_price_per_million: float | None = None  # at the batch price (None: unknown), said up front


@dataclass(frozen=True)
class ModelSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    api_version: str | None = None  # set for Azure OpenAI
    # The ceiling; requests in flight start at 8 and adapt to the endpoint's replies. None: twice what the
    # endpoint's announced limits sustain at its latency (64 while it has announced none): see pacing.py.
    max_concurrency: int | None = None
    adaptive_concurrency: bool = True  # False: always the ceiling in flight
    requests_per_minute: int | None = None  # None: pace to the endpoint's x-ratelimit headers and 429s alone
    tokens_per_minute: int | None = None
    rate_window_seconds: float = 60.0  # the window the endpoint counts its limits over (a minute, for all we know)
    # Where every process on the machine counts what it spent of each endpoint's limits (None: this process only)
    rate_limits_file: str | None = None
    max_retries: int = 6
    invalid_reply_retries: int = 2  # re-asks after a reply that does not parse: once as it was, then corrected
    circuit_breaker_failures: int = 5  # consecutive connection failures or timeouts that stop the client
    timeout_seconds: float = 60.0
    temperature: float = 0.0
    max_tokens: int = 2000
    cache_dir: str | None = ".graphrag/cache"
    # None: the model's listed price (models/prices.py); set 0 for a free model
    prompt_price_per_million: float | None = None
    completion_price_per_million: float | None = None
    batch_min_requests: int = BatchSettings.min_requests
    batch_poll_seconds: float = BatchSettings.poll_seconds
    batch_poll_max_seconds: float = BatchSettings.poll_max_seconds
    batch_gather_seconds: float = BatchSettings.gather_seconds
    batch_price_factor: float = 0.5  # of a price set here, per token answered by a batch (listed ones have their own)
    # A cap in dollars on what the requests of every client with the same budget_key (a run's) spend together,
    # counted in spending_file across processes (None: in this process); models/spending.py
    max_cost_usd: float | None = None
    budget_key: str | None = None
    spending_file: str | None = None

    def price(self) -> Price | None:
        return price_of(
            self.model, self.prompt_price_per_million, self.completion_price_per_million, self.batch_price_factor
        )


@dataclass
class Usage:
    calls: int = 0  # requests that reached the endpoint, retries, re-asks and the probe included
    cache_hits: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, those the endpoint served from its prompt cache
    completion_tokens: int = 0
    retries: int = 0  # requests sent again after a 429, 5xx, timeout or dropped connection
    rate_limited: int = 0  # HTTP 429s received
    paced: int = 0  # requests held back until a rate budget (configured or announced by the endpoint) had room
    peak_concurrency: int = 0  # most requests in flight at once
    invalid_replies: int = 0  # replies that did not parse (cut off, refused, wrong format); never cached
    reasked: int = 0  # requests sent again because the reply was invalid
    failures: int = 0  # logical calls with no valid reply after every retry
    # Of the calls and tokens above, those answered by the Batch API (billed at batch_price_factor)
    batch_calls: int = 0
    batch_prompt_tokens: int = 0
    batch_completion_tokens: int = 0
    batches: int = 0  # submitted by this client
    batches_reattached: int = 0  # submitted by an earlier run of the step, waited for again
    batch_lines_failed: int = 0  # lines that failed, expired or were lost, and were asked again
    batch_sent_alone: int = 0  # requests of rounds too small for a batch, or that failed in two batches
    batch_wait_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def cost(self, settings: ModelSettings) -> float | None:
        """Dollars spent, or None when the model's price is unknown (and tokens were spent)."""
        if not (self.prompt_tokens or self.completion_tokens):
            return 0.0
        price = settings.price()
        if price is None:
            return None
        return price.cost(
            self.prompt_tokens, self.completion_tokens, self.batch_prompt_tokens, self.batch_completion_tokens
        )

    def as_metadata(self, settings: ModelSettings) -> dict:
        data = asdict(self)
        data["errors"] = self.errors[:5]
        cost = self.cost(settings)
        data["estimated_cost_usd"] = None if cost is None else round(cost, 6)
        data["model"] = settings.model
        return data


def chat_request(settings: ModelSettings, messages: list[dict], params: dict | None = None) -> tuple[dict, str]:
    """A chat request's body and the key its valid reply is cached under."""
    request = {
        "model": settings.model,
        "messages": messages,
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        **(params or {}),
    }
    return request, hashlib.sha256(json.dumps(["chat", request], sort_keys=True).encode()).hexdigest()


def embedding_key(settings: ModelSettings, text: str) -> str:
    """The key one text's vector is cached under."""
    return hashlib.sha256(json.dumps(["embed-text", settings.model, text]).encode()).hexdigest()


_SCOPES: ContextVar[dict[int, Usage] | None] = ContextVar("usage_scopes", default=None)


@contextmanager
def usage_scope(client: object) -> Iterator[Usage]:
    """The calls, cache hits and tokens of `client`'s requests made inside the block and the tasks it starts
    (one answer among many answered concurrently), counted apart from the client's total. The client is known by
    its identity alone: nothing here needs the client module, which imports this one."""
    usage = Usage()
    token = _SCOPES.set({**(_SCOPES.get() or {}), id(client): usage})
    try:
        yield usage
    finally:
        _SCOPES.reset(token)
