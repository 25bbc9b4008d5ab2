"""The FastAPI dependency against a real server (FastAPI from Debian's python3-fastapi)."""

from typing import Optional

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
