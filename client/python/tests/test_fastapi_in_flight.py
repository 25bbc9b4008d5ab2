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
from test_asgi import request
from test_asgi_in_flight import SlowApp, exactly_n_in_flight

HOST = "10.0.0.1"  # the peer address request() sends: the default key


@pytest.fixture
def admin(server):
    """A blocking client of the server with the admin token, to list the leases held."""
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:
        yield client


def held_slots(admin: RateLimitClient, config: LimitConfig):
    """The slots the server holds now for HOST on the inline limit "inflight"."""
    return lambda: admin.list_leases("inflight", HOST, source=LimitSource.INLINE,
                                     config=config).held


def scope_of_get(path: str = "/"):
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [], "client": (HOST, 40000), "server": ("test", 80)}


def test_at_most_n_endpoints_run_at_once_and_the_rest_get_429(server, admin):
    config = LimitConfig.concurrency(3)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            limiter = RateLimit(client, None, in_flight="inflight", in_flight_config=config)
            slow = SlowApp()
            app = FastAPI()

            @app.get("/", dependencies=[Depends(limiter)])
            async def root():
                await slow.run()
                return {}

            denied = await exactly_n_in_flight(app, slow, held_slots(admin, config), n=3,
                                               requests=12)
            for _, headers, body in denied:
                assert body == b'{"detail":"Too Many Requests"}'
                assert 0 < int(headers["retry-after"]) <= 30  # the default lease TTL, 30 s

    asyncio.run(main())


def test_an_endpoint_that_raises_gives_its_slot_back(server, admin):
    config = LimitConfig.concurrency(1)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            limiter = RateLimit(client, None, in_flight="inflight", in_flight_config=config)
            app = FastAPI()
            calls = []

            @app.get("/", dependencies=[Depends(limiter)])
            async def root():
                calls.append(1)
                if len(calls) == 1:
                    raise RuntimeError("endpoint failed")
                return {}

            with pytest.raises(RuntimeError, match="endpoint failed"):
                await request(app)
            status, headers, _ = await request(app)  # the one slot is free again
            assert status == 200 and headers["ratelimit-remaining"] == "0"
            assert len(calls) == 2
            assert held_slots(admin, config)() == 0

    asyncio.run(main())


def test_a_client_gone_mid_stream_gives_the_slot_back(server, admin):
    config = LimitConfig.concurrency(1)
    held = held_slots(admin, config)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            limiter = RateLimit(client, None, in_flight="inflight", in_flight_config=config)
            app = FastAPI()
            streaming = asyncio.Event()
            held_while_streaming = []

            @app.get("/", dependencies=[Depends(limiter)])
            async def root():
                async def body():
                    yield b"first"
                    streaming.set()
                    await asyncio.Event().wait()  # streams until the client goes

                return StreamingResponse(body())

            async def receive():  # the client disconnects once the stream has begun
                await streaming.wait()
                held_while_streaming.append(held())
                return {"type": "http.disconnect"}

            sent = []

            async def send(message):
                sent.append(message)

            await app(scope_of_get(), receive, send)
            assert sent[0]["status"] == 200 and sent[1]["body"] == b"first"
            assert held_while_streaming == [1]
            assert held() == 0

    asyncio.run(main())


def test_a_request_cancelled_by_a_timeout_gives_the_slot_back(server, admin):
    config = LimitConfig.concurrency(1)
    held = held_slots(admin, config)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            limiter = RateLimit(client, None, in_flight="inflight", in_flight_config=config)
            app = FastAPI()
            running = asyncio.Event()

            @app.get("/", dependencies=[Depends(limiter)])
            async def root():
                running.set()
                await asyncio.Event().wait()  # never answers: the timeout below cancels it

            async def with_a_timeout(scope, receive, send):  # as a timeout middleware does
                async with anyio.create_task_group() as group:
                    group.start_soon(app, scope, receive, send)
                    await running.wait()
                    assert held() == 1
                    group.cancel_scope.cancel()

            await with_a_timeout(scope_of_get(), None, None)
            assert held() == 0

    asyncio.run(main())


def test_max_in_flight_follows_the_failure_mode(server):
    config = LimitConfig.concurrency(1)

    async def main():
        async with AsyncRateLimitClient(server.target, timeout=2) as client:
            fail_open = RateLimit(client, None, in_flight="inflight", in_flight_config=config,
                                  failure_mode="open")
            fail_closed = RateLimit(client, None, in_flight="inflight",
                                    in_flight_config=config)
            app = FastAPI()
            calls = []

            @app.get("/open", dependencies=[Depends(fail_open)])
            async def open_route():
                calls.append("open")

            @app.get("/closed", dependencies=[Depends(fail_closed)])
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
