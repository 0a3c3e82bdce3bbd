"""A run's budget in dollars, which its requests can never pass, however many are in flight and in however many
processes (a run launched from the UI runs each step in a process of its own).

Before a request is sent, its worst case (its prompt, and the most completion tokens it may be answered with, at
the model's price) is reserved; when the reply comes, the reservation becomes what it really cost. A request
whose worst case does not fit in what is left is not sent: `BudgetReached`. The reservations live in a SQLite
file, one row per run, changed in one transaction each, as the rate-limit ledger's are.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from .errors import EndpointError
from .prices import Price


class BudgetReached(EndpointError):
    def __init__(self, limit: float, spent: float):
        self.limit, self.spent = limit, spent
        super().__init__(self.saying(), retryable=False)

    def saying(self, how_far: str = "") -> str:
        """The one line a user reads; `how_far` is where the step got ("40 of 89 text units extracted")."""
        return (
            f"budget of ${self.limit:,.4f} reached after ${self.spent:,.4f}"
            + (f", {how_far}" if how_far else "")
            + ": the next request could pass it, so it was not sent. What was paid is kept (the replies are "
            "cached); run it again with a higher budget (--budget, or the run's graphrag/max_cost_usd tag) to go "
            "on, and only what is missing is paid for"
        )


def micro_dollars(dollars: float) -> int:
    """Dollars as whole millionths, rounded up: amounts are added and taken away as integers, so a ledger whose
    requests all settled holds exactly nothing in reserve (floats left 2.8e-18, and a stop waited on it for ever).
    The same float always gives the same integer, so settling takes away exactly what reserving held."""
    return math.ceil(round(dollars * 1_000_000, 3))


class SpendingBudget:
    """The budget `key` (a run's id, a question's) of `limit` dollars; `path` None keeps it in this process."""

    def __init__(self, key: str, limit: float, path: str | None):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.key, self.limit = key, limit
        self._limit = micro_dollars(limit)
        # Without a file, one database in memory that every client of this process shares (the chat and embedding
        # clients of one question), for as long as one of them is open.
        target, uri = (path, False) if path else ("file:graphrag-spending?mode=memory&cache=shared", True)
        self._db = sqlite3.connect(target, timeout=30, isolation_level=None, check_same_thread=False, uri=uri)
        self._lock = threading.Lock()
        if path:
            self._db.execute("PRAGMA journal_mode=WAL")
        # Micro-dollars, as integers (a file of an older version keeps its float table, unused).
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS spending (key TEXT PRIMARY KEY, spent INTEGER NOT NULL, "
            "reserved INTEGER NOT NULL)"
        )

    def _change(self, reserve: int, spend: int, check: bool) -> tuple[int, int] | None:
        """Reserve and spend (micro-dollars), unless `check` finds the reservation does not fit: then (spent,
        reserved) as they are, and nothing is changed."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # the check and the change are one step for every process
            try:
                row = self._db.execute("SELECT spent, reserved FROM spending WHERE key = ?", (self.key,)).fetchone()
                spent, reserved = row or (0, 0)
                if check and spent + reserved + reserve > self._limit:
                    self._db.execute("ROLLBACK")
                    return spent, reserved
                self._db.execute(
                    "INSERT OR REPLACE INTO spending VALUES (?, ?, ?)", (self.key, spent + spend, reserved + reserve)
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return None

    async def reserve(self, worst: float) -> None:
        """Hold `worst` dollars for a request about to be sent. When they do not fit while other requests hold
        some, wait for those to settle (they cost less than they held, mostly); when they do not fit with none
        held, or could not fit even if every one held were settled for nothing, raise BudgetReached."""
        held = micro_dollars(worst)
        while (refused := self._change(held, 0, check=True)) is not None:
            spent, reserved = refused
            if reserved == 0 or spent + held > self._limit:
                raise BudgetReached(self.limit, spent / 1_000_000)
            await asyncio.sleep(0.05)

    def settle(self, reserved: float, actual: float) -> None:
        """The request that held `reserved` cost `actual`."""
        self._change(-micro_dollars(reserved), micro_dollars(actual), check=False)

    def spent(self) -> float:
        return self.ledger()[0] / 1_000_000

    def ledger(self) -> tuple[int, int]:
        """(spent, reserved) in micro-dollars."""
        with self._lock:
            row = self._db.execute("SELECT spent, reserved FROM spending WHERE key = ?", (self.key,)).fetchone()
        return row or (0, 0)

    def close(self) -> None:
        self._db.close()


class RunCost:
    """A client's side of the budget: each request's worst case held before it is sent, and settled when its reply
    says what it cost. Without a budget (`spending` None) nothing is held and every amount is 0.0. When a request's
    worst case does not fit, `stop` is told, so that every request still waiting stops too."""

    def __init__(self, spending: SpendingBudget | None, price: Price | None, stop: Callable[[EndpointError], None]):
        self.spending, self.price, self._stop = spending, price, stop

    def reserve(self, prompt_tokens: int, max_tokens: int, batch: bool = False) -> Awaitable[float]:
        """Hold the request's worst case: our count of the prompt, with room for the endpoint's own (message
        framing), and every token it may answer (`max_tokens`; 0 for embeddings)."""
        prompt = int(prompt_tokens * 1.1) + 50
        return self.hold(lambda price: price.cost(prompt, max_tokens, *((prompt, max_tokens) if batch else (0, 0))))

    async def hold(self, worst_of: Callable[[Price], float]) -> float:
        if self.spending is None:
            return 0.0
        worst = worst_of(self.price)
        try:
            await self.spending.reserve(worst)
        except BudgetReached as reached:
            self._stop(reached)
            raise
        return worst

    def settle(self, reserved: float, actual: float) -> None:
        if self.spending is not None:
            self.spending.settle(reserved, actual)

    def cost(self, reserved: float, prompt_tokens: int, completion_tokens: int, batch: bool = False) -> float:
        """What a reply cost, when a budget holds (0.0 without one, as nothing was reserved)."""
        if not reserved:
            return 0.0
        batched = (prompt_tokens, completion_tokens) if batch else ()
        return self.price.cost(prompt_tokens, completion_tokens, *batched)

    def close(self) -> None:
        if self.spending is not None:
            self.spending.close()
