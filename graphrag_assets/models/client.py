"""One client for chat and embeddings over the OpenAI API, with what production use needs, each concern in a
module of its own:

- sending (sender.py): pacing to the endpoint's rate-limit headers, configured per-minute budgets shared by the
  processes on the machine, a concurrency that adapts to the replies, retries honouring Retry-After, the Batch
  API, and a circuit breaker; the openai client's own retries are off so every attempt is counted there;
- fail fast (probe.py): a one-token probe before the first request that misses the cache names the endpoint and
  the problem;
- checking (replies.py): every reply is checked before it is used or cached; an unusable one is asked for again,
  first as it was, then with a note saying what was wrong, and is never cached;
- the response cache (cache.py): a re-run or a crashed run never pays twice for a call that succeeded;
- the budget (spending.py): a request whose worst case does not fit what is left is not sent.

Usage counters go to the asset's metadata. The API key never leaves the openai client: error messages are
redacted before they are logged or stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TypeVar

import diskcache
import openai

from ..method.ingest.tokens import count_tokens
from ..method.model_interface import InvalidReply
from .batches import BatchQueue
from .cache import ResponseCache
from .endpoint import _SCOPES, BatchLedger, BatchSettings, ModelSettings, Usage, chat_request
from .errors import EndpointError
from .probe import redacted
from .replies import Reply, accepted, asked_again, read_response
from .sender import Sender
from .spending import RunCost, SpendingBudget

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        self.progress = None  # the step's Progress, when it keeps one (assets/metadata.py step_progress)
        price, spending = settings.price(), None
        if settings.max_cost_usd is not None:
            if price is None:
                raise EndpointError(
                    f"a budget (${settings.max_cost_usd:g}) cannot hold for model {settings.model!r}, whose price is "
                    "unknown: set it in GRAPHRAG_PRICES (0 for a free model), or run without a budget",
                    retryable=False,
                )
            key = settings.budget_key or f"client-{id(self)}"
            spending = SpendingBudget(key, settings.max_cost_usd, settings.spending_file)
        self._cache = ResponseCache(settings, cache, self._count)
        common = dict(api_key=settings.api_key or "not-needed", timeout=settings.timeout_seconds, max_retries=0)
        if settings.api_version:
            self._openai = openai.AsyncAzureOpenAI(
                azure_endpoint=settings.base_url, api_version=settings.api_version, **common
            )
        else:
            self._openai = openai.AsyncOpenAI(base_url=settings.base_url, **common)
        batches = None
        if batch_ledger is not None:
            batch_settings = BatchSettings(
                gather_seconds=settings.batch_gather_seconds,
                min_requests=settings.batch_min_requests,
                poll_seconds=settings.batch_poll_seconds,
                poll_max_seconds=settings.batch_poll_max_seconds,
                prompt_price_per_million=price.batch_prompt if price else None,
            )
            where = f"{settings.base_url or ''}|{settings.api_version or ''}|{settings.model}"
            batches = BatchQueue(
                self._openai, where, batch_ledger, batch_settings, self.usage, bool(settings.api_version)
            )
        key_digest = hashlib.sha256((settings.api_key or "").encode()).hexdigest()[:16]
        answer_key = (settings.base_url or "", settings.api_version or "", settings.model, key_digest)
        self._sender = Sender(
            settings,
            self._openai,
            self.usage,
            self._count,
            lambda stop: RunCost(spending, price, stop),
            answer_key,
            batches,
        )

    @property
    def endpoint(self) -> str:
        """The base URL as a person would recognise it (never the key)."""
        return self._sender.endpoint

    async def close(self) -> None:
        await self._openai.close()
        self._sender.cost.close()
        self._cache.close()

    def _failed(self, message: str) -> None:
        self.usage.failures += 1
        message = redacted(message, self.settings.api_key)
        self.usage.errors.append(message)
        log.warning("model call failed: %s", message)

    def _count(self, **amounts: int) -> None:
        for usage in (self.usage, (_SCOPES.get() or {}).get(id(self))):
            if usage is not None:
                for name, amount in amounts.items():
                    setattr(usage, name, getattr(usage, name) + amount)

    def cached(
        self, messages: list[dict], *, parse: Callable[[str], T] | None = None, **params: object
    ) -> T | str | None:
        """The cached reply to this request, checked and parsed as `complete` would; None without one."""
        key = chat_request(self.settings, messages, params)[1]
        _, value = self._cache.reply(key, lambda reply: accepted(reply, parse))
        return value

    def remember(self, messages: list[dict], text: str, **params: object) -> None:
        """Cache `text` as the reply to this request, which was answered another way (several in one request).

        The caller has checked the text against what this request asks; it is checked again when read.
        """
        self._cache.keep(chat_request(self.settings, messages, params)[1], text)

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
        request, key = chat_request(self.settings, messages, params)
        found, value = self._cache.reply(key, lambda reply: accepted(reply, parse, allow_truncated))
        if found:
            return value
        problem, previous = None, ""
        for attempt in range(self.settings.invalid_reply_retries + 1):
            if attempt:
                self.usage.reasked += 1
            body = asked_again(request, messages, attempt, problem, previous)
            estimated = sum(count_tokens(m["content"]) for m in body["messages"])
            try:
                reply = await self._sender.by_batch_or_now("chat", body, estimated, self._send_chat)
            except openai.OpenAIError as error:
                self._failed(f"{type(error).__name__}: {error}")
                return None
            try:
                value = accepted(reply, parse, allow_truncated)
            except InvalidReply as invalid:
                self.usage.invalid_replies += 1
                problem, previous = invalid, reply.text
                self._sender.settle("chat", body)
                continue
            self._cache.keep(key, reply.text)
            self._sender.settle("chat", body)
            return value
        self._failed(f"InvalidReply: {problem} (after {self.settings.invalid_reply_retries} re-asks)")
        return None

    async def _send_chat(self, body: dict) -> tuple:
        raw = await self._openai.chat.completions.with_raw_response.create(**body)
        response = raw.parse()
        usage, choice = response.usage, response.choices[0]
        reply = Reply(choice.message.content or "", choice.finish_reason, getattr(choice.message, "refusal", None))
        details = usage.prompt_tokens_details if usage else None
        self.usage.cached_prompt_tokens += (details.cached_tokens or 0) if details else 0
        return reply, (usage.prompt_tokens if usage else 0), (usage.completion_tokens if usage else 0), raw.headers

    def cached_embeddings(self, texts: list[str]) -> list[list[float] | None]:
        """The cached vector of each text, None where there is none: a batch need carry only what is new."""
        vectors = self._cache.vectors(texts)
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
        estimated = sum(count_tokens(t) for t in request["input"])
        try:
            found = await self._sender.by_batch_or_now("embed", request, estimated, self._send_embeddings)
        except openai.OpenAIError as error:
            self._failed(f"{type(error).__name__}: {error}")
            return None
        dimensions = {len(v) for v in found} | {len(v) for v in vectors if v is not None}
        if len(found) != len(missing) or len(dimensions) != 1 or 0 in dimensions:
            self.usage.invalid_replies += 1
            self._failed(
                f"InvalidReply: {len(found)} vectors of dimensions {sorted(dimensions)} for {len(missing)} texts"
            )
            self._sender.settle("embed", request)
            return None
        for i, vector in zip(missing, found):
            vectors[i] = vector
            self._cache.keep_vector(texts[i], vector)
        self._sender.settle("embed", request)
        return vectors

    async def _send_embeddings(self, body: dict) -> tuple:
        raw = await self._openai.embeddings.with_raw_response.create(**body)
        return (*read_response("embed", json.loads(raw.content)), raw.headers)
