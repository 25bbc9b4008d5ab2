"""A lease TTL (acquire, extend, lease) under 1 ms (0 included), negative or not finite is refused
as a ValueError naming `ttl` and the value given, before any call: the server takes 1 ms at
least and keeps whole microseconds, so a sub-microsecond TTL would be sent as 0 (a real
server)."""
from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import grpc
import pytest

from call_count import CountCalls
from ratelimit_client import AsyncRateLimitClient, LimitConfig, RateLimitClient

JOBS = LimitConfig.concurrency(2)


# Under 1 ms (0 too: the server refuses it; 100 ns would be sent as 0), negative, or not finite.
BAD_TTLS = [0, 0.0, timedelta(0), 0.0005, 1e-7, -1, -0.5, timedelta(microseconds=999),
            timedelta(seconds=-1), float("nan"), float("inf")]


@pytest.mark.parametrize("ttl", BAD_TTLS, ids=repr)
def test_a_ttl_under_1ms_or_negative_is_refused_naming_ttl_before_any_call(server, ttl):
    count = CountCalls()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), count)
    named = r"^ttl: .*got %s$" % re.escape(repr(ttl))
    with RateLimitClient(channel=channel) as client:
        with pytest.raises(ValueError, match=named):
            client.acquire("jobs", "t", config=JOBS, ttl=ttl)
        with pytest.raises(ValueError, match=named):
            client.extend("jobs", "t", "some-lease", config=JOBS, ttl=ttl)
        with pytest.raises(ValueError, match=named):
            client.lease("jobs", "t", config=JOBS, ttl=ttl)

    async def aio():
        async with AsyncRateLimitClient(server.target) as client:
            with pytest.raises(ValueError, match=named):
                await client.acquire("jobs", "t", config=JOBS, ttl=ttl)
            with pytest.raises(ValueError, match=named):
                await client.extend("jobs", "t", "some-lease", config=JOBS, ttl=ttl)
            with pytest.raises(ValueError, match=named):
                client.lease("jobs", "t", config=JOBS, ttl=ttl)

    asyncio.run(aio())
    assert count.calls == {}, "a bad ttl was sent: %s" % count.calls


def test_a_ttl_of_1ms_is_sent(server):
    with RateLimitClient(server.target) as client:
        for ttl in (0.001, timedelta(milliseconds=1)):
            result = client.acquire("jobs", "t", config=JOBS, ttl=ttl)
            assert result.allowed and result.lease is not None
