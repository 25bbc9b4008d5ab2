"""reserve_and_wait's bound (`timeout` bounds the whole call, not only the Reserve) and its
give-backs: a reservation that cannot be met in time, one whose answer was lost in flight and
one whose wait is interrupted leave no debt behind; a wait cancelled or out of time before it
starts sends nothing. Sleeps go through a fake clock."""
from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import grpc
import grpc.aio
import pytest

from call_count import CountAsyncCalls, CountCalls
from conftest import FakeClock, approx
from ratelimit_client import (AsyncRateLimitClient, DeadlineExceededError, Kind, LimitConfig,
                              RateLimitClient, ReservationCancelled, ReservationTimeout)

# A token every 10 s: with the bucket empty, a reservation of one may run in about 10 s.
TEN_SECONDS = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(seconds=10), capacity=1)
# A token an hour: a reservation's debt stays put for the test's duration.
HOURLY = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=5)


def test_a_reservation_due_after_the_timeout_is_given_back_at_once(server):
    with RateLimitClient(server.target) as client:
        assert client.consume("ten", "k", config=TEN_SECONDS).allowed
        start = time.monotonic()
        with pytest.raises(ReservationTimeout) as info:
            client.reserve_and_wait("ten", "k", config=TEN_SECONDS, timeout=0.3)
        elapsed = time.monotonic() - start
        assert elapsed < 5, "it waited %.1fs for a reservation it could not use" % elapsed
        e = info.value
        assert isinstance(e, TimeoutError) and e.settled and e.settle_error is None
        assert e.decision.allowed and e.decision.retry_at is not None
        # The tokens went back: the bucket holds what refilled since the consume, no debt.
        assert client.check("ten", "k", config=TEN_SECONDS).results[0].value > -0.5


def test_a_reservation_due_within_the_timeout_is_waited_for_on_the_clock(server):
    clock = FakeClock()
    with RateLimitClient(server.target, clock=clock) as client:
        client.consume("job", "k", 5, config=HOURLY)
        with pytest.raises(ReservationTimeout):
            client.reserve_and_wait("job", "k", config=HOURLY, timeout=3500)
        assert clock.sleeps == []  # due in about 3600 s: not waited for
        assert client.check("job", "k", config=HOURLY).results[0].value == approx(0)
        d = client.reserve_and_wait("job", "k", config=HOURLY, timeout=3700)
        assert d.allowed and d.results[0].value == approx(-1)
        assert 3500 < sum(clock.sleeps) <= 3700
        assert clock.now() >= d.retry_at


def test_no_timeout_waits_as_long_as_it_takes(server):
    clock = FakeClock()
    with RateLimitClient(server.target, clock=clock) as client:
        client.consume("job", "k", 5, config=HOURLY)
        d = client.reserve_and_wait("job", "k", 3, config=HOURLY)
        assert d.allowed and 3 * 3600 - 100 < sum(clock.sleeps) <= 3 * 3600
        assert clock.now() >= d.retry_at


def test_an_interrupted_wait_gives_the_reservation_back(server):
    clock = FakeClock()
    clock.interrupt = KeyboardInterrupt()
    with RateLimitClient(server.target, clock=clock) as client:
        client.consume("job", "k", 5, config=HOURLY)
        with pytest.raises(KeyboardInterrupt):
            client.reserve_and_wait("job", "k", 2, config=HOURLY)
        assert client.check("job", "k", config=HOURLY).results[0].value == approx(0)


class _LostAnswer(grpc.RpcError, grpc.Call, grpc.Future):
    """The outcome of a call whose answer never arrived: DEADLINE_EXCEEDED."""

    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "Deadline Exceeded"

    def initial_metadata(self):
        return None

    def trailing_metadata(self):
        return None

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def add_callback(self, callback):
        return False

    def cancel(self):
        return False

    def cancelled(self):
        return False

    def running(self):
        return False

    def done(self):
        return True

    def result(self, timeout=None):
        raise self

    def exception(self, timeout=None):
        return self

    def traceback(self, timeout=None):
        return None

    def add_done_callback(self, fn):
        fn(self)


class _LoseFirstReserveAnswer(grpc.UnaryUnaryClientInterceptor):
    """Lets the first Reserve reach the server and be decided, then reports DEADLINE_EXCEEDED
    instead of its answer; counts the calls by method."""

    def __init__(self):
        self.calls = {}

    def intercept_unary_unary(self, continuation, details, request):
        method = details.method.rsplit("/", 1)[-1]
        self.calls[method] = self.calls.get(method, 0) + 1
        outcome = continuation(details, request)
        if method == "Reserve" and self.calls[method] == 1:
            outcome.result()  # the server has reserved
            return _LostAnswer()
        return outcome


def test_a_reservation_whose_answer_was_lost_is_given_back(server):
    lose = _LoseFirstReserveAnswer()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), lose)
    with RateLimitClient(channel=channel) as client:
        client.consume("lost", "k", 5, config=HOURLY)
        with pytest.raises(DeadlineExceededError):
            client.reserve_and_wait("lost", "k", 2, config=HOURLY)
        # The same Reserve again (the server's remembered reservation), then its give-back.
        assert lose.calls.get("Reserve") == 2 and lose.calls.get("Settle") == 1
        value = client.check("lost", "k", config=HOURLY).results[0].value
        assert value == approx(0), "the lost reservation still owes"


def test_async_a_reservation_due_after_the_timeout_is_given_back_at_once(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            assert (await client.consume("ten", "k", config=TEN_SECONDS)).allowed
            start = time.monotonic()
            with pytest.raises(ReservationTimeout) as info:
                await client.reserve_and_wait("ten", "k", config=TEN_SECONDS, timeout=0.3)
            elapsed = time.monotonic() - start
            assert elapsed < 5, "it waited %.1fs for a reservation it could not use" % elapsed
            assert info.value.settled
            value = (await client.check("ten", "k", config=TEN_SECONDS)).results[0].value
            assert value > -0.5

    asyncio.run(main())


def test_async_a_reservation_due_within_the_timeout_is_waited_for_on_the_clock(server):
    clock = FakeClock()

    async def main():
        async with AsyncRateLimitClient(server.target, clock=clock) as client:
            await client.consume("job", "k", 5, config=HOURLY)
            with pytest.raises(ReservationTimeout):
                await client.reserve_and_wait("job", "k", config=HOURLY, timeout=3500)
            assert clock.sleeps == []
            value = (await client.check("job", "k", config=HOURLY)).results[0].value
            assert value == approx(0)
            d = await client.reserve_and_wait("job", "k", config=HOURLY, timeout=3700)
            assert d.allowed and 3500 < sum(clock.sleeps) <= 3700
            assert clock.now() >= d.retry_at

    asyncio.run(main())


def test_a_cancel_already_set_sends_nothing(server):
    count = CountCalls()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), count)
    cancel = threading.Event()
    cancel.set()
    with RateLimitClient(channel=channel) as client:
        with pytest.raises(ReservationCancelled) as info:
            client.reserve_and_wait("job", "k", config=HOURLY, cancel=cancel)
    assert not info.value.reserved and not info.value.settled
    assert "nothing was reserved" in str(info.value)
    assert count.calls == {}, "a cancelled wait sent %s" % count.calls


@pytest.mark.parametrize("bound", [0, -1.5, float("nan")])
def test_a_timeout_already_passed_or_not_a_number_sends_nothing(server, bound):
    count = CountCalls()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), count)
    with RateLimitClient(channel=channel) as client:
        with pytest.raises(ValueError, match=r"^timeout: .*got %r$" % (bound,)):
            client.reserve_and_wait("job", "k", config=HOURLY, timeout=bound)
    assert count.calls == {}, "a wait that cannot be met sent %s" % count.calls


def test_async_a_task_already_cancelled_sends_nothing(server):
    count = CountAsyncCalls()

    async def main():
        async with AsyncRateLimitClient(server.target, interceptors=[count]) as client:
            async def cancelled_then_waits():
                asyncio.current_task().cancel()  # pending until the task next yields
                await client.reserve_and_wait("job", "k", config=HOURLY)

            task = asyncio.ensure_future(cancelled_then_waits())
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.2)  # a give-back would run in the background

    asyncio.run(main())
    assert count.calls == {}, "a cancelled task sent %s" % count.calls


def test_async_an_expired_asyncio_timeout_sends_nothing(server):
    count = CountAsyncCalls()

    async def main():
        async with AsyncRateLimitClient(server.target, interceptors=[count]) as client:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0):
                    await client.reserve_and_wait("job", "k", config=HOURLY)
            await asyncio.sleep(0.2)

    asyncio.run(main())
    assert count.calls == {}, "a wait past its deadline sent %s" % count.calls


@pytest.mark.parametrize("bound", [0, -1.5, float("nan")])
def test_async_a_timeout_already_passed_or_not_a_number_sends_nothing(server, bound):
    count = CountAsyncCalls()

    async def main():
        async with AsyncRateLimitClient(server.target, interceptors=[count]) as client:
            with pytest.raises(ValueError, match=r"^timeout: .*got %r$" % (bound,)):
                await client.reserve_and_wait("job", "k", config=HOURLY, timeout=bound)

    asyncio.run(main())
    assert count.calls == {}, "a wait that cannot be met sent %s" % count.calls
