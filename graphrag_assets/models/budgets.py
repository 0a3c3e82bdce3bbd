"""Requests and tokens per minute, counted as providers count them: over the last minute, shared by the process.

A provider refuses the request that would make more than its limit in any 60-second window. Per-second
slices of that budget (a leaky bucket) both under-use it and, at a window's edge, exceed it; a moving
window (the `limits` package) spends exactly the budget. Budgets are shared by every client of the same
endpoint and model in this process, so the chat and embedding steps and the steps of one run draw on
one budget, and a step that starts knows what the last one spent.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

_storage = MemoryStorage()
_limiter = MovingWindowRateLimiter(_storage)
_lock = threading.Lock()
_budgets: dict[tuple, Budget] = {}


# The moving window keeps one entry per unit spent: a large token budget is counted in blocks, so that
# a window holds at most this many entries. What a cost leaves over a whole block is carried to the next one:
# rounding every cost up made a 2M-token budget count a 300-token reply as 400, and spend a fifth less than it
# allowed (benchmark.py limits).
_MAX_ENTRIES = 10_000


class Unlimited:
    """No budget configured: the endpoint's own headers pace the calls (pacing.py)."""

    async def spend(self, cost: int) -> bool:
        return False


class Budget:
    """At most `amount` units (requests or tokens) in any `window_seconds`."""

    def __init__(self, name: str, amount: int, window_seconds: float):
        self.name = name
        self.amount = int(amount)
        self.block = max(1, int(amount) // _MAX_ENTRIES)
        self.blocks = max(1, int(amount) // self.block)
        # A request is counted here before it is sent and there when it arrives: a window 5% longer keeps
        # the two counts from meeting at the window's edge.
        self._item = RateLimitItemPerSecond(self.blocks, math.ceil(window_seconds * 1.05))
        self._carried = 0  # units spent that make no whole block yet
        self._carry_lock = threading.Lock()

    async def spend(self, cost: int) -> bool:
        """Wait until `cost` more units fit in the window, then count them (a cost above the budget counts as it).
        True when it had to wait: the budget, not the requests in flight, is what holds the calls back."""
        blocks, waited = self._carry(cost), False
        while blocks and not _limiter.hit(self._item, self.name, cost=blocks):
            waited = True
            stats = _limiter.get_window_stats(self._item, self.name)
            await asyncio.sleep(min(max(stats.reset_time - time.time(), 0.01), 1.0))
        return waited

    def count(self, cost: int) -> None:
        """Count `cost` units without waiting (they were spent already); what does not fit is dropped."""
        blocks = self._carry(cost)
        if blocks:
            _limiter.hit(self._item, self.name, cost=blocks)

    def spent(self) -> int:
        """Units counted in the current window."""
        return (self.blocks - _limiter.get_window_stats(self._item, self.name).remaining) * self.block

    def catch_up(self, used: int) -> None:
        """The endpoint says `used` units are spent in its window: count what this budget has not."""
        if used <= 0:
            return
        counted = self.spent() // self.block
        missing = self._blocks(used) - counted
        if missing > 0:
            _limiter.hit(self._item, self.name, cost=min(missing, self.blocks - counted))

    def _blocks(self, cost: int) -> int:
        return max(1, min(-(-int(cost) // self.block), self.blocks))

    def _carry(self, cost: int) -> int:
        """Whole blocks of `cost` and of what earlier costs left over; the rest is carried to the next cost."""
        with self._carry_lock:
            units = int(cost) + self._carried
            blocks = min(units // self.block, self.blocks)
            self._carried = units - blocks * self.block if blocks < self.blocks else 0
        return blocks


def budget(endpoint: str, model: str, unit: str, amount: int | None, window_seconds: float) -> Budget | Unlimited:
    """The process-wide budget of one endpoint and model for `unit` ("requests" or "tokens")."""
    if not amount:
        return Unlimited()
    key = (endpoint, model, unit, int(amount), window_seconds)
    with _lock:
        if key not in _budgets:
            _budgets[key] = Budget("|".join(map(str, key)), amount, window_seconds)
        return _budgets[key]
