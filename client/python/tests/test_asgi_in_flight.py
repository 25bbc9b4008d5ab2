"""The ASGI middleware's max in flight (in_flight=): a slot of a concurrency limit held while
the application runs, against the fake of the lease calls (lease_fake.py)."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

import grpc
import pytest

from conftest import ADMIN_TOKEN
from lease_fake import FakeLeases
from ratelimit_client import AsyncRateLimitClient, Kind, LimitConfig, LimitSource
from ratelimit_client.asgi import RateLimitMiddleware
from test_asgi import App, get_scope, request

HOST = "10.0.0.1"  # the peer address get_scope() gives: the default key


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
    for _ in range(200):  # the FastAPI dependency releases after the response is sent
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


def ends(message) -> bool:
    """Whether `message` is the response's last (the body's, more_body false or absent)."""
    return message["type"] == "http.response.body" and not message.get("more_body", False)


async def serve(app, on_message):
    """One GET through `app`, whose ASGI server (the outer send) awaits `on_message(message)`
    before taking each message; returns the messages taken."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        await on_message(message)
        sent.append(message)

    await app(get_scope(HOST), receive, send)
    return sent


@pytest.fixture
def one_slot(server):
    """An inline concurrency limit of one slot on the real server, and an async function
    reading the slots the server holds for HOST on it (ListLeases, with the admin token)."""
    config = LimitConfig.concurrency(1)

    async def held():
        async with AsyncRateLimitClient(server.target, admin_token=ADMIN_TOKEN) as admin:
            listed = await admin.list_leases("inflight", HOST, source=LimitSource.INLINE,
                                             config=config)
        return listed.held

    return config, held


def test_a_sequential_client_finds_the_slot_free_when_each_response_ends(server, one_slot):
    # One slot, requests one after another: when the response's last message reaches the
    # ASGI server, the client could send its next request at once, so the slot must already
    # be back on the server by then; and no request is refused.
    config, held = one_slot

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            app = RateLimitMiddleware(App(), client, None, in_flight="inflight",
                                      in_flight_config=config)
            for i in range(30):
                held_at_end = []

                async def on_message(message):
                    if ends(message):
                        held_at_end.append(await held())

                sent = await serve(app, on_message)
                assert sent[0]["status"] == 200, "request %d refused" % i
                assert held_at_end == [0], \
                    "request %d: slots held when its last message was sent" % i

    asyncio.run(main())


def test_a_stream_holds_the_slot_until_its_last_chunk(server, one_slot):
    # The first chunk passes on while the slot is held (streaming is not delayed by the
    # release); the slot is held between the chunks and is free when the last one is sent.
    config, held = one_slot

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            seen = []

            async def streaming(scope, receive, send):
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b"first", "more_body": True})
                seen.append(("between", await held()))
                await send({"type": "http.response.body", "body": b"last"})

            async def on_message(message):
                if message["type"] == "http.response.body":
                    seen.append((message["body"].decode(), await held()))

            app = RateLimitMiddleware(streaming, client, None, in_flight="inflight",
                                      in_flight_config=config)
            sent = await serve(app, on_message)
            assert b"".join(m.get("body", b"") for m in sent[1:]) == b"firstlast"
            assert seen == [("first", 1), ("between", 1), ("last", 0)]

    asyncio.run(main())


@pytest.mark.parametrize("then", ["returns", "raises"])
def test_a_finished_response_is_released_once_before_its_end(fake, then):
    # The slot goes back before the last message; the application returning or raising
    # afterwards sends no second Release.
    async def finishing(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done", "more_body": False})
        if then == "raises":
            raise RuntimeError("failed after its response")

    async def main():
        async with AsyncRateLimitClient(fake.target) as client:
            app = RateLimitMiddleware(finishing, client, None, in_flight="inflight")
            releases_at_end = []

            async def on_message(message):
                if ends(message):
                    releases_at_end.append(len(fake.releases))

            if then == "raises":
                with pytest.raises(RuntimeError, match="failed after its response"):
                    await serve(app, on_message)
            else:
                await serve(app, on_message)
            assert releases_at_end == [1]
            assert len(fake.releases) == 1 and fake.held("inflight", HOST) == 0

    asyncio.run(main())


def test_a_release_left_unanswered_holds_the_end_back_for_the_timeout_only(fake, caplog):
    # Release hangs: the last message waits for the release's deadline (the calls' timeout),
    # then passes on; the failure is logged and the lease is left to expire by its TTL.
    caplog.set_level(logging.WARNING, logger="ratelimit_client")
    fake.release_hang = True
    timeout = 0.3

    async def main():
        async with AsyncRateLimitClient(fake.target, timeout=timeout) as client:
            app = RateLimitMiddleware(App(), client, None, in_flight="inflight")
            waited = []

            async def on_message(message):
                if message["type"] == "http.response.start":
                    waited.append(time.monotonic())
                elif ends(message):
                    waited.append(time.monotonic() - waited.pop())

            sent = await serve(app, on_message)
            assert sent[-1]["body"] == b"ok"
            assert timeout * 0.9 <= waited[0] < timeout + 2
            assert len(fake.releases) == 1

    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "ratelimit_client"]
    assert len(lines) == 1 and "could not release lease" in lines[0]
