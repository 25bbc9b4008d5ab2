"""The FastAPI dependency's max in flight (in_flight=) against a real server: a slot of an
inline concurrency limit held while the request runs, and given back on every way out (the
response sent, the endpoint raising, the client gone, the request cancelled)."""
from __future__ import annotations

import asyncio

import anyio
import pytest
from fastapi import Depends, FastAPI
from fastapi.responses import StreamingResponse

from conftest import ADMIN_TOKEN
from ratelimit_client import AsyncRateLimitClient, LimitConfig, LimitSource, RateLimitClient
from ratelimit_client.fastapi import RateLimit
from test_asgi import get_scope, request
from test_asgi_in_flight import SlowApp, exactly_n_in_flight

HOST = "10.0.0.1"  # the peer address request() sends: the default key


@pytest.fixture
def admin(server):
    """A blocking client of the server with the admin token, to list the leases held."""
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
def one_slot(admin):
    """An inline concurrency limit of one slot, and a function reading the slots held on it."""
    config = LimitConfig.concurrency(1)
    return config, held_slots(admin, config)


def held_slots(admin: RateLimitClient, config: LimitConfig):
    """The slots the server holds now for HOST on the inline limit "inflight"."""
    return lambda: admin.list_leases("inflight", HOST, source=LimitSource.INLINE,
                                     config=config).held


def in_flight(client: AsyncRateLimitClient, config: LimitConfig, **options):
    """A route's dependencies holding a slot of the inline limit "inflight" per request."""
    return [Depends(RateLimit(client, None, in_flight="inflight", in_flight_config=config,
                              **options))]


def served_behind_a_slot(endpoint, client: AsyncRateLimitClient,
                         config: LimitConfig) -> FastAPI:
    """An application serving `endpoint` at GET / behind in_flight(client, config)."""
    app = FastAPI()
    app.get("/", dependencies=in_flight(client, config))(endpoint)
    return app


def test_at_most_n_endpoints_run_at_once_and_the_rest_get_429(server, admin):
    config = LimitConfig.concurrency(3)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            slow = SlowApp()

            async def root():
                await slow.run()
                return {}

            app = served_behind_a_slot(root, client, config)
            denied = await exactly_n_in_flight(app, slow, held_slots(admin, config), n=3,
                                               requests=12)
            for _, headers, body in denied:
                assert body == b'{"detail":"Too Many Requests"}'
                # Not the lease TTL (30 s): a slot frees when a request ends.
                assert headers["retry-after"] == "1" and headers["ratelimit-reset"] == "1"

    asyncio.run(main())


def test_an_endpoint_that_raises_gives_its_slot_back(server, one_slot):
    config, held = one_slot

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            calls = []

            async def root():
                calls.append(1)
                if len(calls) == 1:
                    raise RuntimeError("endpoint failed")
                return {}

            app = served_behind_a_slot(root, client, config)

            with pytest.raises(RuntimeError, match="endpoint failed"):
                await request(app)
            status, headers, _ = await request(app)  # the one slot is free again
            assert status == 200 and headers["ratelimit-remaining"] == "0"
            assert len(calls) == 2
            assert held() == 0

    asyncio.run(main())


def test_a_client_gone_mid_stream_gives_the_slot_back(server, one_slot):
    config, held = one_slot

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            streaming = asyncio.Event()
            held_while_streaming = []

            async def root():
                async def body():
                    yield b"first"
                    streaming.set()
                    await asyncio.Event().wait()  # streams until the client goes

                return StreamingResponse(body())

            app = served_behind_a_slot(root, client, config)

            async def receive():  # the client disconnects once the stream has begun
                await streaming.wait()
                held_while_streaming.append(held())
                return {"type": "http.disconnect"}

            sent = []

            async def send(message):
                sent.append(message)

            await app(get_scope(HOST), receive, send)
            assert sent[0]["status"] == 200 and sent[1]["body"] == b"first"
            assert held_while_streaming == [1]
            assert held() == 0

    asyncio.run(main())


def test_a_request_cancelled_by_a_timeout_gives_the_slot_back(server, one_slot):
    config, held = one_slot

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            running = asyncio.Event()

            async def root():
                running.set()
                await asyncio.Event().wait()  # never answers: the timeout below cancels it

            app = served_behind_a_slot(root, client, config)

            async def with_a_timeout(scope, receive, send):  # as a timeout middleware does
                async with anyio.create_task_group() as group:
                    group.start_soon(app, scope, receive, send)
                    await running.wait()
                    assert held() == 1
                    group.cancel_scope.cancel()

            await with_a_timeout(get_scope(HOST), None, None)
            assert held() == 0

    asyncio.run(main())


def test_max_in_flight_follows_the_failure_mode(server):
    config = LimitConfig.concurrency(1)

    async def main():
        async with AsyncRateLimitClient(server.target, timeout=2) as client:
            app = FastAPI()
            calls = []

            @app.get("/open", dependencies=in_flight(client, config, failure_mode="open"))
            async def open_route():
                calls.append("open")

            @app.get("/closed", dependencies=in_flight(client, config))
            async def closed_route():
                calls.append("closed")

            assert (await request(app, path="/closed"))[0] == 200
            server.stop()
            assert (await request(app, path="/open"))[0] == 200
            status, _, body = await request(app, path="/closed")
            assert status == 503 and body == b'{"detail":"Rate limit service unavailable"}'
            assert calls == ["closed", "open"]

    asyncio.run(main())


def test_in_flight_or_name_is_required():
    with pytest.raises(ValueError, match="in_flight"):
        RateLimit("127.0.0.1:1", None, in_flight="")
    with pytest.raises(ValueError, match="name"):
        RateLimit("127.0.0.1:1", None)
