"""Sending a request, as many at once as the endpoint sustains: its rate-limit headers and a concurrency that
adapts to its replies (pacing.py), requests-per-minute and tokens-per-minute budgets shared by the processes on the
machine (budgets.py), retries with exponential backoff on 429, 5xx, timeouts and dropped connections honouring
Retry-After (tenacity), the Batch API when a run asks for it, and a circuit breaker: a run of consecutive
connection failures or timeouts stops every call of the client. The API key never leaves the openai client: error
messages are redacted before they are logged or stored."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable

import openai
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from .batches import SEND_NOW, BatchQueue
from .budgets import budget
from .endpoint import ModelSettings, Usage
from .errors import EndpointError
from .pacing import AdaptiveConcurrency, TypicalRequest, endpoint_pace
from .probe import (
    EndpointProbe,
    GarbledResponse,
    describe_failure,
    headers_of,
    retry_after_seconds,
    retryable,
    unreachable,
)
from .replies import read_response
from .spending import RunCost


async def unless_garbled(response: Awaitable):
    try:
        return await response
    except json.JSONDecodeError as error:
        raise GarbledResponse(f"the response body is not valid JSON ({error})") from None


class Sender:
    """Every request of one client goes through `send` (or `by_batch_or_now`). `count` adds to the client's usage
    and to the usage scope of the answer it is part of."""

    def __init__(
        self,
        settings: ModelSettings,
        client: openai.AsyncOpenAI,
        usage: Usage,
        count: Callable[..., None],
        cost: Callable[[Callable[[EndpointError], None]], RunCost],
        answer_key: tuple[str, str, str, str],
        batches: BatchQueue | None,
    ):
        self.settings, self.openai, self.usage, self._count, self.batches = settings, client, usage, count, batches
        self.broken: EndpointError | None = None
        self.cost = cost(self.stop)
        self.concurrency = AdaptiveConcurrency(
            start=min(8, settings.max_concurrency or 8),
            ceiling=settings.max_concurrency,
            adaptive=settings.adaptive_concurrency,
        )
        endpoint, window, shared = settings.base_url or "", settings.rate_window_seconds, settings.rate_limits_file
        self.pace = endpoint_pace(endpoint, settings.model, window, shared)
        self._requests = budget(endpoint, settings.model, "requests", settings.requests_per_minute, window, shared)
        self._tokens = budget(endpoint, settings.model, "tokens", settings.tokens_per_minute, window, shared)
        configured = (("requests", settings.requests_per_minute), ("tokens", settings.tokens_per_minute))
        self._typical = TypicalRequest({unit: amount / window for unit, amount in configured if amount})
        self._backoff = wait_random_exponential(multiplier=0.5, max=30)
        self._consecutive_unreachable = 0
        where = f"model endpoint {self.endpoint} (model {settings.model!r})"
        self.describe = functools.partial(
            describe_failure, where=where, timeout_seconds=settings.timeout_seconds, api_key=settings.api_key
        )
        self.probe = EndpointProbe(answer_key, self._ping, self.describe, settings.timeout_seconds)

    @property
    def endpoint(self) -> str:
        """The base URL as a person would recognise it (never the key)."""
        return str(self.openai.base_url).rstrip("/")

    def stop(self, error: EndpointError) -> None:
        """Every request of the client from now on fails with `error`."""
        self.broken = error

    async def probed(self, kind: str) -> None:
        try:
            await self.probe.check(kind)
        except EndpointError as error:
            self.stop(error)
            raise

    async def _ping(self, timeout: float, kind: str, attempt: int) -> None:
        """The probe's request, counted against the limits as the provider counts it."""
        await self.pace.admit(1)
        await self._requests.spend(1)
        self.usage.calls += 1
        self.usage.retries += attempt > 0
        try:
            await unless_garbled(self._ping_once(timeout, kind))
        except openai.BadRequestError:
            raise
        except openai.OpenAIError as error:
            self.pace.observe(headers_of(error))
            raise

    async def _ping_once(self, timeout: float, kind: str) -> None:
        probe, model = self.openai.with_options(timeout=timeout), self.settings.model
        worst = await self.cost.hold(lambda price: price.cost(60, 1))  # a word and the framing; a token answered
        try:
            if kind == "embed":
                raw = await probe.embeddings.with_raw_response.create(model=model, input=["ping"])
            else:
                ping = [{"role": "user", "content": "ping"}]
                raw = await probe.chat.completions.with_raw_response.create(model=model, messages=ping, max_tokens=1)
        finally:
            self.cost.settle(worst, worst)  # (what a ping cost: about nothing, and no more than this)
        self.pace.observe(raw.headers)
        raw.parse()

    def _note_unreachable(self, error: BaseException) -> None:
        self._consecutive_unreachable += 1
        # Requests in flight together can time out together on one hiccup: a run as long as them says no more.
        threshold = max(self.settings.circuit_breaker_failures, int(self.concurrency.limit))
        if self._consecutive_unreachable >= threshold and self.broken is None:
            message, _ = self.describe(error)
            self.broken = EndpointError(
                f"{self._consecutive_unreachable} requests in a row failed, last: {message}; stopped instead of "
                "retrying every remaining call",
                retryable=True,
            )

    def _wait(self, retry_state) -> float:
        retry_after = retry_after_seconds(retry_state.outcome.exception())
        return retry_after if retry_after is not None else self._backoff(retry_state)

    async def send(self, kind: str, estimated_tokens: int, send: Callable[[], Awaitable[tuple]]):
        """One logical request under the limits, with retries on transient errors.

        `send()` returns (result, prompt tokens, completion tokens, response headers).
        """
        if self.broken:
            raise self.broken
        await self.probed(kind)
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(retryable),
            wait=self._wait,
            stop=stop_after_attempt(self.settings.max_retries + 1),
            reraise=True,
        ):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    self.usage.retries += 1
                async with self.concurrency:
                    if self.broken:  # checked after the wait for a slot, which outlasts a run of timeouts
                        raise self.broken
                    waited = await self.pace.admit(estimated_tokens)
                    waited |= await self._requests.spend(1)
                    waited |= await self._tokens.spend(estimated_tokens)
                    if waited:
                        self.usage.paced += 1
                        self.concurrency.constrained()
                    worst = await self.cost.reserve(estimated_tokens, self.settings.max_tokens if kind == "chat" else 0)
                    self._count(calls=1)
                    self.usage.peak_concurrency = max(self.usage.peak_concurrency, self.concurrency.in_flight)
                    started = time.monotonic()
                    try:
                        result, prompt_tokens, completion_tokens, headers = await unless_garbled(send())
                    except openai.OpenAIError as error:
                        # A request that timed out may have been answered, and billed; one refused was not.
                        self.cost.settle(worst, worst if isinstance(error, openai.APITimeoutError) else 0.0)
                        self.pace.observe(headers_of(error))
                        if isinstance(error, openai.RateLimitError):
                            self.usage.rate_limited += 1
                            self.concurrency.rate_limited()
                        if unreachable(error):
                            self._note_unreachable(error)
                        raise
                    self.cost.settle(worst, self.cost.cost(worst, prompt_tokens, completion_tokens))
                    self.pace.observe(headers)
                    self.pace.count_completion(completion_tokens)
                    seconds = time.monotonic() - started
                    tokens = (prompt_tokens or estimated_tokens) + completion_tokens
                    # Requests in flight that the tightest known limit sustains at the latency and size seen so far
                    room = self._typical.room(seconds, tokens, self.pace.limits_per_second())
                    self.concurrency.succeeded(seconds, completion_tokens, room)
                    self._consecutive_unreachable = 0
                self._count(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
                # The reply's tokens count against the budget too, once we know how many there were.
                if completion_tokens:
                    await self._tokens.spend(completion_tokens)
        return result

    async def by_batch_or_now(self, kind: str, body: dict, estimated: int, send: Callable[[dict], Awaitable[tuple]]):
        """The reply to `body`: from the Batch API in batch mode (unless the queue says to send it alone), or sent
        now. `send(body)` returns (result, prompt tokens, completion tokens, headers), as `send` wants."""
        now = lambda: self.send(kind, estimated, lambda: send(body))  # noqa: E731
        if self.batches is None:
            return await now()
        await self.probed(kind)  # a dead endpoint fails the step now, by name, not after a batch upload
        worst = await self.cost.reserve(estimated, self.settings.max_tokens if kind == "chat" else 0, batch=True)
        try:
            response = await self.batches.ask(kind, body)
        except BaseException:
            self.cost.settle(worst, 0.0)
            raise
        if response is SEND_NOW:
            self.cost.settle(worst, 0.0)
            return await now()
        try:
            result, prompt_tokens, completion_tokens = read_response(kind, response)
        except (KeyError, IndexError, TypeError, ValueError):
            self.cost.settle(worst, worst)  # answered (and billed) in a shape we cannot read
            return await now()  # a line whose body is not the API's shape: ask on its own
        self.cost.settle(worst, self.cost.cost(worst, prompt_tokens, completion_tokens, batch=True))
        self._count(
            calls=1,
            batch_calls=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            batch_prompt_tokens=prompt_tokens,
            batch_completion_tokens=completion_tokens,
        )
        return result

    def settle(self, kind: str, body: dict) -> None:
        """A reply that may have come from a batch is checked and, when valid, cached: its batch need not be read
        again for it."""
        if self.batches is not None:
            self.batches.settle(kind, body)
