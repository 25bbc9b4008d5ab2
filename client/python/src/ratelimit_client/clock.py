"""The clock reserve_and_wait reads and sleeps on. The clients take one (`clock=`); the default
is the real one. A test passes a fake whose sleeps move its time instead of waiting."""
from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timezone
from typing import Optional


class Clock:
    """The real clock: wall time (aware UTC), a monotonic reading in seconds, and sleeps.

    Thread safety: stateless; share one."""

    def now(self) -> datetime:
        """The wall-clock time, an aware UTC datetime (compared with a reservation's retry_at)."""
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (measures waits and bounds)."""
        return time.monotonic()

    def sleep(self, seconds: float, cancel: Optional[threading.Event] = None) -> bool:
        """Blocks for `seconds`, or until `cancel` is set; True when `cancel` ended the wait."""
        if cancel is None:
            time.sleep(seconds)
            return False
        return cancel.wait(seconds)

    async def sleep_async(self, seconds: float) -> None:
        """Sleeps in the running event loop (a cancellation of the task interrupts it)."""
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = Clock()
