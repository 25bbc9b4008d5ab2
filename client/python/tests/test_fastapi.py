"""The FastAPI dependency against a real server (FastAPI from Debian's python3-fastapi)."""

import logging
from typing import Optional

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from ratelimit_client import Decision
from ratelimit_client.fastapi import RateLimit


def make_app(limiter: RateLimit) -> FastAPI:
    app = FastAPI()
    app.router.on_shutdown.append(limiter.aclose)
    app.state.calls = 0

    @app.get("/items")
    async def items(decision: Optional[Decision] = Depends(limiter)):
        app.state.calls += 1
        return {"value": decision.results[0].value if decision else None}

    return app


def test_200_then_429_with_retry_after_and_ratelimit_headers(server):
    app = make_app(RateLimit(server.target, "api",
                             key=lambda request: request.headers.get("x-user", "anon")))
    with TestClient(app) as http:
        responses = [http.get("/items", headers={"x-user": "alice"}) for _ in range(4)]
        other = http.get("/items", headers={"x-user": "bob"})
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert [r.headers.get("RateLimit-Remaining") for r in responses] == ["2", "1", "0", "0"]
    assert all(r.headers["RateLimit-Limit"] == "3" for r in responses)
    assert round(responses[0].json()["value"]) == 2  # the endpoint sees the Decision
    denied = responses[3]
    assert 3000 < int(denied.headers["Retry-After"]) <= 3600
    assert denied.headers["RateLimit-Reset"] == denied.headers["Retry-After"]
    assert denied.json() == {"detail": "Too Many Requests"}
    assert app.state.calls == 4  # three for alice, one for bob
    assert other.status_code == 200


def test_fail_open_and_fail_closed_with_the_server_stopped(server):
    fail_open = RateLimit(server.target, "other", failure_mode="open")
    fail_closed = RateLimit(server.target, "other", failure_mode="closed")
    app = FastAPI()
    app.router.on_shutdown.extend([fail_open.aclose, fail_closed.aclose])
    calls = []

    @app.get("/open")
    async def open_route(decision: Optional[Decision] = Depends(fail_open)):
        calls.append("open")
        return {"evaluated": decision is not None}

    @app.get("/closed", dependencies=[Depends(fail_closed)])
    async def closed_route():
        calls.append("closed")
        return {}

    with TestClient(app) as http:
        assert http.get("/open").json() == {"evaluated": True}
        assert http.get("/closed").status_code == 200
        server.stop()
        r = http.get("/open")
        assert r.status_code == 200 and r.json() == {"evaluated": False}
        assert "RateLimit-Limit" not in r.headers
        r = http.get("/closed")
        assert r.status_code == 503
    assert calls == ["open", "closed", "open"]


def test_failure_mode_defaults_to_closed(server):
    limiter = RateLimit(server.target, "other")
    assert limiter.limiter.failure_mode == "closed"
    app = make_app(limiter)
    with TestClient(app) as http:
        assert http.get("/items").status_code == 200
        server.stop()
        r = http.get("/items")
        assert r.status_code == 503 and r.json() == {"detail": "Rate limit service unavailable"}
    assert app.state.calls == 1


def test_a_misspelt_limit_name_answers_500_in_either_mode_and_is_logged_once(server, caplog):
    caplog.set_level(logging.WARNING, logger="ratelimit_client")
    for mode in ("open", "closed"):
        app = make_app(RateLimit(server.target, "apii", failure_mode=mode))
        with TestClient(app) as http:
            for _ in range(5):
                r = http.get("/items")
                assert r.status_code == 500, mode
                assert r.json() == {"detail": "Internal Server Error"}
        assert app.state.calls == 0
    lines = [r for r in caplog.records if r.name == "ratelimit_client"]
    assert len(lines) == 2, [r.getMessage() for r in lines]  # one per limiter
    assert all("NOT_FOUND" in r.getMessage() and r.levelno == logging.ERROR for r in lines)


def test_the_limit_name_is_required():
    with pytest.raises(TypeError, match="name"):
        RateLimit("127.0.0.1:1")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="name"):
        RateLimit("127.0.0.1:1", "")
