"""Pacing without being told the limits: the endpoint's rate-limit headers, and a concurrency that adapts.

OpenAI, Azure OpenAI and vLLM answer every request with `x-ratelimit-limit|remaining|reset-requests`
and the same three for tokens. `EndpointPace` turns the limits they announce into moving-window budgets
of our own (budgets.py) over the endpoint's window (a minute unless configured), so requests are held
back before the endpoint would refuse them, and never longer: a budget frees as the requests it counts
leave the window, where waiting for the announced reset would leave most of a minute unused. When the
endpoint says less remains than we counted (another client shares the key, or it counts differently),
the difference is counted too. An endpoint that sends no headers is paced by its 429s alone.

`AdaptiveConcurrency` finds how many requests to keep in flight (additive increase, multiplicative
decrease, as TCP does): one more per round of replies while latency holds and no 429 comes, half as many
on a 429, a tenth fewer while the time per completion token stays above twice the best seen. Where the
endpoint announces its limits, it starts at once from the requests in flight those limits sustain at the
latency seen (rate x latency), and its ceiling is twice that. The few
asyncio AIMD packages on the registry are young one-person releases; this is forty lines we can read.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Mapping

from .budgets import Budget, ledger

_lock = threading.Lock()
_paces: dict[tuple, EndpointPace] = {}


class EndpointPace:
    """The limits one endpoint and model announce, as budgets shared by every client of them: in the process, and
    through `shared_file` by the other processes on the machine (a UI-launched run's steps, other runs)."""

    def __init__(self, name: str, window_seconds: float, shared_file: str | None = None):
        self._name = name
        self._window = window_seconds
        self._ledger = ledger(shared_file)
        self._budgets: dict[str, Budget] = {}
        self._lock = threading.Lock()

    async def admit(self, tokens: int) -> bool:
        """Wait until one more request of `tokens` fits what the endpoint announced; True when it had to wait."""
        waited = False
        for unit, cost in (("requests", 1), ("tokens", tokens)):
            budget = self._budgets.get(unit)
            if budget is not None:
                waited |= await budget.spend(cost)
        return waited

    def limits_per_second(self) -> dict[str, float]:
        """What the endpoint announced it allows, per second: {"requests": ..., "tokens": ...} as far as known."""
        return {unit: budget.amount / self._window for unit, budget in self._budgets.items()}

    def count_completion(self, tokens: int) -> None:
        """A reply's tokens count against the endpoint's token limit too, once known."""
        budget = self._budgets.get("tokens")
        if budget is not None and tokens:
            budget.count(tokens)

    def observe(self, headers: Mapping[str, str] | None) -> None:
        """Take in a reply's rate-limit headers (of any status, a 429 included)."""
        if not headers:
            return
        for unit in ("requests", "tokens"):
            limit = _number(headers.get(f"x-ratelimit-limit-{unit}"))
            if not limit:
                continue
            with self._lock:
                budget = self._budgets.get(unit)
                if budget is None or budget.amount != limit:
                    budget = Budget(f"{self._name}|announced {unit}", limit, self._window, self._ledger)
                    self._budgets[unit] = budget
            remaining = _number(headers.get(f"x-ratelimit-remaining-{unit}"))
            if remaining is not None:
                budget.catch_up(limit - remaining)


def endpoint_pace(endpoint: str, model: str, window_seconds: float, shared_file: str | None = None) -> EndpointPace:
    """The process-wide record of what one endpoint and model announced of their limits."""
    with _lock:
        key = (endpoint, model, window_seconds, shared_file)
        if key not in _paces:
            _paces[key] = EndpointPace("|".join(map(str, key[:3])), window_seconds, shared_file)
        return _paces[key]


def _number(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


# Without a ceiling of the user's, the ceiling is twice the requests in flight the limits can sustain, within these
# bounds: 64 (what an endpoint that announces nothing gets) to what the HTTP client's connection pool holds.
DERIVED_CEILING_FLOOR = 64
DERIVED_CEILING_CAP = 1000


def sustainable_concurrency(limits_per_second: Mapping[str, float], seconds: float, tokens: float) -> float | None:
    """Requests in flight that use the limits in full (Little's law: rate x latency), for requests that take
    `seconds` and `tokens` each; None when no limit is known."""
    costs = {"requests": 1.0, "tokens": max(tokens, 1.0)}
    rooms = [rate / costs[unit] * seconds for unit, rate in limits_per_second.items() if unit in costs and rate]
    return min(rooms) if rooms else None


class TypicalRequest:
    """The seconds and tokens of a request, as a moving average over the replies: steady enough to size the pool
    by, quick to follow a change of step. `room` is what the tightest known limit sustains at them: `announced`,
    the endpoint's own (per second), or `configured`, ours, whichever is lower."""

    def __init__(self, configured: Mapping[str, float]):
        self.configured = dict(configured)
        self.typical: tuple[float, float] | None = None

    def room(self, seconds: float, tokens: int, announced: dict[str, float]) -> float | None:
        if self.typical is None:
            self.typical = (seconds, float(tokens))
        else:
            self.typical = tuple(0.9 * old + 0.1 * new for old, new in zip(self.typical, (seconds, tokens)))
        for unit, rate in self.configured.items():
            announced[unit] = min(rate, announced.get(unit, rate))
        return sustainable_concurrency(announced, *self.typical)


class AdaptiveConcurrency:
    """A semaphore whose size moves between 1 and `ceiling` with what the endpoint's replies show.

    `ceiling=None` derives it from the endpoint's announced limits and its latency (`succeeded(room=...)`). While
    the limits leave room and nothing has said otherwise, the size goes straight to that room when a reply comes
    with every slot in use: at 5 s a reply, growing by one per round trip from 8 to 200 would take a quarter of an
    hour, and doubling per round trip half a minute of every step. A 429 or a climbing latency ends that for good.
    A wait on the announced budget does not: the budget, shared by every process on the machine (budgets.py), holds
    each request to what fits, and once a step running beside this one finishes, the room it leaves is used at
    once. When a wait ended it, the step left alone grew back by one per round trip and used two thirds of the
    limit for a minute (benchmark.py limits).
    """

    def __init__(self, start: int, ceiling: int | None, adaptive: bool = True, clock=time.monotonic):
        self._clock = clock  # a test drives a simulated endpoint with a clock of its own
        self.derived = ceiling is None
        self.ceiling = DERIVED_CEILING_FLOOR if ceiling is None else max(1, ceiling)
        self.limit = float(min(max(1, start), self.ceiling)) if adaptive else float(self.ceiling)
        self.adaptive = adaptive
        self._starting = True
        self.in_flight = 0
        self._changed = asyncio.Condition()
        self._recent: deque[float] = deque(maxlen=20)  # recent replies' latency against the best of their size
        self._by_size: dict[int, deque[float]] = {}  # recent latencies per reply size (half an octave of tokens)
        self._best: dict[int, float] = {}  # the lowest median latency seen per reply size
        self._last_seconds = 0.0
        self._last_decrease = -math.inf
        self._budget_bound_at = -math.inf

    async def __aenter__(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < int(self.limit))
            self.in_flight += 1

    async def __aexit__(self, *exc) -> None:
        async with self._changed:
            self.in_flight -= 1
            # Wake only as many waiters as there are free slots: waking all of thousands of queued requests on
            # every reply made a large corpus's extraction quadratic in its chunks (benchmark.py scale).
            self._changed.notify(max(0, int(self.limit) - self.in_flight))

    def succeeded(self, seconds: float, completion_tokens: int, room: float | None = None) -> None:
        """A reply came after `seconds`; `room`: the requests in flight the announced limits sustain (or None)."""
        if room is not None and self.derived:
            self.ceiling = int(min(DERIVED_CEILING_CAP, max(DERIVED_CEILING_FLOOR, 2 * room)))
            if not self.adaptive:
                self.limit = float(self.ceiling)
        if not self.adaptive:
            return
        self._last_seconds = seconds
        if self._slower(seconds, completion_tokens) > 2:
            self._decrease(0.9)
            return
        if self.in_flight >= int(self.limit) - 1:  # only a limit that is reached has shown it holds
            if self._starting and room is not None and self.limit < room:
                self.limit = min(self.ceiling, room)
            else:
                self.limit = min(self.ceiling, self.limit + 1 / self.limit)

    def _slower(self, seconds: float, completion_tokens: int) -> float:
        """How many times slower than the best seen the last 20 replies came, each against replies of its size
        (median; 0 until known). A queueing endpoint makes this climb. Per size, because one ratio for all sizes
        does not hold: a reply of 3 tokens costs the fixed time of a request, one of 300 mostly its tokens, and a
        step that moves from the one to the other (claims, then their gleaning) looked like a queue."""
        size = int(2 * math.log2(completion_tokens + 1))
        recent = self._by_size.setdefault(size, deque(maxlen=20))
        recent.append(seconds)
        if len(recent) >= 5:  # a median, not one lucky reply, sets the best
            self._best[size] = min(self._best.get(size, math.inf), statistics.median(recent))
        if size in self._best:
            self._recent.append(seconds / max(self._best[size], 0.001))  # no endpoint answers in under a millisecond
        return statistics.median(self._recent) if len(self._recent) == self._recent.maxlen else 0.0

    def constrained(self) -> None:
        """A request waited for the announced budget: the limit, not the requests in flight, is what binds now."""
        self._budget_bound_at = self._clock()

    def rate_limited(self) -> None:
        """A 429 halves the requests in flight, unless a request waited for the announced budget within the last
        round trip: then that budget is what binds and the pace already waits for it, and the 429 says only that
        another client (a step running beside this one) spent some of what the headers announced. Halving then
        left concurrency, not the limit, binding for minutes, as it grows back by one per round trip."""
        if not self.adaptive:
            return
        if self._clock() - self._budget_bound_at <= max(self._last_seconds, 1.0):
            return
        self._decrease(0.5)

    def _decrease(self, factor: float) -> None:
        self._starting = False
        # One cut per round trip: the replies of requests sent before a cut tell of the old limit.
        now = self._clock()
        if now - self._last_decrease >= max(self._last_seconds, 0.05):
            self.limit = max(1.0, self.limit * factor)
            self._last_decrease = now
