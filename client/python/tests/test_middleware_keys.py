"""A request whose key cannot be sent (empty, over the service's 1024 bytes, not text UTF-8 can
encode) is the caller's fault: the ASGI middleware and the FastAPI dependency answer 400 naming
the problem, without a call, whatever the failure mode; never 500, never let through."""
from __future__ import annotations

import asyncio

import grpc.aio
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from call_count import CountAsyncCalls
from ratelimit_client import AsyncRateLimitClient, LimitConfig
from ratelimit_client.asgi import RateLimitMiddleware
from ratelimit_client.fastapi import RateLimit
from test_asgi import App, request

# (key, the problem the answer names)
BAD_KEYS = [
    ("", "rate limit key missing"),
    ("k" * 1025, "rate limit key is longer than 1024 bytes"),
    ("\u00e9" * 513, "rate limit key is longer than 1024 bytes"),  # 513 characters, 1026 bytes
    ("user-\udcff", "rate limit key is not valid UTF-8 text"),  # a lone surrogate
    (b"user-\xff", "rate limit key is not valid UTF-8 text"),
]
BAD_KEY_IDS = ["empty", "1025-ascii-bytes", "1026-utf8-bytes", "lone-surrogate", "bytes-not-utf8"]


@pytest.mark.parametrize("key,problem", BAD_KEYS, ids=BAD_KEY_IDS)
@pytest.mark.parametrize("reachable", [True, False], ids=["service-up", "service-down"])
def test_asgi_answers_a_key_that_cannot_be_sent_400_without_a_call(
        server, unused_target, key, problem, reachable):
    count = CountAsyncCalls()
    target = server.target if reachable else unused_target

    async def main():
        async with AsyncRateLimitClient(target, interceptors=[count], timeout=0.5) as client:
            inner = App()
            for mode in ("open", "closed"):
                for in_flight in ({}, {"in_flight": "slots",
                                       "in_flight_config": LimitConfig.concurrency(2)}):
                    app = RateLimitMiddleware(inner, client, "api", key=lambda scope: key,
                                              failure_mode=mode, **in_flight)
                    status, headers, body = await request(app)
                    assert (status, body) == (400, problem.encode() + b"\n"), (mode, in_flight)
            assert inner.calls == 0

    asyncio.run(main())
    assert count.calls == {}, "a bad key was sent: %s" % count.calls


def test_asgi_sends_a_key_of_1024_bytes(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            inner = App()
            app = RateLimitMiddleware(inner, client, "api", key=lambda scope: "\u00e9" * 512)
            assert (await request(app))[0] == 200
            assert inner.calls == 1

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_fastapi_answers_a_key_that_cannot_be_sent_400_without_a_call(unused_target, mode):
    # The service is unreachable: a call would be answered 503 or, failing open, let through.
    keys = {str(i): key for i, (key, _) in enumerate(BAD_KEYS)}
    by_function = RateLimit(unused_target, "api", failure_mode=mode,
                            key=lambda request: keys[request.headers["x-case"]])
    by_header = RateLimit(unused_target, "api", failure_mode=mode,
                          key=lambda request: request.headers["x-user"])
    app = FastAPI()
    app.router.on_shutdown.extend([by_function.aclose, by_header.aclose])
    calls = []

    @app.get("/items", dependencies=[Depends(by_function)])
    async def items():
        calls.append("items")
        return {}

    @app.get("/by-header", dependencies=[Depends(by_header)])
    async def by_header_route():
        calls.append("by-header")
        return {}

    with TestClient(app, raise_server_exceptions=False) as http:
        for i, (key, problem) in enumerate(BAD_KEYS):
            response = http.get("/items", headers={"x-case": str(i)})
            assert response.status_code == 400, (key[:8], response.status_code)
            assert response.json() == {"detail": problem}
        response = http.get("/by-header", headers={"x-user": ""})  # an empty header
        assert response.status_code == 400
        assert response.json() == {"detail": "rate limit key missing"}
    assert calls == []
