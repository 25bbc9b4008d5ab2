"""Concurrency leases against a fake of the lease calls (lease_fake.py): the calls, the held
lease's context managers (release on exit and on exception), its heartbeat on the fake clock,
lost-lease detection, and lease(wait=...); list_leases of an inline limit on a real server."""
from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest

from conftest import ADMIN_TOKEN, FakeClock, eventually
from lease_fake import FakeLeases
from ratelimit_client import (HEARTBEAT_FRACTION, AsyncRateLimitClient, DenyReason, Kind,
                              LeaseDenied, LeaseLost, LeaseState, LimitConfig, LimitSource,
                              RateLimitClient, UnavailableError)


@pytest.fixture
def fake():
    f = FakeLeases(capacity=1)
    try:
        yield f
    finally:
        f.stop()


def test_acquire_sends_the_request_and_a_denial_is_a_value(fake):
    with RateLimitClient(fake.target) as client:
        r = client.acquire("jobs", "t1", 1, ttl=2, request_id="req-1", holder="pod-a")
        assert r.allowed and r and r.denied_by is None and not r.replayed
        assert r.lease.holder == "pod-a" and r.lease.count == 1 and r.lease.name == "jobs"
        assert r.lease.expires_at - r.lease.acquired_at == timedelta(seconds=2)
        assert r.results[0].value == 0 and r.results[0].capacity == 1
        sent = fake.acquires[0]
        assert sent.request_id == "req-1" and sent.ttl.ToTimedelta() == timedelta(seconds=2)
        d = client.acquire("jobs", "t1")
        assert not d.allowed and not d and d.lease is None and d.denied_by == 0
        assert d.reason == DenyReason.NO_FREE_SLOTS
        assert timedelta(seconds=1) < d.retry_after <= timedelta(seconds=2)
        assert not fake.acquires[1].HasField("ttl") and not fake.acquires[1].limits[0].HasField("count")


def test_release_extend_and_list_leases(fake):
    fake.capacity = 3
    config = LimitConfig.concurrency(3, lease_ttl=timedelta(seconds=5))
    with RateLimitClient(fake.target, admin_token="tok") as client:
        lease = client.acquire("jobs", "k", 2, config=config).lease
        sent = fake.acquires[0].limits[0].config
        assert sent.kind == Kind.CONCURRENCY and not sent.HasField("period")
        assert sent.capacity == 3 and sent.lease_ttl.ToTimedelta() == timedelta(seconds=5)
        e = client.extend("jobs", "k", lease.id, ttl=timedelta(minutes=1), config=config)
        assert e.state == LeaseState.HELD and e.lease.expires_at > lease.expires_at
        assert fake.extends[0].config.capacity == 3
        listed = client.list_leases("jobs", "k")
        assert listed.held == 2 and listed.capacity == 3
        assert [l.id for l in listed.leases] == [lease.id]
        assert ("authorization", "Bearer tok") in fake.list_metadata[0]
        r = client.release("jobs", "k", lease.id, config=config)
        assert r.state == LeaseState.RELEASED and r.held == 0
        assert client.release("jobs", "k", lease.id).state == LeaseState.NOT_HELD
        assert client.extend("jobs", "k", lease.id).state == LeaseState.NOT_HELD


def test_list_leases_pages(fake):
    fake.capacity = 3
    with RateLimitClient(fake.target, admin_token="tok") as client:
        ids = [client.acquire("jobs", "k").lease.id for _ in range(3)]
        first = client.list_leases("jobs", "k", page_size=2)
        assert first.held == 3 and len(first.leases) == 2 and first.next_page_token
        assert fake.lists[0].page_size == 2 and fake.lists[0].page_token == ""
        rest = client.list_leases("jobs", "k", page_size=2, page_token=first.next_page_token)
        assert fake.lists[1].page_token == first.next_page_token
        assert len(rest.leases) == 1 and rest.next_page_token == ""
        assert [l.id for l in first.leases + rest.leases] == ids


def test_list_leases_of_an_inline_limit_sends_source_inline(server):
    # As acquire, release and extend: a config names an inline limit, without source=.
    config = LimitConfig.concurrency(2)

    async def list_async():
        async with AsyncRateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
            return await client.list_leases("jobs", "k", config=config)

    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        lease = client.acquire("jobs", "k", config=config).lease
        for listed in (client.list_leases("jobs", "k", config=config), asyncio.run(list_async())):
            assert listed.held == 1 and listed.capacity == 2
            assert [(l.id, l.source) for l in listed.leases] == [(lease.id, LimitSource.INLINE)]


def test_list_leases_with_a_config_sends_source_inline_to_any_server(fake):
    # What is sent, whatever a server would take: INLINE with a config, else the source given.
    config = LimitConfig.concurrency(3)
    with RateLimitClient(fake.target) as client:
        client.list_leases("jobs", "k", config=config)
        client.list_leases("jobs", "k", source=LimitSource.INLINE, config=config)
        client.list_leases("jobs", "k")
    assert [(r.source, r.HasField("config")) for r in fake.lists] == [
        (LimitSource.INLINE, True), (LimitSource.INLINE, True), (LimitSource.LIMITS_FILE, False)]


async def _list_async(target):
    async with AsyncRateLimitClient(target, admin_token="tok") as client:
        return await client.list_leases("jobs", "k", page_size=1, page_token="1")


def test_async_list_leases_pages(fake):
    fake.capacity = 3
    with RateLimitClient(fake.target) as client:
        ids = [client.acquire("jobs", "k").lease.id for _ in range(3)]
    page = asyncio.run(_list_async(fake.target))
    assert [l.id for l in page.leases] == [ids[1]] and page.next_page_token == "2"
    assert fake.lists[0].page_size == 1 and fake.lists[0].page_token == "1"


def test_with_lease_releases_on_exit_and_on_exception(fake):
    with RateLimitClient(fake.target) as client:
        with client.lease("jobs", "k") as lease:
            assert fake.held("jobs", "k") == 1 and lease.id
            assert not lease.lost.is_set() and not lease.released
        assert fake.held("jobs", "k") == 0 and lease.released
        assert [r.lease_id for r in fake.releases] == [lease.id]
        with pytest.raises(RuntimeError, match="work failed"):
            with client.lease("jobs", "k"):
                assert fake.held("jobs", "k") == 1
                raise RuntimeError("work failed")
        assert fake.held("jobs", "k") == 0 and len(fake.releases) == 2


def test_a_denied_lease_raises_lease_denied_with_retry_after(fake):
    with RateLimitClient(fake.target) as client:
        with client.lease("jobs", "k", ttl=10):
            with pytest.raises(LeaseDenied) as info:
                with client.lease("jobs", "k"):
                    raise AssertionError("entered without a slot")
        assert info.value.reason == DenyReason.NO_FREE_SLOTS
        assert timedelta(seconds=9) < info.value.retry_after <= timedelta(seconds=10)
        assert len(fake.releases) == 1  # the denied lease released nothing


def test_the_heartbeat_extends_every_third_of_the_ttl_until_exit(fake):
    clock = FakeClock()
    with RateLimitClient(fake.target, clock=clock) as client:
        with client.lease("jobs", "k", ttl=30) as lease:
            first = lease.info.expires_at
            eventually(lambda: lease.extensions >= 3, what="three extends")
            assert clock.sleeps[0] == pytest.approx(30 * HEARTBEAT_FRACTION)
            assert fake.extends[0].lease_id == lease.id
            assert fake.extends[0].ttl.ToTimedelta() == timedelta(seconds=30)
            assert lease.info.expires_at > first and not lease.lost.is_set()
        count = len(fake.extends)
        assert fake.held("jobs", "k") == 0
        assert len(fake.extends) == count  # the thread was joined: no extend after the exit


def test_an_extend_answering_not_held_loses_the_lease(fake):
    fake.extend_state = LeaseState.NOT_HELD
    with RateLimitClient(fake.target, clock=FakeClock()) as client:
        with client.lease("jobs", "k", ttl=30) as lease:
            assert lease.lost.wait(10)
            assert lease.lost_reason == "extend answered NOT_HELD"
            with pytest.raises(LeaseLost, match="NOT_HELD"):
                lease.raise_if_lost()
            assert len(fake.extends) == 1


def test_extends_failing_until_the_expiry_lose_the_lease(fake):
    fake.extend_error = grpc.StatusCode.UNAVAILABLE
    clock = FakeClock()
    with RateLimitClient(fake.target, clock=clock) as client:
        with client.lease("jobs", "k", ttl=30) as lease:
            assert lease.lost.wait(10)
            # Lost when the next extend would come after the expiry: after the second failure,
            # at two thirds of the TTL on the fake clock.
            assert len(fake.extends) == 2 and clock.slept == pytest.approx(20)
            assert "every extend failed" in lease.lost_reason
            assert "UNAVAILABLE" in lease.lost_reason


def test_lease_wait_retries_until_a_slot_frees(fake):
    holder = RateLimitClient(fake.target)
    held = holder.acquire("jobs", "k", ttl=30).lease

    class ReleasingClock(FakeClock):
        """Releases the other holder's lease during the third sleep."""

        def sleep(self, seconds, cancel=None):
            if len(self.sleeps) == 2:
                holder.release("jobs", "k", held.id)
            return super().sleep(seconds, cancel)

    clock = ReleasingClock()
    with RateLimitClient(fake.target, clock=clock) as client:
        with client.lease("jobs", "k", wait=5, heartbeat=0):
            assert fake.held("jobs", "k") == 1
    assert clock.sleeps == [0.05, 0.1, 0.2] and len(fake.acquires) == 5
    holder.close()


def test_lease_wait_gives_up_after_wait(fake):
    with RateLimitClient(fake.target) as holder:
        holder.acquire("jobs", "k", ttl=0.5)
        clock = FakeClock()
        with RateLimitClient(fake.target, clock=clock) as client:
            with pytest.raises(LeaseDenied):
                client.lease("jobs", "k", wait=2).acquire()
        # Each sleep is at most the denial's retry_after (about 0.5 s) and the whole wait 2 s
        # (less the real time the calls took: the fake clock counts it too).
        assert 1.5 < clock.slept <= 2
        assert max(clock.sleeps) <= 0.5


def test_async_with_lease_releases_on_exit_on_exception_and_extends(fake):
    clock = FakeClock()

    async def main():
        async with AsyncRateLimitClient(fake.target, clock=clock) as client:
            async with client.lease("jobs", "k", ttl=30) as lease:
                assert fake.held("jobs", "k") == 1
                for _ in range(1000):
                    if lease.extensions >= 3:
                        break
                    await asyncio.sleep(0.001)
                assert lease.extensions >= 3 and not lease.lost.is_set()
                assert fake.extends[0].ttl.ToTimedelta() == timedelta(seconds=30)
            assert fake.held("jobs", "k") == 0 and lease.released
            count = len(fake.extends)
            await asyncio.sleep(0.01)
            assert len(fake.extends) == count  # the heartbeat task was cancelled
            with pytest.raises(RuntimeError):
                async with client.lease("jobs", "k"):
                    raise RuntimeError("work failed")
            assert fake.held("jobs", "k") == 0 and len(fake.releases) == 2
            with pytest.raises(LeaseDenied):
                async with client.lease("jobs", "k"), client.lease("jobs", "k"):
                    pass
            assert fake.held("jobs", "k") == 0

    asyncio.run(main())


def test_async_lost_lease_sets_the_event(fake):
    fake.extend_state = LeaseState.NOT_HELD

    async def main():
        async with AsyncRateLimitClient(fake.target, clock=FakeClock()) as client:
            async with client.lease("jobs", "k", ttl=30) as lease:
                await asyncio.wait_for(lease.lost.wait(), 10)
                with pytest.raises(LeaseLost):
                    lease.raise_if_lost()

    asyncio.run(main())


def test_a_failed_acquire_raises_the_service_error(fake):
    fake.acquire_error = grpc.StatusCode.UNAVAILABLE
    with RateLimitClient(fake.target) as client:
        with pytest.raises(UnavailableError):
            client.acquire("jobs", "k")
        with pytest.raises(UnavailableError):
            with client.lease("jobs", "k"):
                pass
