"""How far a long step is: items done and left, failures, model calls and tokens so far, and the time left."""

from __future__ import annotations

import time
from collections.abc import Callable

# Set by the CLI: progress lines go to the terminal too, which otherwise shows nothing while a step works.
PROGRESS_TO_TERMINAL = "GRAPHRAG_PROGRESS_TO_TERMINAL"


class Progress:
    """Counts the finished items of one step and says how far it is at most every `every_seconds`, and at the end.

    `usage` is anything with `calls`, `prompt_tokens` and `completion_tokens` (a model client's running usage).
    """

    def __init__(
        self,
        what: str,
        total: int,
        report: Callable[[str], None],
        usage: object | None = None,
        every_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.what, self.total, self.report, self.usage = what, total, report, usage
        self.every_seconds, self.clock = every_seconds, clock
        self.started = self.last = clock()
        self.done = self.failed = 0

    def advance(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += failed
        now = self.clock()
        if self.done == self.total or now - self.last >= self.every_seconds:
            self.last = now
            self.report(self.line(now))

    def line(self, now: float) -> str:
        parts = [f"{self.what}: {self.done}/{self.total}", f"{self.failed} failed"]
        if self.usage is not None:
            tokens = self.usage.prompt_tokens + self.usage.completion_tokens
            parts.append(f"{self.usage.calls} model calls, {tokens:,} tokens")
        elapsed = now - self.started
        # The first replies include the step's start and a cold connection: a rate from one or two of them
        # promised a first run hours it never took. Estimate once a tenth of the items (up to 20) are done.
        if self.done < self.total and self.done >= min(20, max(3, self.total // 10)) and elapsed > 0:
            parts.append(f"about {(self.total - self.done) * elapsed / self.done:.0f} s left")
        elif self.done == self.total:
            parts.append(f"done in {elapsed:.0f} s")
        return ", ".join(parts)
