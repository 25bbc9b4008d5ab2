"""Settle, receipts, request_id and the cancellation of reserve-and-wait (which settles the
reservation with used=0). These need a server that implements Settle."""
from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import grpc
import pytest

from conftest import approx
from ratelimit_client import (AlreadyExistsError, AsyncRateLimitClient, InvalidArgumentError,
                              Kind, Limit, LimitConfig, RateLimitClient, RateLimitError,
                              ReservationCancelled, Settlement)

SLOW = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=5)


def test_settle_gives_back_what_was_not_used_once(server):
    with RateLimitClient(server.target) as client:
        d = client.consume("api", "u", 3)
        assert d.allowed and len(d.receipts) == 1 and d.results[0].receipt
        (result,) = client.settle([Settlement(d.results[0].receipt, 1)])
        assert (result.name, result.key) == ("api", "u")
        assert result.returned == approx(2) and result.charged == 0
        assert result.value == approx(2)
        assert client.check("api", "u").results[0].value == approx(2)
        with pytest.raises(AlreadyExistsError) as info:
            client.settle([Settlement(d.results[0].receipt, 0)])
        assert info.value.field == "settlements[0].receipt"
        assert client.check("api", "u").results[0].value == approx(2)


def test_settle_charges_more_than_taken(server):
    with RateLimitClient(server.target) as client:
        d = client.consume("job", "k", 1, config=SLOW)
        (result,) = client.settle([Settlement(d.receipts[0], 7)])
        assert result.charged == approx(6) and result.returned == 0
        assert result.value == approx(-2)
        assert result.paid_at is not None and result.paid_after > timedelta(hours=1)


def test_receipts_only_for_allowed_takes(server):
    with RateLimitClient(server.target) as client:
        assert client.reserve("job", "k", 2, config=SLOW).results[0].receipt
        assert not client.check("job", "k", config=SLOW).results[0].receipt
        denied = client.consume("job", "k", 6, config=SLOW)
        assert not denied.allowed and denied.receipts == ()


def test_forged_receipt_names_the_field(server):
    with RateLimitClient(server.target) as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.settle([Settlement(b"not a receipt", 0)])
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.field == "settlements[0].receipt"


def test_request_id_makes_a_retry_answer_the_same_without_taking_again(server):
    with RateLimitClient(server.target) as client:
        first = client.consume([Limit("api", "u", 2)], request_id="order-17")
        assert first.allowed and not first.replayed
        again = client.consume([Limit("api", "u", 2)], request_id="order-17")
        assert again.replayed and again.allowed
        assert again.results[0].value == first.results[0].value
        assert client.check("api", "u").results[0].value == approx(1)  # taken once
        with pytest.raises(RateLimitError) as info:
            client.consume([Limit("api", "u", 1)], request_id="order-17")
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_cancelled_async_reserve_and_wait_gives_its_tokens_back(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            await client.consume("job", "k", 5, config=SLOW)
            # The server shows a reservation's debt to a check before the Reserve's answer (and
            # its receipt) reaches the client, and a task cancelled before that answer has
            # nothing to give back. So cancel only once reserve_and_wait holds the answer: it
            # then goes straight to its sleep, without yielding.
            answered = asyncio.Event()
            reserve = client.reserve

            async def reserve_and_signal(*args, **kwargs):
                decision = await reserve(*args, **kwargs)
                answered.set()
                return decision

            client.reserve = reserve_and_signal
            task = asyncio.ensure_future(client.reserve_and_wait("job", "k", 2, config=SLOW))
            await asyncio.wait_for(answered.wait(), 10)
            assert (await client.check("job", "k", config=SLOW)).results[0].value < -1.5
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The reservation was settled with used=0: the debt is gone.
            assert (await client.check("job", "k", config=SLOW)).results[0].value == approx(0)

    asyncio.run(main())


def test_cancelled_sync_reserve_and_wait_gives_its_tokens_back(server):
    with RateLimitClient(server.target) as client:
        client.consume("job", "k", 5, config=SLOW)
        cancel = threading.Event()
        outcome = {}

        def run():
            try:
                client.reserve_and_wait("job", "k", 2, config=SLOW, cancel=cancel)
            except ReservationCancelled as e:
                outcome["error"] = e

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while client.check("job", "k", config=SLOW).results[0].value > -1.5:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        finally:
            cancel.set()
        worker.join(10)
        assert outcome["error"].settled, outcome["error"]
        assert client.check("job", "k", config=SLOW).results[0].value == approx(0)
