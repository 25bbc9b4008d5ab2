"""The ASGI middleware's max in flight (in_flight=): a slot of a concurrency limit held while
the application runs, against the fake of the lease calls (lease_fake.py)."""
from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest

from lease_fake import FakeLeases
from ratelimit_client import AsyncRateLimitClient, Kind, LimitConfig
from ratelimit_client.asgi import RateLimitMiddleware
from test_asgi import App, request


class SlowApp:
    """An ASGI application that holds each request until `go` is set, counting the requests
    running at once and the most ever."""

    def __init__(self):
        self.go = asyncio.Event()
        self.running = 0
        self.most = 0

    async def run(self):
        """Counts itself in while it waits for `go`."""
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.go.wait()
        finally:
            self.running -= 1

    async def __call__(self, scope, receive, send):
        await self.run()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})


async def exactly_n_in_flight(app, slow, held, n=2, requests=5):
    """`requests` concurrent slow requests through `app`, whose concurrency limit has `n` slots:
    exactly n run, the others are answered 429 with Retry-After (their answers are returned);
    when the n end, their slots are free."""
    tasks = [asyncio.ensure_future(request(app)) for _ in range(requests)]
    for _ in range(2000):
        if slow.running == n and sum(t.done() for t in tasks) == requests - n:
            break
        await asyncio.sleep(0.005)
    denied = [t.result() for t in tasks if t.done()]
    assert len(denied) == requests - n and slow.running == n and held() == n
    for status, headers, _ in denied:
        assert status == 429
        assert int(headers["retry-after"]) >= 0
        assert headers["ratelimit-limit"] == str(n) and headers["ratelimit-remaining"] == "0"
    slow.go.set()
    done = await asyncio.gather(*tasks)
    assert sorted(s for s, _, _ in done) == [200] * n + [429] * (requests - n)
    assert slow.most == n
    for _ in range(200):  # the release follows the response's last message
        if held() == 0:
            break
        await asyncio.sleep(0.005)
    assert held() == 0
    assert (await request(app))[0] == 200
    return denied


@pytest.fixture
def fake():
    f = FakeLeases(capacity=2)
    try:
        yield f
    finally:
        f.stop()


def test_max_in_flight_two_runs_two_and_answers_the_rest_429(fake):
    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            slow = SlowApp()
            app = RateLimitMiddleware(slow, client, None, in_flight="inflight")
            denied = await exactly_n_in_flight(app, slow,
                                               lambda: fake.held("inflight", "10.0.0.1"))
            assert all(body == b"Too Many Requests\n" for _, _, body in denied)

    asyncio.run(main())


def test_a_request_finding_no_free_slot_is_told_to_retry_in_a_second(fake):
    # The holder's lease has 30 s to live, but it is released when its request ends: the
    # server's retry time (the TTL) is not the wait, 1 s is.
    fake.capacity = 1

    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            slow = SlowApp()
            app = RateLimitMiddleware(slow, client, None, in_flight="inflight")
            holder = asyncio.ensure_future(request(app))
            for _ in range(2000):
                if slow.running:
                    break
                await asyncio.sleep(0.005)
            status, headers, _ = await request(app)
            assert status == 429 and slow.running == 1
            assert headers["retry-after"] == "1" and headers["ratelimit-reset"] == "1"
            slow.go.set()
            assert (await holder)[0] == 200

    asyncio.run(main())


def test_a_rate_limit_refusing_keeps_the_servers_retry_time(server):
    # The slot is free but the rate limit's one token is spent: retry in about an hour.
    rate = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=1)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            app = RateLimitMiddleware(App(), client, "retry_api", config=rate,
                                      in_flight="retry_inflight",
                                      in_flight_config=LimitConfig.concurrency(5))
            assert (await request(app))[0] == 200
            status, headers, _ = await request(app)
            assert status == 429 and 3000 < int(headers["retry-after"]) <= 3600
            assert headers["ratelimit-reset"] == headers["retry-after"]

    asyncio.run(main())


def test_the_slot_goes_back_when_the_application_raises(fake):
    async def failing(scope, receive, send):
        raise RuntimeError("handler failed")

    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            app = RateLimitMiddleware(failing, client, None, in_flight="inflight")
            with pytest.raises(RuntimeError):
                await request(app)
            assert fake.held("inflight", "10.0.0.1") == 0
            assert len(fake.releases) == 1

    asyncio.run(main())


def test_with_a_rate_limit_allowed_headers_describe_the_slots(server):
    # The rate limit has fewer tokens left (0 of 1) than the slots (4 of 5): the headers still
    # describe the slots, as the docstrings of hold and the FastAPI dependency say.
    rate = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=1)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            app = RateLimitMiddleware(App(), client, "hdr_api", config=rate,
                                      in_flight="hdr_inflight",
                                      in_flight_config=LimitConfig.concurrency(5))
            status, headers, _ = await request(app)
            assert status == 200
            assert headers["ratelimit-limit"] == "5" and headers["ratelimit-remaining"] == "4"

    asyncio.run(main())


def test_with_a_rate_limit_one_acquire_takes_both(fake):
    config = LimitConfig.concurrency(2)

    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            app = RateLimitMiddleware(App(), client, "api", in_flight="inflight",
                                      in_flight_config=config)
            status, headers, _ = await request(app)
            assert status == 200 and headers["ratelimit-remaining"] == "1"
            sent = fake.acquires[0]
            assert [l.name for l in sent.limits] == ["inflight", "api"]
            assert sent.limits[0].config.kind == Kind.CONCURRENCY
            assert sent.limits[1].key == "10.0.0.1"
            assert fake.held("inflight", "10.0.0.1") == 0

    asyncio.run(main())


def test_max_in_flight_follows_the_failure_mode(fake):
    fake.acquire_error = grpc.StatusCode.UNAVAILABLE

    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            inner = App()
            open_app = RateLimitMiddleware(inner, client, None, in_flight="inflight",
                                           failure_mode="open")
            closed_app = RateLimitMiddleware(inner, client, None, in_flight="inflight")
            assert (await request(open_app))[0] == 200 and inner.calls == 1
            assert (await request(closed_app))[0] == 503 and inner.calls == 1
            fake.acquire_error = grpc.StatusCode.NOT_FOUND
            assert (await request(open_app))[0] == 500 and inner.calls == 1

    asyncio.run(main())


def test_in_flight_must_name_a_limit():
    with pytest.raises(ValueError, match="in_flight"):
        RateLimitMiddleware(App(), "127.0.0.1:1", None, in_flight="")
    with pytest.raises(ValueError, match="name"):
        RateLimitMiddleware(App(), "127.0.0.1:1", None)
