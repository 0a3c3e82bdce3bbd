"""Fail fast: the first request of a client that misses the cache is preceded by a one-token probe that names the
endpoint and the problem (refused, hanging, bad key, unknown model), unless the endpoint answered one in this
process in the last ten minutes."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping

import openai

from .errors import EndpointError

_PROBE_ATTEMPTS = 3
_MAX_RETRY_AFTER_SECONDS = 120.0
# Endpoints (URL, API version, model, key digest, chat or embed) that answered in this process, and when:
# each step of an in-process run makes its own client, and an endpoint that answered lately needs no probe.
_ANSWERED: dict[tuple[str, str, str, str, str], float] = {}
_ANSWER_FRESH_SECONDS = 600.0
# Probes that failed in this process, and how: an endpoint that did not answer at all (by URL and API version),
# or refused one model, key and kind. Later steps fail at once with the same error instead of waiting on the
# same timeouts again: a hanging endpoint cost a whole index run one pair of timeouts per step.
_PROBE_FAILED: dict[tuple, tuple[float, EndpointError]] = {}


class GarbledResponse(openai.OpenAIError):
    """An HTTP 200 whose body is not the JSON the API promises (cut off by a proxy, say): worth a retry."""


def retryable(error: BaseException) -> bool:
    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, GarbledResponse)):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code >= 500


def unreachable(error: BaseException) -> bool:
    """Errors that say nothing answered: what the circuit breaker counts."""
    return isinstance(error, (openai.APITimeoutError, openai.APIConnectionError))


def headers_of(error: BaseException) -> Mapping[str, str] | None:
    return getattr(getattr(error, "response", None), "headers", None)


def retry_after_seconds(error: BaseException | None) -> float | None:
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


def redacted(message: str, api_key: str | None) -> str:
    return message.replace(api_key, "***") if api_key else message


def describe_failure(error: BaseException, where: str, timeout_seconds: float, api_key: str | None) -> tuple[str, bool]:
    """What went wrong at the endpoint `where`, in words (never the key), and whether trying later could help."""
    if isinstance(error, openai.APITimeoutError):
        return f"{where} did not answer within {timeout_seconds:g} s", True
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error.__context__
        return f"cannot connect to {where}: {redacted(str(cause or error), api_key)}", True
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
    return f"{where} failed: HTTP {status}: {redacted(str(error), api_key)[:200]}", True


class EndpointProbe:
    """One probe per client and kind (chat or embed), shared by its requests. `answer_key` names the endpoint
    (URL, API version, model, key digest); `ping(client, kind)` sends the probe's request through the client's
    limits; `describe(error)` says what went wrong in words, and whether trying later could help."""

    def __init__(
        self,
        answer_key: tuple[str, str, str, str],
        ping: Callable[[float, str], Awaitable[None]],
        describe: Callable[[BaseException], tuple[str, bool]],
        timeout_seconds: float,
    ):
        self._key, self._ping, self._describe, self._timeout = answer_key, ping, describe, timeout_seconds
        self._lock = asyncio.Lock()
        self._probed = False

    async def check(self, kind: str) -> None:
        """One tiny request before the first real one, so a dead endpoint fails in seconds, with its name.

        A refused connection or a 429/5xx is tried three times over a few seconds; a timeout twice, each
        with 0.9 of the request timeout, so a hanging endpoint fails in under twice the request timeout.
        """
        async with self._lock:
            answered = _ANSWERED.get((*self._key, kind))
            if self._probed or (answered and time.monotonic() - answered < _ANSWER_FRESH_SECONDS):
                self._probed = True
                return
            for key in (self._key[:2], (*self._key, kind)):
                failed_at, error = _PROBE_FAILED.get(key, (-math.inf, None))
                if error is not None and time.monotonic() - failed_at < _ANSWER_FRESH_SECONDS:
                    raise error
            for attempt in range(_PROBE_ATTEMPTS):
                try:
                    await self._ping(0.9 * self._timeout, kind, attempt)
                    _ANSWERED[(*self._key, kind)] = time.monotonic()
                    break
                except openai.BadRequestError:
                    break  # the endpoint and model answered; they only disliked the probe's parameters
                except openai.OpenAIError as error:
                    timed_out = isinstance(error, openai.APITimeoutError)
                    if not retryable(error) or attempt == _PROBE_ATTEMPTS - 1 or (timed_out and attempt == 1):
                        message, can_retry = self._describe(error)
                        broken = EndpointError(message, can_retry)
                        key = self._key[:2] if unreachable(error) else (*self._key, kind)
                        _PROBE_FAILED[key] = (time.monotonic(), broken)
                        raise broken from None
                    if not timed_out:
                        await asyncio.sleep(min(retry_after_seconds(error) or 0.5 * 2**attempt, 5.0))
            self._probed = True
