"""A held lease's heartbeat at its edges, against the fake of the lease calls (lease_fake.py) and
on the fake clock: a replayed lease extended at once, a hung extend given up by the lease's
expiry, a heartbeat longer than the TTL brought before the expiry, leaving the block while an
extend hangs, a client closed under a held lease (lost at once, on the real clock), and
heartbeat/wait values refused before any call."""
from __future__ import annotations

import asyncio
import logging
import math
import re
import threading

import grpc
import pytest

from call_count import CallOutcomes
from conftest import FakeClock, eventually
from lease_fake import FakeLeases
from ratelimit_client import AsyncRateLimitClient, LeaseLost, RateLimitClient


@pytest.fixture
def fake():
    f = FakeLeases(capacity=1)
    try:
        yield f
    finally:
        f.stop()


def test_a_replayed_lease_is_extended_at_once(fake):
    with RateLimitClient(fake.target) as client:
        first = client.acquire("jobs", "k", ttl=30, request_id="job-42").lease
    fake.expire_in(first.id, 5)  # the retry comes when a sixth of the first lease is left
    clock = FakeClock()
    with RateLimitClient(fake.target, clock=clock) as client:
        with client.lease("jobs", "k", ttl=30, request_id="job-42") as lease:
            assert lease.result.replayed and lease.id == first.id
            eventually(lambda: lease.extensions >= 1, what="an extend")
            assert clock.sleeps[0] == 0 and not lease.lost.is_set()


def test_an_async_replayed_lease_is_extended_at_once(fake):
    clock = FakeClock()

    async def main():
        async with AsyncRateLimitClient(fake.target, clock=clock) as client:
            first = (await client.acquire("jobs", "k", ttl=30, request_id="job-43")).lease
            fake.expire_in(first.id, 5)
            async with client.lease("jobs", "k", ttl=30, request_id="job-43") as lease:
                assert lease.result.replayed and lease.id == first.id
                while lease.extensions < 1:
                    await asyncio.sleep(0.001)
                assert clock.sleeps[0] == 0 and not lease.lost.is_set()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_hung_extend_is_given_up_by_the_leases_expiry(fake):
    fake.extend_hang = True
    with RateLimitClient(fake.target, timeout=5, clock=FakeClock()) as client:
        with client.lease("jobs", "k", ttl=0.6) as lease:
            eventually(lambda: fake.extend_deadlines, what="an extend")
            # The extend at a third of the TTL may wait for what is left of the lease, not for
            # the client's 5 s timeout.
            assert fake.extend_deadlines[0] <= 0.6
            assert lease.lost.wait(10)
            assert "DEADLINE_EXCEEDED" in lease.lost_reason


def test_an_async_hung_extend_is_given_up_by_the_leases_expiry(fake):
    fake.extend_hang = True

    async def main():
        async with AsyncRateLimitClient(fake.target, timeout=5, clock=FakeClock()) as client:
            async with client.lease("jobs", "k", ttl=0.6) as lease:
                await asyncio.wait_for(lease.lost.wait(), 10)
                assert fake.extend_deadlines[0] <= 0.6
                assert "DEADLINE_EXCEEDED" in lease.lost_reason

    asyncio.run(main())


def test_a_heartbeat_longer_than_the_ttl_extends_before_the_expiry(fake):
    clock = FakeClock()
    with RateLimitClient(fake.target, clock=clock) as client:
        with client.lease("jobs", "k", ttl=30, heartbeat=100) as lease:
            eventually(lambda: lease.extensions >= 2, what="two extends")
            # At half the time left, not at the heartbeat (after the lease's expiry).
            assert max(clock.sleeps[:2]) < 30 and not lease.lost.is_set()

    async def main():
        async with AsyncRateLimitClient(fake.target, clock=clock) as client:
            async with client.lease("jobs", "k", ttl=30, heartbeat=100) as lease:
                while lease.extensions < 2:
                    await asyncio.sleep(0.001)
                assert max(clock.sleeps[-2:]) < 30 and not lease.lost.is_set()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_leaving_the_block_abandons_a_hung_extend(fake):
    fake.extend_hang = True
    outcomes = CallOutcomes()
    channel = grpc.intercept_channel(grpc.insecure_channel(fake.target), outcomes)
    with RateLimitClient(channel=channel, timeout=30, clock=FakeClock()) as client:
        with client.lease("jobs", "k", ttl=30):
            eventually(lambda: fake.extends, what="an extend in flight")
        # The exit cancelled the extend (its deadline is 20 s away) before releasing.
        eventually(lambda: outcomes.codes.get("Extend"), what="the extend's end")
        assert outcomes.codes["Extend"] == [grpc.StatusCode.CANCELLED]
        assert outcomes.codes["Release"] == [grpc.StatusCode.OK]
        assert fake.held("jobs", "k") == 0


def test_closing_the_client_loses_a_held_lease_and_the_exit_logs(fake, caplog, monkeypatch):
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    client = RateLimitClient(fake.target, clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger="ratelimit_client"):
        with client.lease("jobs", "k", ttl=30) as lease:
            client.close()
            assert lease.lost.wait(10)
            assert "client was closed" in lease.lost_reason
    assert not raised, "the heartbeat thread raised: %s" % raised
    assert "could not release lease %s" % lease.id in caplog.text


def test_closing_the_async_client_loses_a_held_lease_and_the_exit_logs(fake, caplog):
    async def main():
        client = AsyncRateLimitClient(fake.target, clock=FakeClock())
        async with client.lease("jobs", "k", ttl=30) as lease:
            await client.close()
            await asyncio.wait_for(lease.lost.wait(), 10)
            assert "client was closed" in lease.lost_reason
        return lease

    with caplog.at_level(logging.WARNING, logger="ratelimit_client"):
        lease = asyncio.run(main())
    assert "could not release lease %s" % lease.id in caplog.text


def test_close_loses_every_lease_of_the_client_at_once_without_a_call(fake):
    # On the real clock: the heartbeats' next extends are 10 s away, yet the leases are lost
    # when close() returns, their heartbeats end and nothing more is sent. Another client's
    # lease is not touched.
    fake.capacity = 3
    client = RateLimitClient(fake.target)
    with RateLimitClient(fake.target) as other:
        with client.lease("jobs", "k", ttl=30) as beating, \
                client.lease("jobs", "k", ttl=30, heartbeat=0) as quiet, \
                other.lease("jobs", "k", ttl=30) as kept:
            client.close()
            for lease in (beating, quiet):
                assert lease.lost.is_set() and lease.lost_reason == "the client was closed"
                with pytest.raises(LeaseLost, match="client was closed"):
                    lease.raise_if_lost()
            beating._thread.join(10)
            assert not beating._thread.is_alive()
            assert not kept.lost.is_set() and kept.lost_reason is None
    assert fake.extends == []
    assert [r.lease_id for r in fake.releases] == [kept.id]  # the closed client sent none


def test_closing_the_async_client_loses_its_leases_at_once_without_a_call(fake):
    fake.capacity = 3

    async def main():
        client = AsyncRateLimitClient(fake.target)
        async with AsyncRateLimitClient(fake.target) as other:
            async with client.lease("jobs", "k", ttl=30) as beating, \
                    client.lease("jobs", "k", ttl=30, heartbeat=0) as quiet, \
                    other.lease("jobs", "k", ttl=30) as kept:
                await client.close()
                for lease in (beating, quiet):
                    assert lease.lost.is_set()
                    assert lease.lost_reason == "the client was closed"
                assert beating._task.done()
                assert not kept.lost.is_set() and kept.lost_reason is None
        return kept

    kept = asyncio.run(asyncio.wait_for(main(), 10))
    assert fake.extends == []
    assert [r.lease_id for r in fake.releases] == [kept.id]


BAD = [-1, -0.001, math.nan, math.inf, "1", True]


@pytest.mark.parametrize("field", ["heartbeat", "wait"])
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_negative_or_not_finite_heartbeat_or_wait_is_refused(fake, field, value):
    named = r"^%s: .*got %s$" % (field, re.escape(repr(value)))
    with RateLimitClient(fake.target) as client:
        with pytest.raises(ValueError, match=named):
            client.lease("jobs", "k", **{field: value})

    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            with pytest.raises(ValueError, match=named):
                client.lease("jobs", "k", **{field: value})

    asyncio.run(main())
    assert not fake.acquires
