"""asyncio.run that a Ctrl-C always stops.

While a step runs, Dagster's SIGINT handler raises its interrupt in whatever the main thread runs at that moment.
When that is one of the event loop's callbacks (a socket read, a future's done-callback), asyncio logs the error
and carries on: the interrupt is lost and the step runs to its end (seen: `index` ended 0 after Ctrl-C). asyncio's
own handler cannot be lost that way, as it only cancels the main task; so it is in place while the loop runs, and
the handler it stood in for gets the interrupt once the loop has stopped.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_interruptibly(coroutine: Coroutine[Any, Any, T]) -> T:
    handler = signal.getsignal(signal.SIGINT)
    if (
        not callable(handler)
        or handler is signal.default_int_handler
        or threading.current_thread() is not threading.main_thread()
    ):
        return asyncio.run(coroutine)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio.run takes over only the default handler
    try:
        return asyncio.run(coroutine)
    except KeyboardInterrupt:
        handler(signal.SIGINT, None)  # raises as it would have (in a step: Dagster's interrupt)
        raise
    finally:
        signal.signal(signal.SIGINT, handler)
