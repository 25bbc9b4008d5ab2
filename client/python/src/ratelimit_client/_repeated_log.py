"""A log that does not repeat itself: an event seen on every request (the service unreachable,
a misspelt limit name) writes one line, then at most one line per interval, which counts the
repeats it held back."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Hashable, List, Tuple

DEFAULT_INTERVAL = 10.0
"""Seconds between two lines of the same event."""

MAX_EVENTS = 1024
"""Distinct events tracked at once; past that, further events share one line per interval."""

_OVERFLOW = ("other events",)


class RepeatedLog:
    """Writes `message` for an event (`key`) the first time it happens; repeats of the same key
    within `interval` seconds of its last line are counted, not written, and the next line of
    that key says how many were held back ("... (repeated 41 more times in the last 10s)").

    Thread safety: thread-safe."""

    def __init__(self, logger: logging.Logger, interval: float = DEFAULT_INTERVAL,
                 monotonic: Callable[[], float] = time.monotonic):
        self._logger = logger
        self._interval = interval
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # key -> [monotonic time of its last line, repeats held back since]
        self._events: Dict[Hashable, List[float]] = {}

    def log(self, level: int, key: Hashable, message: str) -> None:
        now = self._monotonic()
        with self._lock:
            key = self._tracked(key, now)
            event = self._events.get(key)
            if event is not None and now - event[0] < self._interval:
                event[1] += 1
                return
            held_back, since = (0, 0.0) if event is None else (int(event[1]), now - event[0])
            self._events[key] = [now, 0]
        if held_back and key is _OVERFLOW:
            message = "%s (and %d more events of other kinds in the last %.0fs)" % (
                message, held_back, since)
        elif held_back:
            message = "%s (repeated %d more times in the last %.0fs)" % (message, held_back,
                                                                         since)
        self._logger.log(level, "%s", message)

    def _tracked(self, key: Hashable, now: float) -> Hashable:
        """`key`, or the shared overflow key when MAX_EVENTS recent events are tracked (events
        whose last line is older than the interval are forgotten first, with the repeats they
        held back)."""
        if key in self._events or len(self._events) < MAX_EVENTS:
            return key
        expired: List[Tuple[Hashable, List[float]]] = [
            (k, e) for k, e in self._events.items() if now - e[0] >= self._interval]
        for k, _ in expired:
            del self._events[k]
        return key if len(self._events) < MAX_EVENTS else _OVERFLOW
