"""64 concurrent callers against one key never get more than the limit allows: over an interval
T a token bucket admits at most capacity + rate*T/period (+ max_reserved for reservations)."""
from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

from ratelimit_client import AsyncRateLimitClient, Kind, LimitConfig, RateLimitClient

CALLERS = 64
ATTEMPTS = 15
RATE = 5.0  # tokens per second: the test's own duration refills a few
CAPACITY = 10.0
MAX_RESERVED = 7.0


def _bound(elapsed_s: float, extra: float = 0.0) -> float:
    return CAPACITY + extra + RATE * elapsed_s


def test_64_threads_consuming_one_key(server):
    config = LimitConfig(Kind.TOKEN_BUCKET, rate=RATE, period=timedelta(seconds=1),
                         capacity=CAPACITY)
    granted = []
    errors = []
    start_line = threading.Barrier(CALLERS + 1)
    with RateLimitClient(server.target, timeout=30) as client:

        def caller():
            start_line.wait()
            mine = 0
            try:
                for _ in range(ATTEMPTS):
                    if client.consume("burst", "one-key", config=config).allowed:
                        mine += 1
            except Exception as e:  # reported below: the test must not pass on errors
                errors.append(e)
            granted.append(mine)

        threads = [threading.Thread(target=caller) for _ in range(CALLERS)]
        for t in threads:
            t.start()
        start = time.monotonic()  # T starts before the first call can be made...
        start_line.wait()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start  # ...and ends after the last answer
    assert not errors, errors[:3]
    assert len(granted) == CALLERS
    total = sum(granted)
    assert CAPACITY <= total <= _bound(elapsed), (total, elapsed)


def test_64_tasks_consuming_and_reserving_one_key(server):
    config = LimitConfig(Kind.TOKEN_BUCKET, rate=RATE, period=timedelta(seconds=1),
                         capacity=CAPACITY, max_reserved=MAX_RESERVED)

    async def main():
        async with AsyncRateLimitClient(server.target, timeout=30) as client:
            async def caller(i):
                mine = 0
                for _ in range(ATTEMPTS):
                    call = client.reserve if i % 2 else client.consume
                    if (await call("burst", "one-key", config=config)).allowed:
                        mine += 1
                return mine

            start = time.monotonic()
            granted = await asyncio.gather(*(caller(i) for i in range(CALLERS)))
            return sum(granted), time.monotonic() - start

    total, elapsed = asyncio.run(main())
    assert CAPACITY <= total <= _bound(elapsed, MAX_RESERVED), (total, elapsed)
