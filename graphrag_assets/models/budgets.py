"""Requests and tokens per minute, counted as providers count them: over the last minute, shared by every process.

A provider refuses the request that would make more than its limit in any 60-second window. Per-second
slices of that budget (a leaky bucket) both under-use it and, at a window's edge, exceed it; a moving
window spends exactly the budget. Budgets are shared by every client of the same endpoint and model:
in one process (the chat and embedding steps of an in-process run), and across processes through a SQLite
file (`ModelSettings.rate_limits_file`), where a run launched from the UI runs each step in a process of its
own. With budgets counted per process, two steps each paced by the endpoint's headers learnt of the other's
requests a reply late and counted them as spent from then on, a minute too long: a run used 70% of the
limit (benchmark.py limits). `limits` keeps its moving windows in memory or in a server (Redis, Memcached,
MongoDB), and pyrate-limiter's SQLite bucket stores a row per unit: a 2M-token budget would hold 2M rows.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_lock = threading.Lock()
_ledgers: dict[str, SpentLedger] = {}


class SpentLedger:
    """What each budget spent and when: one row per cost, and a running total per budget (so a check reads one
    row, not a minute of them). `path` None keeps it in this process."""

    def __init__(self, path: str | None, clock=time.time):
        # Wall-clock time, not monotonic: processes sharing the file must read the same clock. A test passes its own.
        self._clock = clock
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level None: transactions are ours (BEGIN IMMEDIATE), so a check and its count are one step
        self._db = sqlite3.connect(path or ":memory:", timeout=30, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        try:
            if path:
                self._db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
                self._db.execute("PRAGMA synchronous=OFF")  # a crash loses at most the window's last minute
            with self._transaction():
                self._db.execute("CREATE TABLE IF NOT EXISTS spent (budget TEXT, at REAL, units INTEGER)")
                self._db.execute("CREATE INDEX IF NOT EXISTS spent_by_budget ON spent (budget, at)")
                self._db.execute("CREATE TABLE IF NOT EXISTS totals (budget TEXT PRIMARY KEY, units INTEGER)")
        except sqlite3.DatabaseError as error:
            raise RuntimeError(
                f"{path}: not a rate-limits ledger ({error}); delete it (it holds only the last minute's spending)"
            ) from None

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def spend(self, budget: str, amount: int, window: float, cost: int, wait: bool) -> float:
        """Count `cost` if it fits in the window; 0.0 when counted, else the seconds until some of the window frees.
        `wait=False` counts what fits at once and drops the rest. A cost above the whole budget counts as the budget
        once the window is empty."""
        now = self._clock()
        with self._transaction():
            total = self._expire(budget, now - window)
            fits = min(cost, amount - total) if not wait else (cost if total + cost <= amount else 0)
            if wait and not fits and total == 0:
                fits = amount
            if fits > 0:
                self._add(budget, now, fits, total)
                return 0.0
            if not wait:
                return 0.0
            (oldest,) = self._db.execute("SELECT min(at) FROM spent WHERE budget = ?", (budget,)).fetchone()
            return max((oldest or now) + window - now, 0.01)  # never 0.0, which means counted

    def catch_up(self, budget: str, amount: int, window: float, used: int) -> None:
        """Someone says `used` units are spent in the window: count what is not counted yet, as far as it fits."""
        now = self._clock()
        with self._transaction():
            total = self._expire(budget, now - window)
            missing = min(used, amount) - total
            if missing > 0:
                self._add(budget, now, missing, total)

    def spent(self, budget: str, window: float) -> int:
        """Units counted in the window."""
        since = self._clock() - window
        with self._lock:
            (total,) = self._db.execute(
                "SELECT coalesce(sum(units), 0) FROM spent WHERE budget = ? AND at >= ?", (budget, since)
            ).fetchone()
        return int(total)

    def _expire(self, budget: str, since: float) -> int:
        """Drop what left the window; the total that is left."""
        (gone,) = self._db.execute(
            "SELECT coalesce(sum(units), 0) FROM spent WHERE budget = ? AND at < ?", (budget, since)
        ).fetchone()
        if gone:
            self._db.execute("DELETE FROM spent WHERE budget = ? AND at < ?", (budget, since))
            self._db.execute("UPDATE totals SET units = units - ? WHERE budget = ?", (gone, budget))
        row = self._db.execute("SELECT units FROM totals WHERE budget = ?", (budget,)).fetchone()
        return int(row[0]) if row else 0

    def _add(self, budget: str, at: float, units: int, total: int) -> None:
        self._db.execute("INSERT INTO spent VALUES (?, ?, ?)", (budget, at, units))
        self._db.execute(
            "INSERT INTO totals VALUES (?, ?) ON CONFLICT (budget) DO UPDATE SET units = excluded.units",
            (budget, total + units),
        )


def ledger(path: str | None) -> SpentLedger:
    """The process's connection to the ledger at `path` (None: one kept in this process)."""
    key = str(Path(path).resolve()) if path else ""
    with _lock:
        if key not in _ledgers:
            _ledgers[key] = SpentLedger(key or None)
        return _ledgers[key]


class Unlimited:
    """No budget configured: the endpoint's own headers pace the calls (pacing.py)."""

    async def spend(self, cost: int) -> bool:
        return False


class Budget:
    """At most `amount` units (requests or tokens) in any `window_seconds`, counted in `spent_in`."""

    def __init__(self, name: str, amount: int, window_seconds: float, spent_in: SpentLedger, sleep=asyncio.sleep):
        self.name = name
        self._sleep = sleep  # a test passes one that moves its own clock
        # The ledger is a file: it keeps a digest, never the endpoint's URL (which may hold credentials).
        self._key = hashlib.sha256(name.encode()).hexdigest()[:32]
        self.amount = int(amount)
        # A request is counted here before it is sent and there when it arrives: a window 5% longer keeps
        # the two counts from meeting at the window's edge.
        self._window = math.ceil(window_seconds * 1.05)
        self._ledger = spent_in

    async def spend(self, cost: int) -> bool:
        """Wait until `cost` more units fit in the window, then count them. True when it had to wait: the budget,
        not the requests in flight, is what holds the calls back."""
        waited = False
        while cost > 0:
            seconds = self._ledger.spend(self._key, self.amount, self._window, int(cost), wait=True)
            if not seconds:
                return waited
            waited = True
            await self._sleep(min(max(seconds, 0.01), 1.0))
        return waited

    def count(self, cost: int) -> None:
        """Count `cost` units without waiting (they were spent already); what does not fit is dropped."""
        if cost > 0:
            self._ledger.spend(self._key, self.amount, self._window, int(cost), wait=False)

    def spent(self) -> int:
        """Units counted in the current window."""
        return self._ledger.spent(self._key, self._window)

    def catch_up(self, used: int) -> None:
        """The endpoint says `used` units are spent in its window: count what no client of it has yet."""
        if used > 0:
            self._ledger.catch_up(self._key, self.amount, self._window, int(used))


def budget(
    endpoint: str, model: str, unit: str, amount: int | None, window_seconds: float, shared_file: str | None = None
) -> Budget | Unlimited:
    """The budget of one endpoint and model for `unit` ("requests" or "tokens"), shared through `shared_file`."""
    if not amount:
        return Unlimited()
    name = "|".join(map(str, (endpoint, model, unit, int(amount), window_seconds)))
    return Budget(name, amount, window_seconds, ledger(shared_file))
