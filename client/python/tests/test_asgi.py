"""The ASGI middleware, driven by a minimal ASGI harness (no framework) and inside a
Starlette application, against a real server."""
from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from ratelimit_client import AsyncRateLimitClient, Kind, LimitConfig
from ratelimit_client.asgi import RateLimitMiddleware


class App:
    """An ASGI application answering 200 "ok" and counting its calls."""

    def __init__(self):
        self.calls = 0

    async def __call__(self, scope, receive, send):
        assert scope["type"] == "http"
        self.calls += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"x-app", b"1")]})
        await send({"type": "http.response.body", "body": b"ok"})


def get_scope(host="10.0.0.1", path="/"):
    """The ASGI scope of a GET `path` from `host`."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "headers": [],
            "client": (host, 40000), "server": ("test", 80)}


async def request(app, host="10.0.0.1", path="/"):
    """Sends one GET `path` to `app`; returns (status, headers as a lower-cased dict, body)."""
    scope = get_scope(host, path)
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    assert start["type"] == "http.response.start"
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


def test_200_then_429_with_retry_after_and_ratelimit_headers(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            inner = App()
            app = RateLimitMiddleware(inner, client, "api")
            for remaining in (2, 1, 0):
                status, headers, body = await request(app)
                assert (status, body) == (200, b"ok") and headers["x-app"] == "1"
                assert headers["ratelimit-limit"] == "3"
                assert headers["ratelimit-remaining"] == str(remaining)
                assert "retry-after" not in headers
            status, headers, body = await request(app)
            assert status == 429 and body == b"Too Many Requests\n"
            assert inner.calls == 3  # the denied request never reached the application
            retry_after = int(headers["retry-after"])
            assert 3000 < retry_after <= 3600  # a token of a 1/h bucket
            assert headers["ratelimit-reset"] == headers["retry-after"]
            assert headers["ratelimit-limit"] == "3"
            assert headers["ratelimit-remaining"] == "0"
            status, _, _ = await request(app, host="10.0.0.2")  # another key
            assert status == 200

    asyncio.run(main())


def test_reset_header_of_an_allowed_request_with_an_inline_token_bucket(server):
    config = LimitConfig(Kind.TOKEN_BUCKET, rate=1, period=timedelta(hours=1), capacity=5)

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            app = RateLimitMiddleware(App(), client, "web", config=config, count=2)
            status, headers, _ = await request(app)
            assert status == 200
            assert headers["ratelimit-limit"] == "5"
            assert headers["ratelimit-remaining"] == "3"
            assert 7100 < int(headers["ratelimit-reset"]) <= 7200  # two tokens at 1/h

    asyncio.run(main())


def test_fail_open_and_fail_closed_with_the_server_stopped(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            inner = App()
            open_app = RateLimitMiddleware(inner, client, "other", failure_mode="open")
            closed_app = RateLimitMiddleware(inner, client, "other", failure_mode="closed")
            assert (await request(open_app))[0] == 200
            assert (await request(closed_app))[0] == 200
            assert inner.calls == 2
            server.stop()
            status, headers, body = await request(open_app)
            assert status == 200 and body == b"ok" and inner.calls == 3
            assert not any(h.startswith("ratelimit-") for h in headers)
            status, headers, body = await request(closed_app)
            assert status == 503 and inner.calls == 3

    asyncio.run(main())


def test_unkeyed_requests_and_other_scopes_pass_through(server):
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            inner = App()
            app = RateLimitMiddleware(inner, client, "api", key=lambda scope: None)
            for _ in range(5):
                status, headers, _ = await request(app)
                assert status == 200 and "ratelimit-limit" not in headers
            assert inner.calls == 5
            seen = []

            async def lifespan_app(scope, receive, send):
                seen.append(scope["type"])

            await RateLimitMiddleware(lifespan_app, client, "api")(
                {"type": "lifespan"}, None, None)
            assert seen == ["lifespan"]

    asyncio.run(main())


def test_async_key_function(server):
    async def key(scope):
        await asyncio.sleep(0)
        return dict(scope["headers"]).get(b"x-api-key", b"anon").decode()

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            app = RateLimitMiddleware(App(), client, "api", key=key)
            statuses = [(await request(app))[0] for _ in range(4)]
            assert statuses == [200, 200, 200, 429]

    asyncio.run(main())


def test_inside_a_starlette_application(server):
    async def home(request):
        return PlainTextResponse("home")

    app = Starlette(routes=[Route("/", home)])
    app.add_middleware(RateLimitMiddleware, client=server.target, name="api")
    with TestClient(app) as http:
        responses = [http.get("/") for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].text == "home"
    assert responses[2].headers["RateLimit-Remaining"] == "0"
    assert int(responses[3].headers["Retry-After"]) > 3000
    assert responses[3].headers["RateLimit-Limit"] == "3"


def test_failure_mode_must_be_open_or_closed():
    import pytest
    with pytest.raises(ValueError, match="failure_mode"):
        RateLimitMiddleware(App(), "127.0.0.1:1", "api", failure_mode="sideways")


def test_an_answer_the_server_failed_open_passes_without_headers():
    """A server started with --failure_policy=open whose store fails answers allowed with
    failed_open and no values: the request runs and no RateLimit-* header is made up."""
    from ratelimit_client import Decision, LimitResult
    from ratelimit_client._common import to_decision
    from ratelimit_client._pb import ratelimit_pb2 as pb

    response = pb.RateLimitResponse(allowed=True, failed_open=True, denied_by=-1)
    response.results.add(name="api", key="u", allowed=True)
    decision = to_decision(response)
    assert decision.failed_open and decision.allowed and decision.denied_by is None

    class FailedOpenClient(AsyncRateLimitClient):
        async def consume(self, *args, **kwargs):
            return decision

    async def main():
        inner = App()
        app = RateLimitMiddleware(inner, FailedOpenClient("127.0.0.1:1"), "api")
        status, headers, _ = await request(app)
        assert status == 200 and inner.calls == 1
        assert not any(h.startswith("ratelimit-") for h in headers)
        assert isinstance(decision.results[0], LimitResult) and isinstance(decision, Decision)

    asyncio.run(main())


def test_failure_mode_defaults_to_closed(server):
    """With no failure_mode, an unreachable service refuses the request (503): a limit is a
    promise about cost or abuse that an outage must not silently break."""
    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            inner = App()
            app = RateLimitMiddleware(inner, client, "other")
            assert app.limiter.failure_mode == "closed"
            assert (await request(app))[0] == 200
            server.stop()
            status, headers, body = await request(app)
            assert (status, body) == (503, b"Rate limit service unavailable\n")
            assert inner.calls == 1

    asyncio.run(main())


def test_a_misspelt_limit_name_answers_500_in_either_mode_and_is_logged_once(server, caplog):
    """NOT_FOUND is a configuration error, not an outage: never let through (not even when
    failing open), never 503; logged once, not once per request."""
    caplog.set_level(logging.WARNING, logger="ratelimit_client")

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            inner = App()
            for mode in ("open", "closed"):
                app = RateLimitMiddleware(inner, client, "apii", failure_mode=mode)
                for _ in range(5):
                    status, headers, body = await request(app)
                    assert (status, body) == (500, b"Internal Server Error\n"), mode
                    assert not any(h.startswith("ratelimit-") for h in headers)
            assert inner.calls == 0

    asyncio.run(main())
    lines = [r for r in caplog.records if r.name == "ratelimit_client"]
    assert len(lines) == 2, [r.getMessage() for r in lines]  # one per failure mode
    for line in lines:
        assert line.levelno == logging.ERROR
        assert "NOT_FOUND" in line.getMessage() and "'apii'" in line.getMessage()


def test_an_unreachable_service_is_logged_once_not_per_request(server, caplog):
    caplog.set_level(logging.WARNING, logger="ratelimit_client")

    async def main():
        async with AsyncRateLimitClient(server.target) as client:
            app = RateLimitMiddleware(App(), client, "other", failure_mode="open")
            server.stop()
            for _ in range(20):
                assert (await request(app))[0] == 200

    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "ratelimit_client"]
    # One line per code (a stopped server answers UNAVAILABLE; a slow one DEADLINE_EXCEEDED).
    codes = [code for line in lines for code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
             if "unreachable (%s" % code in line]
    assert 1 <= len(lines) <= 2 and sorted(set(codes)) == sorted(codes), lines
    assert len(codes) == len(lines) and all("failing open" in line for line in lines), lines


def test_the_limit_name_is_required():
    """No default name: two routes or services using one would share its counter."""
    import pytest
    with pytest.raises(TypeError, match="name"):
        RateLimitMiddleware(App(), "127.0.0.1:1")
    for name in ("", None):
        with pytest.raises(ValueError, match="name"):
            RateLimitMiddleware(App(), "127.0.0.1:1", name)
