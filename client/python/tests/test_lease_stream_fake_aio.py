"""lease_stream=True of the asyncio client against in-process fakes (lease_stream_fake.py): results
out of order matched to their ops, a stream that ends (its waiting ops raise UNAVAILABLE, the
next op opens another), a server without LeaseStream (unary calls from then on, logged once), a
timed-out op, close() with ops in flight, the heartbeat of `async with client.lease(...)` and
the ASGI middleware's in-flight slots sent as stream ops."""
from __future__ import annotations

import asyncio
import logging
import time

import grpc
import pytest

from call_count import CountAsyncCalls
from lease_fake import FakeLeases
from lease_stream_fake import FakeLeaseStream, OldServer
from ratelimit_client import (AsyncRateLimitClient, DeadlineExceededError, LeaseState,
                              LimitConfig, RateLimitError, UnavailableError)
from ratelimit_client.asgi import RateLimitMiddleware
from test_asgi import App, request


@pytest.fixture
def fake():
    f = FakeLeaseStream(capacity=1)
    try:
        yield f
    finally:
        f.stop()


def run(main, timeout=30):
    asyncio.run(asyncio.wait_for(main(), timeout))


async def wait_ops(fake, kind, n):
    """fake.wait_ops off the event loop (it blocks on a condition)."""
    return await asyncio.get_running_loop().run_in_executor(None, fake.wait_ops, kind, n)


async def raised(call):
    try:
        await call
    except Exception as e:
        return e
    raise AssertionError("no exception")


def test_results_out_of_order_are_matched_to_their_ops(fake):
    fake.answer_after = 3

    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
            results = await asyncio.gather(*(
                client.acquire("jobs", "k%d" % i, holder="h%d" % i) for i in range(3)))
            assert client._lease_stream.opened == 1
        for i, result in enumerate(results):
            assert result.allowed, result
            assert (result.lease.key, result.lease.holder) == ("k%d" % i, "h%d" % i)

    run(main)
    sent = [op_id for _, op_id in fake.ops]
    assert len(sent) == 3 and fake.answered == sent[::-1]


def test_a_stream_that_ends_fails_its_waiting_ops_and_the_next_op_opens_another(fake):
    fake.silent = True

    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
            first = asyncio.ensure_future(raised(client.acquire("jobs", "a")))
            assert await wait_ops(fake, "acquire", 1)
            fake.end_stream = (grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
            ended = await raised(client.release("jobs", "a", "0" * 31 + "1"))
            for error, method in ((await first, "Acquire"), (ended, "Release")):
                assert isinstance(error, UnavailableError), error
                assert error.details == "the server is shutting down"
                assert error.method == method
            fake.silent = False
            result = await client.acquire("jobs", "b")
            assert result.allowed and result.lease.key == "b"
            assert client._lease_stream.opened == 2

    run(main)
    assert fake.streams == 2


def test_a_server_without_lease_stream_turns_the_client_to_unary_calls(caplog):
    fake = FakeLeases(capacity=10)
    old = OldServer(fake)

    async def main():
        async with AsyncRateLimitClient(old.target, lease_stream=True, timeout=10) as client:
            results = await asyncio.gather(*(
                client.acquire("jobs", "k", holder=str(i)) for i in range(10)))
            assert all(r.allowed for r in results), results
            lease = results[0].lease
            assert (await client.extend("jobs", "k", lease.id)).state == LeaseState.HELD
            assert (await client.release("jobs", "k", lease.id)).state == LeaseState.RELEASED
            assert client._lease_stream.unary and client._lease_stream.opened == 1

    try:
        with caplog.at_level(logging.WARNING, logger="ratelimit_client"):
            run(main)
        assert old.count("LeaseStream") == 1
        assert (old.count("Acquire"), old.count("Extend"), old.count("Release")) == (10, 1, 1)
        logged = [r for r in caplog.records if "LeaseStream" in r.getMessage()]
        assert len(logged) == 1 and "UNIMPLEMENTED" in logged[0].getMessage()
    finally:
        old.stop()
        fake.stop()


def test_a_timed_out_op_raises_promptly_and_its_late_result_is_discarded(fake):
    fake.silent = True

    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
            started = time.monotonic()
            error = await raised(client.acquire("jobs", "late", timeout=0.2))
            assert time.monotonic() - started < 2.0
            assert isinstance(error, DeadlineExceededError) and error.method == "Acquire"
            assert error.details == "Deadline Exceeded"
            fake.silent = False
            result = await client.acquire("jobs", "next")
            assert result.allowed and result.lease.key == "next"
            assert client._lease_stream.opened == 1
            assert not client._lease_stream._session.pending  # nothing left behind

    run(main)
    assert fake.answered[-1] == fake.ops[0][1]


def test_close_fails_the_ops_in_flight_and_waits_for_the_streams_tasks(fake):
    fake.silent = True
    fake.linger = True  # the stream goes on after the client half-closes it, unless cancelled

    async def main():
        client = AsyncRateLimitClient(fake.target, lease_stream=True, timeout=10)
        waiting = asyncio.ensure_future(raised(client.acquire("jobs", "k")))
        assert await wait_ops(fake, "acquire", 1)
        stream = client._lease_stream
        tasks = list(stream._tasks)
        assert len(tasks) == 2  # the reader and the writer
        started = time.monotonic()
        await asyncio.wait_for(stream.close(), 5)  # as the client's close() does
        assert all(t.done() for t in tasks) and not stream._tasks  # it waited for them
        await client.close()
        error = await waiting
        assert time.monotonic() - started < 2.0
        assert isinstance(error, RateLimitError) and error.code == grpc.StatusCode.CANCELLED
        assert error.details == "the client is closed"

    run(main)


def test_ops_queued_meanwhile_go_out_together_at_most_1000_a_message(fake):
    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True, timeout=30) as client:
            # The 1500 tasks queue their ops before the writer task first runs.
            results = await asyncio.gather(*(
                client.release("jobs", "k", "%032x" % (i + 1)) for i in range(1500)))
            assert all(r.state == LeaseState.NOT_HELD for r in results)

    run(main)
    assert fake.messages == [1000, 500]


def test_the_heartbeat_of_a_held_lease_goes_on_the_stream(fake):
    counter = CountAsyncCalls()

    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True,
                                        interceptors=[counter]) as client:
            async with client.lease("jobs", "k", ttl=0.6) as lease:  # extended every 0.2 s
                assert await wait_ops(fake, "extend", 2)
                assert not lease.lost.is_set()
            assert fake.count("acquire") == 1 and fake.count("release") == 1
            assert client._lease_stream.opened == 1

    run(main)
    assert fake.held("jobs", "k") == 0
    assert not {"Acquire", "Release", "Extend"} & set(counter.calls), counter.calls


def test_leaving_the_block_abandons_an_extend_in_flight_on_the_stream(fake):
    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
            async with client.lease("jobs", "k", ttl=0.3) as lease:
                fake.hold_kinds = {"extend"}
                assert await wait_ops(fake, "extend", fake.count("extend") + 1)
                started = time.monotonic()
            assert time.monotonic() - started < 2.0
            assert lease.released and not lease.lost.is_set()

    run(main)
    assert fake.count("release") == 1


def test_the_asgi_middlewares_in_flight_slots_go_on_the_stream(fake):
    counter = CountAsyncCalls()

    async def main():
        async with AsyncRateLimitClient(fake.target, lease_stream=True,
                                        interceptors=[counter]) as client:
            app = RateLimitMiddleware(App(), client, None, in_flight="inflight",
                                      in_flight_config=LimitConfig.concurrency(2))
            for _ in range(3):
                status, _, body = await request(app)
                assert (status, body) == (200, b"ok")
            assert client._lease_stream.opened == 1

    run(main)
    assert fake.count("acquire") == 3 and fake.count("release") == 3
    assert fake.held("inflight", "10.0.0.1") == 0
    assert not counter.calls, counter.calls
