"""Pacing without being told the limits: the endpoint's rate-limit headers, and a concurrency that adapts.

OpenAI, Azure OpenAI and vLLM answer every request with `x-ratelimit-limit|remaining|reset-requests`
and the same three for tokens. `EndpointPace` keeps what the latest of them said and holds a request
back only when the endpoint's remaining budget, less what was sent since, would not cover it; it then
waits until the endpoint said the budget resets. An endpoint that sends no headers is never held back.

`AdaptiveConcurrency` finds how many requests to keep in flight (additive increase, multiplicative
decrease, as TCP does): one more per round of replies while latency holds and no 429 comes, half as many
on a 429, a tenth fewer while the time per completion token stays above twice the best seen. The few asyncio AIMD
packages on the registry are young one-person releases; this is forty lines we can read.
"""

from __future__ import annotations

import asyncio
import math
import re
import statistics
import threading
import time
from collections import deque
from collections.abc import Mapping

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_SCALE = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_WAIT_SECONDS = 120.0


def parse_reset(value: str | None) -> float | None:
    """Seconds in a reset header: "6m0s", "12ms", "1.5s", or a bare number of seconds."""
    if not value:
        return None
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or "".join(a + b for a, b in parts) != value:
        return None
    return sum(float(amount) * _SCALE[unit] for amount, unit in parts)


class _Allowance:
    """What the endpoint last said of one budget (requests or tokens), and what was sent since."""

    def __init__(self) -> None:
        self.sent = 0  # units sent in this process, ever
        self.limit: int | None = None
        self.remaining: int | None = None
        self.sent_when_observed = 0
        self.reset_at = 0.0
        self.reset_seconds = 0.0

    def shortfall(self, cost: int, now: float) -> float:
        """Seconds to wait before `cost` more units fit (0 when they fit or nothing is known)."""
        if self.remaining is None:
            return 0.0
        if now >= self.reset_at:
            if not self.limit:
                return 0.0
            # The endpoint said its budget is whole again by now: spend it, but no more than it.
            self.remaining, self.sent_when_observed = self.limit, self.sent
            self.reset_at = now + max(self.reset_seconds, 1.0)
        available = self.remaining - (self.sent - self.sent_when_observed)
        return 0.0 if available >= min(cost, self.limit or cost) else self.reset_at - now

    def observe(self, limit: int | None, remaining: int, reset_seconds: float, sent_with: int) -> None:
        """`sent_with`: units sent up to and including the request this reply answers."""
        now = time.monotonic()
        if self.remaining is not None and now < self.reset_at:
            # Requests reach the endpoint out of order: a reply may not count others sent before it. Within
            # one period, believe only news that leaves less to spend.
            if remaining - (self.sent - sent_with) >= self.remaining - (self.sent - self.sent_when_observed):
                self.reset_at = max(self.reset_at, now + min(reset_seconds, _MAX_WAIT_SECONDS))
                return
        self.limit, self.remaining, self.sent_when_observed = limit, remaining, sent_with
        self.reset_seconds = min(reset_seconds, _MAX_WAIT_SECONDS)
        self.reset_at = now + self.reset_seconds


class EndpointPace:
    """The rate-limit state of one endpoint and model, shared by every client of them in the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests = _Allowance()
        self._tokens = _Allowance()
        self.heard = False  # whether the endpoint has sent rate-limit headers at all

    async def admit(self, tokens: int) -> tuple[int, int]:
        """Wait until the endpoint's budgets cover one request of `tokens`; returns what `observe` needs."""
        while True:
            with self._lock:
                now = time.monotonic()
                wait = max(self._requests.shortfall(1, now), self._tokens.shortfall(tokens, now))
                if wait <= 0:
                    self._requests.sent += 1
                    self._tokens.sent += tokens
                    return self._requests.sent, self._tokens.sent
            await asyncio.sleep(min(wait, 1.0))

    def observe(self, headers: Mapping[str, str] | None, ticket: tuple[int, int]) -> None:
        """Take in a reply's rate-limit headers (of any status, a 429 included)."""
        if not headers:
            return
        with self._lock:
            for unit, allowance, sent_with in zip(("requests", "tokens"), (self._requests, self._tokens), ticket):
                remaining = _number(headers.get(f"x-ratelimit-remaining-{unit}"))
                reset = parse_reset(headers.get(f"x-ratelimit-reset-{unit}"))
                if remaining is None or reset is None:
                    continue
                allowance.observe(_number(headers.get(f"x-ratelimit-limit-{unit}")), remaining, reset, sent_with)
                self.heard = True


def _number(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


class AdaptiveConcurrency:
    """A semaphore whose size moves between 1 and `ceiling` with what the endpoint's replies show."""

    def __init__(self, start: int, ceiling: int, adaptive: bool = True):
        self.ceiling = max(1, ceiling)
        self.limit = float(min(max(1, start), self.ceiling)) if adaptive else float(self.ceiling)
        self.adaptive = adaptive
        self.in_flight = 0
        self.peak = 0
        self._changed = asyncio.Condition()
        self._recent: deque[float] = deque(maxlen=20)
        self._best = math.inf
        self._last_seconds = 0.0
        self._last_decrease = -math.inf

    async def __aenter__(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < int(self.limit))
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    async def __aexit__(self, *exc) -> None:
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()

    def succeeded(self, seconds: float, completion_tokens: int) -> None:
        if not self.adaptive:
            return
        self._last_seconds = seconds
        # Seconds per completion token (+50 for the prompt's share) over the last 20 replies: what a
        # queueing endpoint makes climb, steady enough to compare with the best seen.
        self._recent.append(seconds / (completion_tokens + 50))
        if len(self._recent) == self._recent.maxlen:
            typical = statistics.median(self._recent)
            self._best = min(self._best, typical)
            if typical > 2 * self._best:
                self._decrease(0.9)
                return
        if self.in_flight >= int(self.limit) - 1:  # only a limit that is reached has shown it holds
            self.limit = min(self.ceiling, self.limit + 1 / self.limit)

    def rate_limited(self) -> None:
        if self.adaptive:
            self._decrease(0.5)

    def _decrease(self, factor: float) -> None:
        # One cut per round trip: the replies of requests sent before a cut tell of the old limit.
        now = time.monotonic()
        if now - self._last_decrease >= max(self._last_seconds, 0.05):
            self.limit = max(1.0, self.limit * factor)
            self._last_decrease = now
