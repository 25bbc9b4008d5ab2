"""The asyncio client against a real server."""
from __future__ import annotations

import asyncio
import socket
from datetime import datetime, timedelta, timezone

import grpc
import grpc.aio
import pytest

from call_count import CountAsyncCalls
from conftest import approx
from ratelimit_client import (AsyncRateLimitClient, DeadlineExceededError, DenyReason,
                              InvalidArgumentError, Kind,
                              Limit, LimitConfig, PermissionDeniedError, UnauthenticatedError,
                              UnavailableError)

FAST = LimitConfig(Kind.TOKEN_BUCKET, rate=20, period=timedelta(seconds=1), capacity=1)
SLOW = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=5)


def test_every_call(server, monkeypatch):
    monkeypatch.delenv("RATELIMIT_ADMIN_TOKEN", raising=False)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            d = await client.consume("api", "u", 2)
            assert d.allowed and d.results[0].value == approx(1)
            d = await client.check("api", "u")
            assert d.allowed and d.results[0].value == approx(1)
            d = await client.reserve("api", "u", 2)
            assert d.allowed and d.results[0].value == approx(-1)
            assert d.retry_at > datetime.now(timezone.utc)
            d = await client.consume([Limit("other", "u"), Limit("api", "u")])
            assert not d.allowed and d.denied_by == 1
            assert d.reason == DenyReason.INSUFFICIENT_TOKENS and d.retry_at is not None
            assert (await client.check("other", "u")).results[0].value == approx(10)
            with pytest.raises(InvalidArgumentError) as info:
                await client.check("api", "u", 0)
            assert info.value.field == "limits[0].count"
            assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(UnauthenticatedError):
                await client.reset("api", "u")
        async with AsyncRateLimitClient(server.target, admin_token="wrong") as client:
            with pytest.raises(PermissionDeniedError):
                await client.reset("api", "u")
        async with AsyncRateLimitClient(server.target,
                                        admin_token_file=server.token_file) as client:
            await client.reset("api", "u")
            assert (await client.check("api", "u")).results[0].value == approx(3)

    asyncio.run(main())


def test_reserve_and_wait_returns_no_earlier_than_retry_at(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            await client.consume("fast", "k", config=FAST)
            d = await client.reserve_and_wait("fast", "k", config=FAST)
            returned = datetime.now(timezone.utc)
            assert d.allowed and d.results[0].value < 0
            assert returned >= d.retry_at

    asyncio.run(main())


def test_cancelling_reserve_and_wait_raises_cancelled_error(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            await client.consume("job", "k", 5, config=SLOW)
            task = asyncio.ensure_future(client.reserve_and_wait("job", "k", config=SLOW))
            # Wait until the reservation is taken (the task then sleeps for about an hour).
            for _ in range(1000):
                if (await client.check("job", "k", config=SLOW)).results[0].value < -0.5:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the reservation was not taken")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            assert task.cancelled()

    asyncio.run(main())


class _CancelWhenFirstReserveIsAnswered(grpc.aio.UnaryUnaryClientInterceptor):
    """Cancels `task` once the server has answered its first Reserve, before the task reads the
    answer: a cancellation that races the reply."""

    def __init__(self):
        self.task = None
        self.reserves = 0

    async def intercept_unary_unary(self, continuation, details, request):
        call = await continuation(details, request)
        method = details.method
        method = (method.decode() if isinstance(method, bytes) else method).rsplit("/", 1)[-1]
        if method == "Reserve":
            self.reserves += 1
            if self.reserves == 1:
                await call
                self.task.cancel()
        return call


def test_cancelling_reserve_and_wait_during_its_reserve_leaves_no_reservation(server):
    cancel_first = _CancelWhenFirstReserveIsAnswered()

    async def main():
        async with AsyncRateLimitClient(server.target, interceptors=[cancel_first]) as client:
            await client.consume("racing", "k", 5, config=SLOW)
            task = asyncio.ensure_future(client.reserve_and_wait("racing", "k", config=SLOW))
            cancel_first.task = task
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            # The first Reserve, then the same one again (its remembered answer), given back.
            assert cancel_first.reserves == 2
            value = (await client.check("racing", "k", config=SLOW)).results[0].value
            assert value == approx(0), "the abandoned reservation still owes"

    asyncio.run(main())


def test_a_checks_retries_share_its_timeout():
    # A hung server: the first attempt takes the whole timeout, and no retry is made.
    counter = CountAsyncCalls()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    target = "127.0.0.1:%d" % sock.getsockname()[1]

    async def main():
        async with AsyncRateLimitClient(target, interceptors=[counter],
                                        check_retries=2) as client:
            with pytest.raises(DeadlineExceededError):
                await client.check("api", "k", timeout=0.3)

    try:
        asyncio.run(main())
    finally:
        sock.close()
    assert counter.calls == {"Check": 1}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e12])
def test_a_timeout_that_no_call_can_have_is_a_value_error(bad, unused_target):
    with pytest.raises(ValueError, match=r"^timeout: must be a positive, finite number"):
        AsyncRateLimitClient(unused_target, timeout=bad)

    async def call():
        async with AsyncRateLimitClient(unused_target) as client:
            await client.consume("api", "k", timeout=bad)

    with pytest.raises(ValueError, match=r"^timeout: "):
        asyncio.run(call())


def test_only_check_is_retried(unused_target):
    counter = CountAsyncCalls()

    async def main():
        async with AsyncRateLimitClient(unused_target, interceptors=[counter],
                                        check_retries=3) as client:
            with pytest.raises(UnavailableError):
                await client.check("api", "k")
            with pytest.raises(UnavailableError):
                await client.consume("api", "k")
            with pytest.raises(UnavailableError):
                await client.reserve("api", "k")

    asyncio.run(main())
    assert counter.calls == {"Check": 4, "Consume": 1, "Reserve": 1}


def test_omit_receipts_takes_the_tokens_without_a_receipt(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            d = await client.consume("api", "omit", omit_receipts=True)
            assert d.allowed and d.results[0].receipt == b"" and d.receipts == ()
            assert d.results[0].value == approx(2)
            assert (await client.check("api", "omit")).results[0].value == approx(2)
            d = await client.consume("api", "omit")
            assert d.allowed and d.results[0].receipt and len(d.receipts) == 1
            assert (await client.check("api", "omit")).results[0].value == approx(1)
            d = await client.reserve("other", "omit", 4, omit_receipts=True)
            assert d.allowed and d.receipts == ()
            assert (await client.check("other", "omit")).results[0].value == approx(6)

    asyncio.run(main())


def test_reset_on_a_server_whose_reset_is_disabled_says_so(start_server, monkeypatch):
    monkeypatch.delenv("RATELIMIT_ADMIN_TOKEN", raising=False)
    server = start_server([], admin_token=False)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            with pytest.raises(PermissionDeniedError) as info:
                await client.reset("api", "u")
            assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
            assert info.value.details.startswith("Reset is disabled"), info.value.details

    asyncio.run(main())
