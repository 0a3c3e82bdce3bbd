"""One client for chat and embeddings over the OpenAI API, with what production use needs.

- concurrency limit, requests-per-minute and tokens-per-minute limits (aiolimiter);
- retries with exponential backoff on 429, 5xx, timeouts and dropped connections,
  honouring Retry-After (tenacity); the openai client's own retries are off so every
  attempt is counted here;
- a persistent response cache keyed by the full request (diskcache, safe across
  processes): a re-run or a crashed run never pays twice for a call that succeeded;
- usage counters for the asset's metadata. The API key never leaves the openai client:
  error messages are redacted before they are logged or stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field

import diskcache
import openai
from aiolimiter import AsyncLimiter
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from ..method.tokens import count_tokens

log = logging.getLogger(__name__)
_MAX_RETRY_AFTER_SECONDS = 120.0


@dataclass(frozen=True)
class ModelSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    api_version: str | None = None  # set for Azure OpenAI
    max_concurrency: int = 8
    requests_per_minute: int = 500
    tokens_per_minute: int = 200_000
    max_retries: int = 6
    timeout_seconds: float = 60.0
    temperature: float = 0.0
    max_tokens: int = 2000
    cache_dir: str | None = ".graphrag/cache"
    prompt_price_per_million: float = 0.0
    completion_price_per_million: float = 0.0


@dataclass
class Usage:
    calls: int = 0  # requests that reached the endpoint, retries included
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    failures: int = 0  # logical calls that failed after every retry
    errors: list[str] = field(default_factory=list)

    def cost(self, settings: ModelSettings) -> float:
        return (self.prompt_tokens * settings.prompt_price_per_million
                + self.completion_tokens * settings.completion_price_per_million) / 1e6

    def as_metadata(self, settings: ModelSettings) -> dict:
        data = asdict(self)
        data["errors"] = self.errors[:5]
        data["estimated_cost_usd"] = round(self.cost(settings), 6)
        data["model"] = settings.model
        return data


def _retryable(error: BaseException) -> bool:
    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code >= 500


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

    def __init__(self, settings: ModelSettings, cache: diskcache.Cache | None = None):
        self.settings = settings
        self.usage = Usage()
        self._backoff = wait_random_exponential(multiplier=0.5, max=30)
        self._cache = cache if cache is not None else (
            diskcache.Cache(settings.cache_dir) if settings.cache_dir else None
        )
        self._semaphore = asyncio.Semaphore(settings.max_concurrency)
        # Per-second buckets spread a minute's quota evenly instead of spending it in one burst,
        # which providers that enforce limits over sub-minute windows would refuse.
        self._requests = AsyncLimiter(settings.requests_per_minute / 60, 1)
        self._tokens = AsyncLimiter(settings.tokens_per_minute / 60, 1)
        common = dict(api_key=settings.api_key or "not-needed", timeout=settings.timeout_seconds, max_retries=0)
        if settings.api_version:
            self._openai = openai.AsyncAzureOpenAI(
                azure_endpoint=settings.base_url, api_version=settings.api_version, **common
            )
        else:
            self._openai = openai.AsyncOpenAI(base_url=settings.base_url, **common)

    async def close(self) -> None:
        await self._openai.close()
        if self._cache is not None:
            self._cache.close()

    def _redact(self, message: str) -> str:
        key = self.settings.api_key
        return message.replace(key, "***") if key else message

    def _wait(self, retry_state) -> float:
        retry_after = _retry_after_seconds(retry_state.outcome.exception())
        return retry_after if retry_after is not None else self._backoff(retry_state)

    async def _cached_call(self, kind: str, request: dict, estimated_tokens: int, send):
        """Answer from the cache, or send under the limits with retries and cache the reply."""
        key = hashlib.sha256(json.dumps([kind, request], sort_keys=True).encode()).hexdigest()
        if self._cache is not None:
            cached = self._cache.get(key)
            if cached is not None:
                self.usage.cache_hits += 1
                return cached
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_retryable), wait=self._wait,
                stop=stop_after_attempt(self.settings.max_retries + 1), reraise=True,
            ):
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self.usage.retries += 1
                    async with self._semaphore:
                        await self._requests.acquire()
                        await self._tokens.acquire(min(estimated_tokens, self._tokens.max_rate))
                        self.usage.calls += 1
                        result, prompt_tokens, completion_tokens = await send()
                    self.usage.prompt_tokens += prompt_tokens
                    self.usage.completion_tokens += completion_tokens
                    # The reply's tokens count against the budget too, once we know how many there were.
                    if completion_tokens:
                        await self._tokens.acquire(min(completion_tokens, self._tokens.max_rate))
        except openai.OpenAIError as error:
            self.usage.failures += 1
            message = self._redact(f"{type(error).__name__}: {error}")
            self.usage.errors.append(message)
            log.warning("model call failed after retries: %s", message)
            return None
        if self._cache is not None:
            self._cache.set(key, result)
        return result

    async def complete(self, messages: list[dict], **params: object) -> str | None:
        """Chat completion text, or None when the call failed after every retry."""
        request = {
            "model": self.settings.model, "messages": messages,
            "temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens, **params,
        }
        estimated = sum(count_tokens(m["content"]) for m in messages)

        async def send():
            response = await self._openai.chat.completions.create(**request)
            usage = response.usage
            text = response.choices[0].message.content or ""
            return text, (usage.prompt_tokens if usage else 0), (usage.completion_tokens if usage else 0)

        return await self._cached_call("chat", request, estimated, send)

    async def embed(self, texts: list[str]) -> list[list[float]] | None:
        """Embeddings of one batch of texts, or None when the call failed after every retry."""
        request = {"model": self.settings.model, "input": texts}

        async def send():
            response = await self._openai.embeddings.create(**request)
            vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
            return vectors, (response.usage.prompt_tokens if response.usage else 0), 0

        return await self._cached_call("embed", request, sum(count_tokens(t) for t in texts), send)
