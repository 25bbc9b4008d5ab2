"""batch: independent requests in one call, each answered on its own, in order."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from conftest import approx
from ratelimit_client import (AsyncRateLimitClient, BatchEntry, Decision, InvalidArgumentError,
                              Limit, Method, NotFoundError, RateLimitClient)


def test_batch_answers_each_entry_in_order(server):
    with RateLimitClient(server.target) as client:
        results = client.batch([
            BatchEntry([Limit("api", "u", 2)]),
            BatchEntry([Limit("api", "u", 2)]),
            BatchEntry([Limit("api", "u", -1)]),
            BatchEntry([Limit("nope", "u")]),
            BatchEntry([Limit("api", "u", 1)], Method.CHECK),
            BatchEntry([Limit("api", "v", 1)], Method.RESERVE),
        ])
        assert len(results) == 6
        first, second, bad, unknown, check, reserve = results
        assert isinstance(first, Decision) and first.allowed and first.results[0].receipt
        assert isinstance(second, Decision) and not second.allowed  # sees the first's take
        assert isinstance(bad, InvalidArgumentError)
        assert bad.field == "entries[2].limits[0].count" and bad.method == "Batch"
        assert isinstance(unknown, NotFoundError) and unknown.field == "entries[3].limits[0].name"
        assert isinstance(check, Decision)
        assert check.results[0].value == approx(first.results[0].value)
        assert isinstance(reserve, Decision) and reserve.allowed


def test_batch_without_entries_is_refused_as_a_whole(server):
    with RateLimitClient(server.target) as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.batch([])
        assert info.value.field == "entries"
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_async_batch(server):
    async def run():
        async with AsyncRateLimitClient(server.target) as client:
            return await client.batch([BatchEntry([Limit("api", "w", 1)]),
                                       BatchEntry([Limit("api", "w", 1)], Method.CHECK)])

    consumed, checked = asyncio.run(run())
    assert isinstance(consumed, Decision) and consumed.allowed
    assert isinstance(checked, Decision)
    assert checked.results[0].value == approx(consumed.results[0].value)


def test_batch_entry_may_omit_receipts(server):
    with RateLimitClient(server.target) as client:
        without, with_receipt, reserved = client.batch([
            BatchEntry([Limit("api", "r", 1)], omit_receipts=True),
            BatchEntry([Limit("api", "r", 1)]),
            BatchEntry([Limit("other", "r", 2)], Method.RESERVE, omit_receipts=True),
        ])
        assert isinstance(without, Decision) and without.allowed
        assert without.results[0].receipt == b"" and without.receipts == ()
        assert without.results[0].value == approx(2)
        assert isinstance(with_receipt, Decision) and with_receipt.allowed
        assert with_receipt.results[0].receipt and len(with_receipt.receipts) == 1
        assert with_receipt.results[0].value == approx(1)  # the first entry took its token
        assert isinstance(reserved, Decision) and reserved.allowed and reserved.receipts == ()
        assert client.check("api", "r").results[0].value == approx(1)
        assert client.check("other", "r").results[0].value == approx(8)
