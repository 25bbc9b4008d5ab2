"""lease_stream=True against the real server: acquire, extend and release answer as the unary
calls do (denials, replays, NOT_HELD included), an invalid op raises exactly the unary call's
exception (the same field named), many threads and tasks share one stream without ever holding
more than the capacity, and close() leaves no thread or task of the stream running."""
from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from call_count import CountAsyncCalls, CountCalls
from conftest import eventually
from ratelimit_client import (AsyncRateLimitClient, InvalidArgumentError, LeaseState, Limit,
                              LimitConfig, RateLimitClient, ResourceExhaustedError)

CAPACITY_2 = LimitConfig.concurrency(2)
CAPACITY_10 = LimitConfig.concurrency(10)
STREAM_THREAD = "ratelimit-lease-stream"


def counted_client(target, **kwargs):
    """A RateLimitClient whose unary calls are counted (counter.calls, by method)."""
    counter = CountCalls()
    channel = grpc.intercept_channel(grpc.insecure_channel(target), counter)
    return RateLimitClient(channel=channel, **kwargs), counter


def shape(result):
    """What an answer says, without what differs between two leases (ids, keys, times)."""
    if result is None:
        return None
    out = {}
    for field in ("allowed", "state", "held", "reason", "denied_by", "replayed"):
        if hasattr(result, field):
            out[field] = getattr(result, field)
    if hasattr(result, "retry_after"):
        out["retry_after"] = result.retry_after is not None
    lease = getattr(result, "lease", None)
    out["lease"] = None if lease is None else (lease.name, lease.source, lease.count,
                                               lease.holder)
    out["results"] = [(r.name, r.allowed, r.value, r.capacity, r.reason)
                      for r in getattr(result, "results", ())]
    return out


def errors_of(call):
    """The exception `call` raises, as (type, code, details, field, method)."""
    with pytest.raises(InvalidArgumentError) as e:
        call()
    return type(e.value), e.value.code, e.value.details, e.value.field, e.value.method


def lease_story(client, key):
    """Every kind of answer of the three calls, in order, as shapes."""
    out = []
    first = client.acquire("jobs", key, config=CAPACITY_2, ttl=30, holder="worker-1",
                           request_id="req-" + key)
    out.append(shape(first))
    out.append(shape(client.acquire("jobs", key, config=CAPACITY_2, ttl=30,
                                    holder="worker-1", request_id="req-" + key)))  # replayed
    second = client.acquire("jobs", key, config=CAPACITY_2, holder="worker-2")
    out.append(shape(second))
    out.append(shape(client.acquire("jobs", key, config=CAPACITY_2)))  # denied: no free slot
    lease_id = first.lease.id
    out.append(shape(client.extend("jobs", key, lease_id, ttl=20, config=CAPACITY_2)))
    out.append(shape(client.release("jobs", key, lease_id, config=CAPACITY_2)))
    out.append(shape(client.release("jobs", key, lease_id, config=CAPACITY_2)))  # NOT_HELD
    out.append(shape(client.extend("jobs", key, lease_id, config=CAPACITY_2)))  # NOT_HELD
    out.append(shape(client.release("jobs", key, second.lease.id, config=CAPACITY_2)))
    return out


def test_stream_answers_as_the_unary_calls(server):
    with RateLimitClient(server.target) as unary:
        expected = lease_story(unary, "unary")
    client, counter = counted_client(server.target, lease_stream=True)
    with client:
        assert lease_story(client, "stream") == expected
        assert client._lease_stream.opened == 1 and not client._lease_stream.unary
    # Not one unary lease call was sent: every op went on the stream.
    assert not {"Acquire", "Release", "Extend"} & set(counter.calls), counter.calls
    assert expected[1]["replayed"] and not expected[3]["allowed"]
    assert expected[6]["state"] == LeaseState.NOT_HELD


def invalid_calls(client):
    """Ops the server refuses, each naming a field."""
    held = client.acquire("jobs", "bad", config=CAPACITY_2)
    return [
        errors_of(lambda: client.release("jobs", "bad", "zz", config=CAPACITY_2)),
        errors_of(lambda: client.extend("jobs", "bad", "zz", config=CAPACITY_2)),
        errors_of(lambda: client.acquire("jobs", "bad", config=CAPACITY_2, holder="a\nb")),
        errors_of(lambda: client.extend("jobs", "bad", held.lease.id, config=CAPACITY_2,
                                        ttl=7200)),
    ]


def test_an_invalid_op_raises_the_unary_calls_exception(server):
    with RateLimitClient(server.target) as unary:
        expected = invalid_calls(unary)
    with RateLimitClient(server.target, lease_stream=True) as client:
        assert invalid_calls(client) == expected
        # An op's error does not end the stream.
        assert client.acquire("jobs", "after", config=CAPACITY_2).allowed
        assert client._lease_stream.opened == 1
    assert [e[3] for e in expected] == ["lease_id", "lease_id", "holder", "ttl"]


def test_an_op_too_large_for_a_stream_message_is_sent_as_the_unary_call(server):
    limits = [Limit("r%d" % i, "k" * 1024) for i in range(70)]  # about 72 KiB
    with RateLimitClient(server.target) as unary:
        with pytest.raises(ResourceExhaustedError) as expected:
            unary.acquire(limits)
    client, counter = counted_client(server.target, lease_stream=True)
    with client:
        with pytest.raises(ResourceExhaustedError) as got:
            client.acquire(limits)
        assert client.acquire("jobs", "k", config=CAPACITY_2).allowed  # on the stream
        assert client._lease_stream.opened == 1
    assert got.value.details == expected.value.details
    assert counter.calls.get("Acquire") == 1


class HeldCount:
    """The shared counter of the slots the workers believe they hold, and its highest value."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def up(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def down(self):
        with self.lock:
            self.now -= 1


def test_100_threads_never_hold_more_than_the_capacity_over_one_stream(server):
    held = HeldCount()
    start = threading.Barrier(100)
    errors = []
    client, counter = counted_client(server.target, lease_stream=True, timeout=10)

    def worker(i):
        try:
            start.wait()
            with client.lease("pool", "k", config=CAPACITY_10, holder="t%d" % i, wait=60):
                held.up()
                held.down()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    with client:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert client._lease_stream.opened == 1
        assert client.acquire("pool", "k", config=CAPACITY_10).results[0].value == 9  # all free
    assert held.now == 0 and 1 <= held.most <= 10
    assert not {"Acquire", "Release", "Extend"} & set(counter.calls), counter.calls


def test_close_ends_the_stream_and_its_threads(server):
    before = set(threading.enumerate())
    client = RateLimitClient(server.target, lease_stream=True)
    assert client.acquire("jobs", "k", config=CAPACITY_2).allowed
    assert any(t.name == STREAM_THREAD for t in threading.enumerate())
    client.close()
    assert not any(t.name == STREAM_THREAD for t in threading.enumerate())
    # gRPC's own thread, which ran the stream's request iterator, ends with it.
    eventually(lambda: set(threading.enumerate()) <= before, what="the stream's threads' end")
    with pytest.raises(Exception) as e:
        client.acquire("jobs", "k", config=CAPACITY_2)
    assert e.value.code == grpc.StatusCode.CANCELLED and e.value.details == "the client is closed"


# The asyncio client.

async def async_lease_story(client, key):
    out = []
    first = await client.acquire("jobs", key, config=CAPACITY_2, ttl=30, holder="worker-1",
                                 request_id="req-" + key)
    out.append(shape(first))
    out.append(shape(await client.acquire("jobs", key, config=CAPACITY_2, ttl=30,
                                          holder="worker-1", request_id="req-" + key)))
    second = await client.acquire("jobs", key, config=CAPACITY_2, holder="worker-2")
    out.append(shape(second))
    out.append(shape(await client.acquire("jobs", key, config=CAPACITY_2)))
    lease_id = first.lease.id
    out.append(shape(await client.extend("jobs", key, lease_id, ttl=20, config=CAPACITY_2)))
    out.append(shape(await client.release("jobs", key, lease_id, config=CAPACITY_2)))
    out.append(shape(await client.release("jobs", key, lease_id, config=CAPACITY_2)))
    out.append(shape(await client.extend("jobs", key, lease_id, config=CAPACITY_2)))
    out.append(shape(await client.release("jobs", key, second.lease.id, config=CAPACITY_2)))
    return out


async def async_errors_of(call):
    with pytest.raises(InvalidArgumentError) as e:
        await call()
    return type(e.value), e.value.code, e.value.details, e.value.field, e.value.method


async def async_invalid_calls(client):
    held = await client.acquire("jobs", "bad", config=CAPACITY_2)
    return [
        await async_errors_of(lambda: client.release("jobs", "bad", "zz", config=CAPACITY_2)),
        await async_errors_of(lambda: client.extend("jobs", "bad", "zz", config=CAPACITY_2)),
        await async_errors_of(lambda: client.acquire("jobs", "bad", config=CAPACITY_2,
                                                     holder="a\nb")),
        await async_errors_of(lambda: client.extend("jobs", "bad", held.lease.id,
                                                    config=CAPACITY_2, ttl=7200)),
    ]


def test_async_stream_answers_as_the_unary_calls(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as unary:
            expected = await async_lease_story(unary, "unary")
            expected_errors = await async_invalid_calls(unary)
        counter = CountAsyncCalls()
        async with AsyncRateLimitClient(server.target, lease_stream=True,
                                        interceptors=[counter]) as client:
            assert await async_lease_story(client, "stream") == expected
            assert await async_invalid_calls(client) == expected_errors
            assert client._lease_stream.opened == 1
        assert not {"Acquire", "Release", "Extend"} & set(counter.calls), counter.calls
        assert [e[3] for e in expected_errors] == ["lease_id", "lease_id", "holder", "ttl"]
        assert expected[1]["replayed"] and not expected[3]["allowed"]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_100_tasks_never_hold_more_than_the_capacity_over_one_stream(server):
    held = HeldCount()

    async def main():
        counter = CountAsyncCalls()
        async with AsyncRateLimitClient(server.target, lease_stream=True, timeout=10,
                                        interceptors=[counter]) as client:
            go = asyncio.Event()

            async def worker(i):
                await go.wait()
                async with client.lease("pool", "k", config=CAPACITY_10, holder="t%d" % i,
                                        wait=60):
                    held.up()
                    await asyncio.sleep(0)  # let the other tasks run while the slot is held
                    held.down()

            tasks = [asyncio.ensure_future(worker(i)) for i in range(100)]
            await asyncio.sleep(0)
            go.set()
            await asyncio.gather(*tasks)
            assert client._lease_stream.opened == 1
            free = (await client.acquire("pool", "k", config=CAPACITY_10)).results[0].value
            assert free == 9
            stream = client._lease_stream
        assert not stream._tasks  # close() waited for the reader and writer tasks
        assert not {"Acquire", "Release", "Extend"} & set(counter.calls), counter.calls

    asyncio.run(asyncio.wait_for(main(), 60))
    assert held.now == 0 and 1 <= held.most <= 10
