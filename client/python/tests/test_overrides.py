"""Overrides (ratelimit.v1.OverrideService) through the sync and asyncio clients, against a real
server whose limits file has `api` (capacity 3) and `other` (capacity 10), both refilling one
token an hour."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from conftest import ADMIN_TOKEN
from ratelimit_client import (AsyncRateLimitClient, DenyReason, InvalidArgumentError,
                              NotFoundError, OverrideTarget, PermissionDeniedError,
                              RateLimitClient, UnauthenticatedError)
from ratelimit_client import _common
from ratelimit_client._pb import ratelimit_pb2 as pb


def test_an_override_raises_a_limit_until_it_is_deleted_and_the_audit_records_it(server):
    with RateLimitClient(server.target, admin_token_file=server.token_file) as client:
        # Over the configured capacity (3) a count can never fit...
        d = client.consume("api", "cust-1", 5)
        assert d.reason == DenyReason.COUNT_EXCEEDS_CAPACITY and d.results[0].override == ""
        target = OverrideTarget("api", key="cust-1")
        made = client.set_override(target, capacity=10, reason="incident 811", actor="alice")
        assert made.replaced is None
        assert made.override.target == target
        assert made.override.limit is not None and made.override.limit.capacity == 10
        assert made.override.limit.rate is None and made.override.limit.period is None
        assert not made.override.unlimited and not made.override.blocked
        assert made.override.set_by == "alice (token)" and made.override.set_at is not None
        assert made.override.expires_at is None and not made.override.expired
        # ...and under the override it does: the decision names the override.
        d = client.consume("api", "cust-1", 5)
        assert d.allowed and d.results[0].override == "cust-1"
        assert d.results[0].capacity == 10
        assert not client.consume("api", "cust-2", 5).allowed  # other keys keep the limit

        again = client.set_override(target, capacity=20, reason="more", actor="bob")
        assert again.replaced == made.override
        assert client.get_override(target) == again.override

        deleted = client.delete_override(target, reason="incident over", actor="carol")
        assert deleted == again.override
        d = client.consume("api", "cust-1")
        assert d.results[0].override == "" and d.results[0].capacity == 3
        with pytest.raises(NotFoundError):
            client.get_override(target)
        with pytest.raises(NotFoundError):
            client.delete_override(target)

        entries = list(client.iter_override_audit("api"))
        assert [(e.action, e.actor, e.reason) for e in entries] == [
            ("delete", "carol", "incident over"), ("set", "bob", "more"),
            ("set", "alice", "incident 811")]
        assert entries[0].sequence > entries[1].sequence > entries[2].sequence
        assert all(e.authorized_by == "token" and e.peer and e.at is not None for e in entries)
        assert entries[0].before == again.override and entries[0].after is None
        assert entries[1].before == made.override and entries[1].after == again.override
        assert entries[2].before is None and entries[2].after == made.override


def test_a_blocked_key_is_denied_with_reason_blocked_and_no_retry_time(server):
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        before = datetime.now(timezone.utc)
        made = client.set_override(OverrideTarget("api", key_pattern="leaked-*"), blocked=True,
                                   expires_in=timedelta(hours=2), reason="keys leaked")
        assert made.override.blocked and made.override.limit is None
        assert made.override.expires_at is not None
        assert (before + timedelta(hours=2) <= made.override.expires_at
                <= datetime.now(timezone.utc) + timedelta(hours=2))
        d = client.consume("api", "leaked-7")  # a denial, not an exception
        assert not d.allowed and d.reason == DenyReason.BLOCKED and d.denied_by == 0
        assert d.retry_at is None and d.results[0].retry_at is None
        assert d.results[0].reason == DenyReason.BLOCKED
        assert d.results[0].override == "leaked-*"
        assert client.consume("api", "fine-7").allowed

        client.set_override(OverrideTarget("other", key="vip"), unlimited=True)
        d = client.consume("other", "vip", 1000)
        assert d.allowed and d.results[0].override == "vip"


def test_overrides_and_the_audit_are_listed_page_by_page(server):
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        for i in range(5):
            client.set_override(OverrideTarget("other", key="k%d" % i), rate=2)
        client.set_override(OverrideTarget("api", key_pattern="trial-*"), rate=2,
                            period=timedelta(minutes=1))
        first = client.list_overrides("other", page_size=2)
        assert [o.target.key for o in first.overrides] == ["k0", "k1"]
        assert first.next_page_token
        second = client.list_overrides("other", page_size=2, page_token=first.next_page_token)
        assert [o.target.key for o in second.overrides] == ["k2", "k3"]
        assert [o.target.key for o in client.iter_overrides("other", page_size=2)] == [
            "k0", "k1", "k2", "k3", "k4"]
        everything = list(client.iter_overrides())
        assert [(o.target.name, o.target.key_pattern) for o in everything][0] == (
            "api", "trial-*")
        assert everything[0].limit is not None
        assert everything[0].limit.period == timedelta(minutes=1)
        assert len(everything) == 6

        page = client.list_override_audit(page_size=4)
        assert len(page.entries) == 4 and page.next_page_token
        assert page.entries[0].after is not None
        assert page.entries[0].after.target.key_pattern == "trial-*"
        rest = client.list_override_audit(page_size=4, page_token=page.next_page_token)
        assert len(rest.entries) == 2 and not rest.next_page_token
        assert [e.after.target.key for e in rest.entries if e.after] == ["k1", "k0"]


def test_bad_input_and_missing_credentials_are_refused(server, monkeypatch):
    monkeypatch.delenv("RATELIMIT_ADMIN_TOKEN", raising=False)
    target = OverrideTarget("api", key="k")
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.set_override(target, rate=-1)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.field == "override.limit.rate"
        with pytest.raises(InvalidArgumentError) as info:
            client.set_override(target)  # no effect at all
        assert info.value.field == "override.effect"
        with pytest.raises(InvalidArgumentError) as info:
            client.set_override(OverrideTarget("api", key="k", key_pattern="k*"), blocked=True)
        assert info.value.field == "override.target.key_pattern"
        with pytest.raises(InvalidArgumentError) as info:
            client.list_overrides(page_size=5000)
        assert info.value.field == "page_size"
        with pytest.raises(NotFoundError):
            client.set_override(OverrideTarget("nope", key="k"), rate=1)
        with pytest.raises(TypeError):
            client.set_override(target, rate=1, blocked=True)
        with pytest.raises(TypeError):
            client.set_override(target, blocked=True, expires_in=timedelta(hours=1),
                                expires_at=datetime.now(timezone.utc))
    with RateLimitClient(server.target) as anonymous:
        with pytest.raises(UnauthenticatedError) as info:
            anonymous.set_override(target, blocked=True)
        assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(UnauthenticatedError):
            anonymous.list_overrides()
    with RateLimitClient(server.target, admin_token="wrong") as wrong:
        with pytest.raises(PermissionDeniedError):
            wrong.list_override_audit()
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        assert client.list_overrides().overrides == ()  # nothing refused was stored
        assert client.consume("api", "k").results[0].override == ""


def test_the_asyncio_client_makes_the_same_calls(server, monkeypatch):
    monkeypatch.delenv("RATELIMIT_ADMIN_TOKEN", raising=False)

    async def main():
        async with AsyncRateLimitClient(server.target,
                                        admin_token_file=server.token_file) as client:
            target = OverrideTarget("api", key_pattern="bulk-*")
            made = await client.set_override(target, rate=1, capacity=50, actor="ops",
                                             reason="bulk import")
            assert made.replaced is None and made.override.limit is not None
            d = await client.consume("api", "bulk-1", 40)
            assert d.allowed and d.results[0].override == "bulk-*"
            blocked = await client.set_override(target, blocked=True)
            assert blocked.replaced == made.override
            d = await client.check("api", "bulk-1")
            assert d.reason == DenyReason.BLOCKED and d.retry_at is None
            assert await client.get_override(target) == blocked.override
            assert [o async for o in client.iter_overrides("api", page_size=1)] == [
                blocked.override]
            page = await client.list_overrides("api")
            assert page.overrides == (blocked.override,) and page.next_page_token == ""
            assert await client.delete_override(target, actor="ops") == blocked.override
            audit = [e async for e in client.iter_override_audit("api", page_size=2)]
            assert [e.action for e in audit] == ["delete", "set", "set"]
            assert audit[-1].actor == "ops" and audit[-1].reason == "bulk import"
            page = await client.list_override_audit("api", page_size=1)
            assert len(page.entries) == 1 and page.next_page_token
            d = await client.consume("api", "bulk-1")
            assert d.results[0].override == ""
        async with AsyncRateLimitClient(server.target) as anonymous:
            with pytest.raises(UnauthenticatedError):
                await anonymous.get_override(OverrideTarget("api", key="k"))

    asyncio.run(main())


def test_deny_reasons_this_client_does_not_know_are_read_as_unspecified():
    assert DenyReason(4) is DenyReason.BLOCKED
    assert DenyReason(99) is DenyReason.UNSPECIFIED
    response = pb.RateLimitResponse(allowed=False, reason=99, denied_by=0)
    response.results.add(name="api", key="k", allowed=False, reason=99, override="k*")
    d = _common.to_decision(response)
    assert not d.allowed and d.reason == DenyReason.UNSPECIFIED
    assert d.results[0].reason == DenyReason.UNSPECIFIED and d.results[0].override == "k*"
