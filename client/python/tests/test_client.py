"""The synchronous client against a real server."""
from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from conftest import ADMIN_TOKEN, approx
from ratelimit_client import (DEFAULT_TIMEOUT, DeadlineExceededError, DenyReason,
                              InvalidArgumentError, Kind, Limit, LimitConfig, LimitSource,
                              NotFoundError, PermissionDeniedError, RateLimitClient,
                              RateLimitError, ReservationCancelled, UnauthenticatedError,
                              UnavailableError)

FAST = LimitConfig(Kind.TOKEN_BUCKET, rate=20, period=timedelta(seconds=1), capacity=1)
SLOW = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=5,
                   max_reserved=100)


def now() -> datetime:
    return datetime.now(timezone.utc)


def test_consume_allows_until_empty_then_denies_with_retry_time(server):
    with RateLimitClient(server.target) as client:
        for expected in (2, 1, 0):
            d = client.consume("api", "user-1")
            assert d.allowed and bool(d)
            assert d.denied_by is None and d.retry_at is None
            assert d.results[0].value == approx(expected) and d.results[0].capacity == 3
        before = now()
        d = client.consume("api", "user-1")
        assert not d.allowed
        assert d.reason == DenyReason.INSUFFICIENT_TOKENS and d.denied_by == 0
        assert d.retry_at is not None and d.retry_at.tzinfo is not None
        assert d.retry_at > before
        assert timedelta(minutes=50) < d.retry_after <= timedelta(hours=1)
        assert d.results[0].reason == DenyReason.INSUFFICIENT_TOKENS
        assert d.results[0].value == approx(0)


def test_count_defaults_to_one_and_can_be_set(server):
    with RateLimitClient(server.target) as client:
        assert client.consume("other", "k").results[0].value == approx(9)
        assert client.consume("other", "k", 4).results[0].value == approx(5)
        assert client.consume(Limit("other", "k", 2.5)).results[0].value == approx(2.5)


def test_check_answers_without_taking(server):
    with RateLimitClient(server.target) as client:
        client.consume("api", "u", 2)
        for _ in range(3):
            d = client.check("api", "u")
            assert d.allowed and d.results[0].value == approx(1)  # the current balance
        assert not client.check("api", "u", 2).allowed
        assert client.consume("api", "u").allowed


def test_denial_is_all_or_nothing(server):
    with RateLimitClient(server.target) as client:
        d = client.consume([Limit("other", "k", 1), Limit("api", "k", 4)])
        assert not d.allowed and d.denied_by == 1
        assert d.reason == DenyReason.COUNT_EXCEEDS_CAPACITY and d.retry_at is None
        assert d.results[0].allowed
        assert client.check("other", "k").results[0].value == approx(10)  # nothing was taken
        client.consume("api", "k", 3)
        d = client.consume([Limit("other", "k"), Limit("api", "k")])
        assert not d.allowed and d.denied_by == 1 and d.retry_at is not None
        assert client.check("other", "k").results[0].value == approx(10)


def test_inline_config_and_reservation_debt(server):
    with RateLimitClient(server.target) as client:
        d = client.consume("job", "k", 2, config=SLOW)
        assert d.allowed and d.results[0].capacity == 5 and d.results[0].value == approx(3)
        before = now()
        d = client.reserve("job", "k", 5, config=SLOW)
        assert d.allowed and d.results[0].value == approx(-2)
        assert d.retry_at is not None and d.retry_at > before + timedelta(hours=1, minutes=50)
        d = client.reserve("job", "k", 200, config=SLOW)
        assert not d.allowed and d.reason == DenyReason.COUNT_EXCEEDS_CAPACITY


def test_reserve_and_wait_returns_no_earlier_than_retry_at(server):
    with RateLimitClient(server.target) as client:
        assert client.consume("fast", "k", config=FAST).allowed
        d = client.reserve_and_wait("fast", "k", config=FAST)
        returned = now()
        assert d.allowed and d.retry_at is not None
        assert d.results[0].value < 0  # it really had to wait for a refill
        assert returned >= d.retry_at


def test_reserve_and_wait_returns_a_refused_reservation_at_once(server):
    no_debt = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), max_reserved=0)
    with RateLimitClient(server.target) as client:
        client.consume("nodebt", "k", config=no_debt)
        d = client.reserve_and_wait("nodebt", "k", config=no_debt)
        assert not d.allowed and d.reason == DenyReason.MAX_RESERVED_EXCEEDED


def test_reserve_and_wait_stops_when_cancelled(server):
    with RateLimitClient(server.target) as client:
        client.consume("job", "k", 5, config=SLOW)
        cancel = threading.Event()
        outcome = {}

        def run():
            try:
                client.reserve_and_wait("job", "k", 1, config=SLOW, cancel=cancel)
            except ReservationCancelled as e:
                outcome["error"] = e

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            # The reservation (an hour of debt) is in place: the worker sleeps towards retry_at.
            deadline = time.monotonic() + 10
            while client.check("job", "k", config=SLOW).results[0].value > -0.5:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        finally:
            cancel.set()
        worker.join(10)
        assert not worker.is_alive()
        assert isinstance(outcome.get("error"), ReservationCancelled)


def test_invalid_argument_keeps_the_code_and_the_field(server):
    with RateLimitClient(server.target) as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.consume([Limit("other", "ok"), Limit("other", "")])
        e = info.value
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT
        assert e.field == "limits[1].key" and e.details.startswith("limits[1].key: ")
        assert isinstance(e, ValueError) and isinstance(e, RateLimitError)
        assert isinstance(e.__cause__, grpc.RpcError)
        with pytest.raises(InvalidArgumentError) as info:
            client.consume("x", "k", config=LimitConfig(Kind.TOKEN_BUCKET, rate=-5,
                                                        period=timedelta(seconds=1)))
        assert info.value.field == "limits[0].config.rate"
        assert client.check("other", "ok").results[0].value == approx(10)  # nothing was taken


def test_unknown_limit_is_not_found(server):
    with RateLimitClient(server.target) as client:
        with pytest.raises(NotFoundError) as info:
            client.check("nope", "k")
        assert info.value.code == grpc.StatusCode.NOT_FOUND


def test_reset_needs_the_admin_token(server, monkeypatch):
    monkeypatch.delenv("RATELIMIT_ADMIN_TOKEN", raising=False)
    with RateLimitClient(server.target) as client:
        client.consume("api", "u", 3)
        with pytest.raises(UnauthenticatedError) as info:
            client.reset("api", "u")
        assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    with RateLimitClient(server.target, admin_token="wrong") as client:
        with pytest.raises(PermissionDeniedError):
            client.reset("api", "u")
        assert client.check("api", "u").results[0].value == approx(0)
    with RateLimitClient(server.target, admin_token_file=server.token_file) as client:
        client.reset("api", "u")
        assert client.check("api", "u").results[0].value == approx(3)


def test_reset_token_from_the_environment_all_keys_and_inline_source(server, monkeypatch):
    monkeypatch.setenv("RATELIMIT_ADMIN_TOKEN", ADMIN_TOKEN)
    with RateLimitClient(server.target) as client:
        client.consume("api", "a", 3)
        client.consume("api", "b", 3)
        client.reset("api", all_keys=True)
        assert client.check("api", "a").results[0].value == approx(3)
        assert client.check("api", "b").results[0].value == approx(3)
        client.consume("job", "k", 5, config=SLOW)
        client.reset("job", "k", source=LimitSource.INLINE)
        assert client.check("job", "k", config=SLOW).results[0].value == approx(5)


def _silent_listener():
    """A socket that accepts connections and never answers (a hung server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def test_calls_have_a_deadline_by_default():
    assert DEFAULT_TIMEOUT == 1.0
    sock = _silent_listener()
    try:
        target = "127.0.0.1:%d" % sock.getsockname()[1]
        with RateLimitClient(target, check_retries=0) as client:
            start = time.monotonic()
            with pytest.raises(DeadlineExceededError) as info:
                client.consume("api", "k")
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert isinstance(info.value, TimeoutError)
            assert time.monotonic() - start < 30
            with pytest.raises(DeadlineExceededError):
                client.consume("api", "k", timeout=0.1)
    finally:
        sock.close()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, -1, 1e12])
def test_a_timeout_that_no_call_can_have_is_a_value_error(bad, unused_target):
    # gRPC would answer NaN, infinity or 1e12 s with DEADLINE_EXCEEDED at once, as an outage.
    with pytest.raises(ValueError, match=r"^timeout: must be a positive, finite number"):
        RateLimitClient(unused_target, timeout=bad)
    with RateLimitClient(unused_target) as client:
        with pytest.raises(ValueError, match=r"^timeout: "):
            client.consume("api", "k", timeout=bad)


class _CountingInterceptor(grpc.UnaryUnaryClientInterceptor):
    def __init__(self):
        self.calls = {}
        self.timeouts = []  # each call's timeout, in order

    def intercept_unary_unary(self, continuation, details, request):
        method = details.method.rsplit("/", 1)[-1]
        self.calls[method] = self.calls.get(method, 0) + 1
        self.timeouts.append(details.timeout)
        return continuation(details, request)


def test_a_checks_retries_share_its_timeout(unused_target):
    # Unreachable: each attempt fails at once, and each retry is sent with what is left.
    counter = _CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(unused_target), counter)
    with RateLimitClient(channel=channel, check_retries=2) as client:
        with pytest.raises(UnavailableError):
            client.check("api", "k", timeout=5)
    assert counter.calls == {"Check": 3}
    first, second, third = counter.timeouts
    assert first <= 5 and second <= first - 0.05 and third <= second - 0.1
    # A hung server: the first attempt takes the whole timeout, and no retry is made.
    sock = _silent_listener()
    try:
        counter = _CountingInterceptor()
        target = "127.0.0.1:%d" % sock.getsockname()[1]
        channel = grpc.intercept_channel(grpc.insecure_channel(target), counter)
        with RateLimitClient(channel=channel, check_retries=2) as client:
            with pytest.raises(DeadlineExceededError):
                client.check("api", "k", timeout=0.3)
        assert counter.calls == {"Check": 1}
    finally:
        sock.close()


def test_a_retry_is_made_only_when_its_pause_and_a_call_fit():
    from ratelimit_client._common import MIN_ATTEMPT_SECONDS, attempt_timeout, check_retry_pause
    assert check_retry_pause(1, deadline=10.0, now=9.0) == approx(0.05)
    assert check_retry_pause(2, deadline=10.0, now=9.0) == approx(0.1)
    assert check_retry_pause(2, deadline=10.0, now=10.0 - 0.1 - MIN_ATTEMPT_SECONDS / 2) is None
    assert check_retry_pause(1, deadline=10.0, now=11.0) is None
    assert attempt_timeout(10.0, 9.5) == approx(0.5)
    assert attempt_timeout(10.0, 10.5) == MIN_ATTEMPT_SECONDS


def test_only_check_is_retried(unused_target):
    counter = _CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(unused_target), counter)
    with RateLimitClient(channel=channel, check_retries=2) as client:
        with pytest.raises(UnavailableError):
            client.check("api", "k")
        for call in (client.consume, client.reserve):
            with pytest.raises(UnavailableError):
                call("api", "k")
        with pytest.raises(UnavailableError):
            client.reset("api", "k")
    assert counter.calls == {"Check": 3, "Consume": 1, "Reserve": 1, "Reset": 1}


def test_admin_token_file_must_hold_a_token(tmp_path):
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="first line is empty"):
        RateLimitClient("127.0.0.1:1", admin_token_file=str(empty))


def test_wait_is_not_cut_short_by_a_clock_ahead_of_the_server():
    from ratelimit_client import Decision
    from ratelimit_client._common import wait_remaining
    # This machine's clock is 5 s ahead: retry_at looks past, retry_after says 30 s more.
    ahead = Decision(allowed=True, retry_at=now() - timedelta(seconds=5),
                     retry_after=timedelta(seconds=30))
    assert 29 < wait_remaining(ahead, time.monotonic()) <= 30
    # A retry_at of year 9999 is slept a day at a time (time.sleep rejects longer sleeps).
    far = Decision(allowed=True, retry_at=datetime.max.replace(tzinfo=timezone.utc),
                   retry_after=timedelta.max)
    assert wait_remaining(far, time.monotonic()) == 86400


def test_permission_denied_names_the_inline_config(start_server):
    server = start_server(["--inline_limits=deny"])
    with RateLimitClient(server.target) as client:
        with pytest.raises(PermissionDeniedError) as info:
            client.consume([Limit("api", "u"), Limit("job", "k", config=SLOW)])
        assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert info.value.field == "limits[1].config"
        assert client.check("api", "u").results[0].value == approx(3)  # nothing evaluated


def test_omit_receipts_takes_the_tokens_without_a_receipt(server):
    with RateLimitClient(server.target) as client:
        d = client.consume("api", "omit", omit_receipts=True)
        assert d.allowed and d.results[0].receipt == b"" and d.receipts == ()
        assert d.results[0].value == approx(2)
        assert client.check("api", "omit").results[0].value == approx(2)
        d = client.consume("api", "omit")
        assert d.allowed and d.results[0].receipt and len(d.receipts) == 1
        assert client.check("api", "omit").results[0].value == approx(1)
        d = client.reserve("other", "omit", 4, omit_receipts=True)
        assert d.allowed and d.receipts == ()
        assert client.check("other", "omit").results[0].value == approx(6)


def test_reset_on_a_server_whose_reset_is_disabled_says_so(start_server, monkeypatch):
    """A server started without an admin token refuses every Reset: PERMISSION_DENIED with the
    server's "Reset is disabled" message, unchanged, with or without a token."""
    monkeypatch.delenv("RATELIMIT_ADMIN_TOKEN", raising=False)
    server = start_server([], admin_token=False)
    for token in (None, ADMIN_TOKEN):
        with RateLimitClient(server.target, admin_token=token) as client:
            with pytest.raises(PermissionDeniedError) as info:
                client.reset("api", "u")
            assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
            assert info.value.details.startswith("Reset is disabled"), info.value.details
            assert "Reset is disabled" in str(info.value)
