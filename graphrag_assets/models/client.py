"""One client for chat and embeddings over the OpenAI API, with what production use needs.

- pacing: the endpoint's own rate-limit headers and a concurrency that adapts to its replies (pacing.py),
  and, when configured, requests-per-minute and tokens-per-minute budgets counted over a moving minute
  and shared by the processes on the machine (budgets.py);
- retries with exponential backoff on 429, 5xx, timeouts and dropped connections,
  honouring Retry-After (tenacity); the openai client's own retries are off so every
  attempt is counted here;
- every reply is checked before it is used or cached: a cut-off, refused, empty or
  malformed reply (the caller's `parse` says what malformed means) is asked for again,
  first as it was, then with a note saying what was wrong, and is never cached;
- a persistent response cache keyed by the full request (diskcache, safe across
  processes): a re-run or a crashed run never pays twice for a call that succeeded;
- fail fast: the first request that misses the cache is preceded by a one-token probe that
  names the endpoint and the problem (refused, hanging, bad key, unknown model), unless the endpoint
  answered one in this process in the last ten minutes; and a run
  of consecutive connection failures or timeouts stops every call of the client;
- usage counters for the asset's metadata. The API key never leaves the openai client:
  error messages are redacted before they are logged or stored.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import diskcache
import numpy as np
import openai
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from ..method.ingest.tokens import count_tokens
from ..method.model_interface import InvalidReply
from .batches import SEND_NOW, BatchQueue
from .budgets import budget
from .endpoint import (
    _SCOPES,
    BatchLedger,
    BatchSettings,
    ModelSettings,
    Usage,
    chat_request,
    embedding_key,
)
from .errors import EndpointError
from .pacing import AdaptiveConcurrency, endpoint_pace, sustainable_concurrency
from .prices import Price
from .spending import BudgetReached, SpendingBudget

log = logging.getLogger(__name__)
T = TypeVar("T")
_MAX_RETRY_AFTER_SECONDS = 120.0
_PROBE_ATTEMPTS = 3
# Endpoints (URL, API version, model, key digest, chat or embed) that answered in this process, and when:
# each step of an in-process run makes its own client, and an endpoint that answered lately needs no probe.
_ANSWERED: dict[tuple[str, str, str, str, str], float] = {}
_ANSWER_FRESH_SECONDS = 600.0
# Probes that failed in this process, and how: an endpoint that did not answer at all (by URL and API version),
# or refused one model, key and kind. Later steps fail at once with the same error instead of waiting on the
# same timeouts again: a hanging endpoint cost a whole index run one pair of timeouts per step.
_PROBE_FAILED: dict[tuple, tuple[float, EndpointError]] = {}
_CORRECTION = (
    "Your previous reply could not be used: {problem}. Answer the original request again, "
    "completely and exactly in the format it asks for."
)


@dataclass(frozen=True)
class _Reply:
    text: str
    finish_reason: str | None = None
    refusal: str | None = None


def check_reply(reply: _Reply, allow_truncated: bool = False) -> str:
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


def _accepted(reply: _Reply, parse: Callable[[str], T] | None, allow_truncated: bool = False) -> T | str:
    """The reply checked, then parsed by the caller's `parse`; InvalidReply when either refuses it."""
    text = check_reply(reply, allow_truncated)
    return parse(text) if parse else text


class GarbledResponse(openai.OpenAIError):
    """An HTTP 200 whose body is not the JSON the API promises (cut off by a proxy, say): worth a retry."""


async def _unless_garbled(response: Awaitable[T]) -> T:
    try:
        return await response
    except json.JSONDecodeError as error:
        raise GarbledResponse(f"the response body is not valid JSON ({error})") from None


def _retryable(error: BaseException) -> bool:
    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, GarbledResponse)):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code >= 500


def _unreachable(error: BaseException) -> bool:
    """Errors that say nothing answered: what the circuit breaker counts."""
    return isinstance(error, (openai.APITimeoutError, openai.APIConnectionError))


def _headers_of(error: BaseException) -> Mapping[str, str] | None:
    return getattr(getattr(error, "response", None), "headers", None)


def _vector(embedding: list[float] | str) -> list[float]:
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype=np.float32).tolist()
    return embedding


def _read_response(kind: str, payload: dict) -> tuple:
    """(result, prompt tokens, completion tokens) of a response body: a reply, or the vectors in input order."""
    usage = payload.get("usage") or {}
    prompt_tokens, completion_tokens = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    if kind == "embed":
        data = sorted(payload["data"], key=lambda item: item["index"])
        return [_vector(item["embedding"]) for item in data], prompt_tokens, 0
    choice = payload["choices"][0]
    message = choice["message"]
    reply = _Reply(message.get("content") or "", choice.get("finish_reason"), message.get("refusal"))
    return reply, prompt_tokens, completion_tokens


def _retry_after_seconds(error: BaseException | None) -> float | None:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return min(max(float(value) * scale, 0.0), _MAX_RETRY_AFTER_SECONDS)
            except ValueError:
                continue
    return None


class ModelClient:
    """Async chat and embeddings. Create it inside the event loop that uses it (the limiters bind to it)."""

    def __init__(
        self,
        settings: ModelSettings,
        cache: diskcache.Cache | None = None,
        batch_ledger: BatchLedger | None = None,
    ):
        """`batch_ledger`: requests that miss the cache go to the Batch API, and each batch is recorded there;
        without one (queries, and index runs that do not ask for batches) every request is sent on its own."""
        self.settings = settings
        self.usage = Usage()
        self._backoff = wait_random_exponential(multiplier=0.5, max=30)
        self._cache = (
            cache if cache is not None else (diskcache.Cache(settings.cache_dir) if settings.cache_dir else None)
        )
        self._concurrency = AdaptiveConcurrency(
            start=min(8, settings.max_concurrency or 8),
            ceiling=settings.max_concurrency,
            adaptive=settings.adaptive_concurrency,
        )
        endpoint, window, shared = settings.base_url or "", settings.rate_window_seconds, settings.rate_limits_file
        self._pace = endpoint_pace(endpoint, settings.model, window, shared)
        self._requests = budget(endpoint, settings.model, "requests", settings.requests_per_minute, window, shared)
        self._tokens = budget(endpoint, settings.model, "tokens", settings.tokens_per_minute, window, shared)
        self._configured_limits = {
            unit: amount / window
            for unit, amount in (("requests", settings.requests_per_minute), ("tokens", settings.tokens_per_minute))
            if amount
        }
        self._typical: tuple[float, float] | None = None  # seconds and tokens of a request, averaged over replies
        self.progress = None  # the step's Progress, when it keeps one (assets/metadata.py step_progress)
        self._spending, self._price = None, settings.price()
        if settings.max_cost_usd is not None:
            if self._price is None:
                raise EndpointError(
                    f"a budget (${settings.max_cost_usd:g}) cannot hold for model {settings.model!r}, whose price is "
                    "unknown: set it in GRAPHRAG_PRICES (0 for a free model), or run without a budget",
                    retryable=False,
                )
            key = settings.budget_key or f"client-{id(self)}"
            self._spending = SpendingBudget(key, settings.max_cost_usd, settings.spending_file)
        self._probe_lock = asyncio.Lock()
        self._probed = False
        key_digest = hashlib.sha256((settings.api_key or "").encode()).hexdigest()[:16]
        self._answer_key = (settings.base_url or "", settings.api_version or "", settings.model, key_digest)
        self._consecutive_unreachable = 0
        self._broken: EndpointError | None = None
        common = dict(api_key=settings.api_key or "not-needed", timeout=settings.timeout_seconds, max_retries=0)
        if settings.api_version:
            self._openai = openai.AsyncAzureOpenAI(
                azure_endpoint=settings.base_url, api_version=settings.api_version, **common
            )
        else:
            self._openai = openai.AsyncOpenAI(base_url=settings.base_url, **common)
        self._batches = None
        if batch_ledger is not None:
            batch_settings = BatchSettings(
                gather_seconds=settings.batch_gather_seconds,
                min_requests=settings.batch_min_requests,
                poll_seconds=settings.batch_poll_seconds,
                poll_max_seconds=settings.batch_poll_max_seconds,
                prompt_price_per_million=price.batch_prompt if (price := settings.price()) else None,
            )
            where = f"{settings.base_url or ''}|{settings.api_version or ''}|{settings.model}"
            self._batches = BatchQueue(
                self._openai, where, batch_ledger, batch_settings, self.usage, bool(settings.api_version)
            )

    @property
    def endpoint(self) -> str:
        """The base URL as a person would recognise it (never the key)."""
        return str(self._openai.base_url).rstrip("/")

    async def close(self) -> None:
        await self._openai.close()
        if self._spending is not None:
            self._spending.close()
        if self._cache is not None:
            self._cache.close()

    def _redact(self, message: str) -> str:
        key = self.settings.api_key
        return message.replace(key, "***") if key else message

    def _wait(self, retry_state) -> float:
        retry_after = _retry_after_seconds(retry_state.outcome.exception())
        return retry_after if retry_after is not None else self._backoff(retry_state)

    def _describe(self, error: BaseException) -> tuple[str, bool]:
        """What went wrong at the endpoint, in words, and whether trying later could help."""
        where = f"model endpoint {self.endpoint} (model {self.settings.model!r})"
        if isinstance(error, openai.APITimeoutError):
            return f"{where} did not answer within {self.settings.timeout_seconds:g} s", True
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__ or error.__context__
            return f"cannot connect to {where}: {self._redact(str(cause or error))}", True
        if isinstance(error, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return (
                f"{where} refused the API key (HTTP {error.status_code}): check GRAPHRAG_API_KEY "
                "(and GRAPHRAG_API_VERSION for Azure)"
            ), False
        if isinstance(error, openai.NotFoundError):
            return (
                f"{where} answered HTTP 404: the model or deployment name, or the base URL path, is wrong "
                "(check GRAPHRAG_API_BASE and the model variables)"
            ), False
        status = getattr(error, "status_code", None)
        return f"{where} failed: HTTP {status}: {self._redact(str(error))[:200]}", True

    async def _probe(self, kind: str) -> None:
        """One tiny request before the first real one, so a dead endpoint fails in seconds, with its name.

        A refused connection or a 429/5xx is tried three times over a few seconds; a timeout twice, each
        with 0.9 of the request timeout, so a hanging endpoint fails in under twice the request timeout.
        """
        async with self._probe_lock:
            answered = _ANSWERED.get((*self._answer_key, kind))
            if self._probed or (answered and time.monotonic() - answered < _ANSWER_FRESH_SECONDS):
                self._probed = True
                return
            for key in (self._answer_key[:2], (*self._answer_key, kind)):
                failed_at, error = _PROBE_FAILED.get(key, (-math.inf, None))
                if error is not None and time.monotonic() - failed_at < _ANSWER_FRESH_SECONDS:
                    self._broken = error
                    raise error
            probe = self._openai.with_options(timeout=0.9 * self.settings.timeout_seconds)
            for attempt in range(_PROBE_ATTEMPTS):
                try:
                    await self._pace.admit(1)
                    await self._requests.spend(1)  # the provider counts the probe too
                    self.usage.calls += 1
                    self.usage.retries += attempt > 0
                    await _unless_garbled(self._ping(probe, kind))
                    _ANSWERED[(*self._answer_key, kind)] = time.monotonic()
                    break
                except openai.BadRequestError:
                    break  # the endpoint and model answered; they only disliked the probe's parameters
                except openai.OpenAIError as error:
                    self._pace.observe(_headers_of(error))
                    timed_out = isinstance(error, openai.APITimeoutError)
                    if not _retryable(error) or attempt == _PROBE_ATTEMPTS - 1 or (timed_out and attempt == 1):
                        message, retryable = self._describe(error)
                        self._broken = EndpointError(message, retryable)
                        key = self._answer_key[:2] if _unreachable(error) else (*self._answer_key, kind)
                        _PROBE_FAILED[key] = (time.monotonic(), self._broken)
                        raise self._broken from None
                    if not timed_out:
                        await asyncio.sleep(min(_retry_after_seconds(error) or 0.5 * 2**attempt, 5.0))
            self._probed = True

    async def _ping(self, probe: openai.AsyncOpenAI, kind: str) -> None:
        model, ping = self.settings.model, [{"role": "user", "content": "ping"}]
        worst = await self._hold(lambda price: price.cost(60, 1))  # a word and the framing; a token answered
        try:
            if kind == "embed":
                raw = await probe.embeddings.with_raw_response.create(model=model, input=["ping"])
            else:
                raw = await probe.chat.completions.with_raw_response.create(model=model, messages=ping, max_tokens=1)
        except BaseException:
            self._spent(worst, worst)
            raise
        self._spent(worst, worst)  # (what a ping cost: about nothing, and no more than this)
        self._pace.observe(raw.headers)
        raw.parse()

    def _note_unreachable(self, error: BaseException) -> None:
        self._consecutive_unreachable += 1
        # Requests in flight together can time out together on one hiccup: a run as long as them says no more.
        threshold = max(self.settings.circuit_breaker_failures, int(self._concurrency.limit))
        if self._consecutive_unreachable >= threshold and self._broken is None:
            message, _ = self._describe(error)
            self._broken = EndpointError(
                f"{self._consecutive_unreachable} requests in a row failed, last: {message}; stopped instead of "
                "retrying every remaining call",
                retryable=True,
            )

    async def _send(self, kind: str, estimated_tokens: int, send: Callable[[], Awaitable[tuple]]):
        """One logical request under the limits, with retries on transient errors.

        `send()` returns (result, prompt tokens, completion tokens, response headers).
        """
        if self._broken:
            raise self._broken
        await self._probe(kind)
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_retryable),
            wait=self._wait,
            stop=stop_after_attempt(self.settings.max_retries + 1),
            reraise=True,
        ):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    self.usage.retries += 1
                async with self._concurrency:
                    if self._broken:  # checked after the wait for a slot, which outlasts a run of timeouts
                        raise self._broken
                    waited = await self._pace.admit(estimated_tokens)
                    waited |= await self._requests.spend(1)
                    waited |= await self._tokens.spend(estimated_tokens)
                    if waited:
                        self.usage.paced += 1
                        self._concurrency.constrained()
                    worst = await self._reserve(kind, estimated_tokens)
                    self._count(calls=1)
                    self.usage.peak_concurrency = max(self.usage.peak_concurrency, self._concurrency.in_flight)
                    started = time.monotonic()
                    try:
                        result, prompt_tokens, completion_tokens, headers = await _unless_garbled(send())
                    except openai.OpenAIError as error:
                        # A request that timed out may have been answered, and billed; one refused was not.
                        self._spent(worst, worst if isinstance(error, openai.APITimeoutError) else 0.0)
                        self._pace.observe(_headers_of(error))
                        if isinstance(error, openai.RateLimitError):
                            self.usage.rate_limited += 1
                            self._concurrency.rate_limited()
                        if _unreachable(error):
                            self._note_unreachable(error)
                        raise
                    self._spent(worst, self._price.cost(prompt_tokens, completion_tokens) if worst else 0.0)
                    self._pace.observe(headers)
                    self._pace.count_completion(completion_tokens)
                    seconds = time.monotonic() - started
                    room = self._room(seconds, (prompt_tokens or estimated_tokens) + completion_tokens)
                    self._concurrency.succeeded(seconds, completion_tokens, room)
                    self._consecutive_unreachable = 0
                self._count(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
                # The reply's tokens count against the budget too, once we know how many there were.
                if completion_tokens:
                    await self._tokens.spend(completion_tokens)
        return result

    async def _reserve(self, kind: str, prompt_tokens: int, batch: bool = False) -> float:
        """Hold the request's worst case against the budget (none: 0.0); BudgetReached stops the client."""
        # Our count of the prompt, with room for the endpoint's own (message framing), and every token it may answer
        prompt, completion = int(prompt_tokens * 1.1) + 50, self.settings.max_tokens if kind == "chat" else 0
        return await self._hold(
            lambda price: price.cost(prompt, completion, *((prompt, completion) if batch else (0, 0)))
        )

    async def _hold(self, worst_of: Callable[[Price], float]) -> float:
        if self._spending is None:
            return 0.0
        worst = worst_of(self._price)
        try:
            await self._spending.reserve(worst)
        except BudgetReached as reached:
            self._broken = reached  # every request still waiting stops too
            raise
        return worst

    def _spent(self, reserved: float, actual: float) -> None:
        if self._spending is not None:
            self._spending.settle(reserved, actual)

    def _room(self, seconds: float, tokens: int) -> float | None:
        """Requests in flight that the tightest known limit (announced, or configured) sustains at the latency and
        request size seen so far (pacing.sustainable_concurrency)."""
        if self._typical is None:
            self._typical = (seconds, float(tokens))
        else:  # a moving average: steady enough to size the pool by, quick to follow a change of step
            self._typical = tuple(0.9 * old + 0.1 * new for old, new in zip(self._typical, (seconds, tokens)))
        limits = self._pace.limits_per_second()
        for unit, rate in self._configured_limits.items():
            limits[unit] = min(rate, limits.get(unit, rate))
        return sustainable_concurrency(limits, *self._typical)

    def _failed(self, message: str) -> None:
        self.usage.failures += 1
        message = self._redact(message)
        self.usage.errors.append(message)
        log.warning("model call failed: %s", message)

    def _count(self, **amounts: int) -> None:
        for usage in (self.usage, (_SCOPES.get() or {}).get(id(self))):
            if usage is not None:
                for name, amount in amounts.items():
                    setattr(usage, name, getattr(usage, name) + amount)

    def _chat_request(self, messages: list[dict], params: dict) -> tuple[dict, str]:
        return chat_request(self.settings, messages, params)

    def _from_cache(self, key: str, accept: Callable[[_Reply], T]) -> tuple[bool, T | None]:
        """(found, value) of the reply cached under `key`, checked by `accept`. An entry that fails the check
        was cached before replies were checked: it counts as not found, and the valid reply replaces it."""
        text = self._cache.get(key) if self._cache is not None else None
        if text is None:
            return False, None
        try:
            value = accept(_Reply(text))
        except InvalidReply:
            return False, None
        self._count(cache_hits=1)
        return True, value

    def cached(
        self, messages: list[dict], *, parse: Callable[[str], T] | None = None, **params: object
    ) -> T | str | None:
        """The cached reply to this request, checked and parsed as `complete` would; None without one."""
        _, value = self._from_cache(self._chat_request(messages, params)[1], lambda reply: _accepted(reply, parse))
        return value

    def remember(self, messages: list[dict], text: str, **params: object) -> None:
        """Cache `text` as the reply to this request, which was answered another way (several in one request).

        The caller has checked the text against what this request asks; it is checked again when read.
        """
        if self._cache is not None:
            self._cache.set(self._chat_request(messages, params)[1], text)

    async def complete(
        self,
        messages: list[dict],
        *,
        parse: Callable[[str], T] | None = None,
        allow_truncated: bool = False,
        **params: object,
    ) -> T | str | None:
        """A checked chat completion: parse(text) (the text itself without parse), or None after every retry.

        A reply that is cut off, refused, empty, or that `parse` rejects with InvalidReply is asked for
        again, and is never cached; the first valid reply is cached under the original request.
        """
        request, key = self._chat_request(messages, params)

        def accept(reply: _Reply):
            return _accepted(reply, parse, allow_truncated)

        found, value = self._from_cache(key, accept)
        if found:
            return value

        async def send_request(body: dict):
            raw = await self._openai.chat.completions.with_raw_response.create(**body)
            response = raw.parse()
            usage, choice = response.usage, response.choices[0]
            reply = _Reply(choice.message.content or "", choice.finish_reason, getattr(choice.message, "refusal", None))
            details = usage.prompt_tokens_details if usage else None
            self.usage.cached_prompt_tokens += (details.cached_tokens or 0) if details else 0
            return reply, (usage.prompt_tokens if usage else 0), (usage.completion_tokens if usage else 0), raw.headers

        body, problem, previous = request, None, ""
        for attempt in range(self.settings.invalid_reply_retries + 1):
            if attempt:
                self.usage.reasked += 1
            if attempt >= 2 or (attempt == 1 and "max_tokens" in str(problem)):
                # Asking the same thing again did not help (or cannot, for a reply cut off at max_tokens).
                body = {
                    **request,
                    "messages": messages
                    + [
                        {"role": "assistant", "content": previous},
                        {"role": "user", "content": _CORRECTION.format(problem=problem)},
                    ],
                }
            estimated = sum(count_tokens(m["content"]) for m in body["messages"])
            try:
                reply = await self._by_batch_or_now("chat", body, estimated, send_request)
            except openai.OpenAIError as error:
                self._failed(f"{type(error).__name__}: {error}")
                return None
            try:
                value = accept(reply)
            except InvalidReply as invalid:
                self.usage.invalid_replies += 1
                problem, previous = invalid, reply.text
                self._settle("chat", body)
                continue
            if self._cache is not None:
                self._cache.set(key, reply.text)
            self._settle("chat", body)
            return value
        self._failed(f"InvalidReply: {problem} (after {self.settings.invalid_reply_retries} re-asks)")
        return None

    async def _by_batch_or_now(self, kind: str, body: dict, estimated: int, send: Callable[[dict], Awaitable[tuple]]):
        """The reply to `body`: from the Batch API in batch mode (unless the queue says to send it alone), or sent
        now. `send(body)` returns (result, prompt tokens, completion tokens, headers), as `_send` wants."""
        now = lambda: self._send(kind, estimated, lambda: send(body))  # noqa: E731
        if self._batches is None:
            return await now()
        await self._probe(kind)  # a dead endpoint fails the step now, by name, not after a batch upload
        worst = await self._reserve(kind, estimated, batch=True)
        try:
            response = await self._batches.ask(kind, body)
        except BaseException:
            self._spent(worst, 0.0)
            raise
        if response is SEND_NOW:
            self._spent(worst, 0.0)
            return await now()
        try:
            result, prompt_tokens, completion_tokens = _read_response(kind, response)
        except (KeyError, IndexError, TypeError, ValueError):
            self._spent(worst, worst)  # answered (and billed) in a shape we cannot read
            return await now()  # a line whose body is not the API's shape: ask on its own
        self._spent(
            worst,
            self._price.cost(prompt_tokens, completion_tokens, prompt_tokens, completion_tokens) if worst else 0.0,
        )
        self._count(
            calls=1,
            batch_calls=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            batch_prompt_tokens=prompt_tokens,
            batch_completion_tokens=completion_tokens,
        )
        return result

    def _settle(self, kind: str, body: dict) -> None:
        """A reply that may have come from a batch is checked and, when valid, cached: its batch need not be read
        again for it."""
        if self._batches is not None:
            self._batches.settle(kind, body)

    def _embedding_key(self, text: str) -> str:
        return embedding_key(self.settings, text)

    def cached_embeddings(self, texts: list[str]) -> list[list[float] | None]:
        """The cached vector of each text, None where there is none: a batch need carry only what is new."""
        if self._cache is None:
            return [None] * len(texts)
        vectors = [self._cache.get(self._embedding_key(text)) for text in texts]
        self.usage.cache_hits += sum(v is not None for v in vectors)
        return vectors

    async def embed(self, texts: list[str]) -> list[list[float]] | None:
        """Embeddings of one batch of texts, or None when the call failed after every retry.

        Vectors are cached one text at a time, so a batch that shares texts with an earlier one (a corpus
        with one document edited) pays only for the texts that are new.
        """
        vectors = self.cached_embeddings(texts)
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        if not missing:
            return vectors
        # Vectors as base64 and parsed here: the openai client's typed models take seconds of CPU
        # for a few thousand 1536-float vectors. An endpoint that ignores the format sends floats.
        request = {"model": self.settings.model, "input": [texts[i] for i in missing], "encoding_format": "base64"}

        async def send(body: dict):
            raw = await self._openai.embeddings.with_raw_response.create(**body)
            return (*_read_response("embed", json.loads(raw.content)), raw.headers)

        try:
            found = await self._by_batch_or_now("embed", request, sum(count_tokens(t) for t in request["input"]), send)
        except openai.OpenAIError as error:
            self._failed(f"{type(error).__name__}: {error}")
            return None
        dimensions = {len(v) for v in found} | {len(v) for v in vectors if v is not None}
        if len(found) != len(missing) or len(dimensions) != 1 or 0 in dimensions:
            self.usage.invalid_replies += 1
            self._failed(
                f"InvalidReply: {len(found)} vectors of dimensions {sorted(dimensions)} for {len(missing)} texts"
            )
            self._settle("embed", request)
            return None
        for i, vector in zip(missing, found):
            vectors[i] = vector
            if self._cache is not None:
                self._cache.set(self._embedding_key(texts[i]), vector)
        self._settle("embed", request)
        return vectors
