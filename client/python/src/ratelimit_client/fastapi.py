"""A FastAPI dependency that rate-limits an endpoint (or a router, or the whole app), and may
hold a slot of a concurrency limit while the request runs ("max in flight").

    limiter = RateLimit("127.0.0.1:8081", "api", key=lambda request: request.client.host)
    @app.get("/items", dependencies=[Depends(limiter)])

Needs FastAPI (Debian: python3-fastapi; see the README's Install)."""

from typing import AsyncIterator, Awaitable, Callable, Optional, Union

import anyio
from fastapi import HTTPException, Request, Response

from .aio import AsyncRateLimitClient
from .http import DEFAULT_FAILURE_MODE, FAIL_CLOSED, FAIL_OPEN, FailureMode, Limiter, _resolve
from .leases import AsyncLease
from .types import Decision, LimitConfig

KeyFunc = Callable[[Request], Union[Optional[str], Awaitable[Optional[str]]]]

__all__ = ["RateLimit", "FailureMode", "FAIL_CLOSED", "FAIL_OPEN", "request_ip"]


def request_ip(request: Request) -> Optional[str]:
    """The default key: the peer address of the connection."""
    return request.client.host if request.client else "unknown"


class RateLimit:
    """A dependency taking `count` tokens of the limit `name`, keyed by `key(request)`.

    Allowed: the endpoint runs, its response carries the RateLimit-* headers, and the
    dependency's value is the Decision (None when the request was not evaluated). Denied:
    HTTPException 429 with Retry-After and the RateLimit-* headers. Service unreachable
    (UNAVAILABLE, DEADLINE_EXCEEDED): failure_mode "closed" (default) raises HTTPException
    `failure_status` (503), "open" lets the request through. Any other error of the service
    (NOT_FOUND for a limit name it does not define...): HTTPException 500 whatever
    failure_mode says; it is logged. A key that cannot be sent (empty, longer than 1024 bytes in
    UTF-8, or not text UTF-8 can encode, see http.key_problem): HTTPException 400 naming the
    problem (not the key), without a call, whatever failure_mode says. `name` is required (no
    default: two routes or services
    would share its counter), unless `in_flight` is given.

    Max in flight: `in_flight` names a concurrency limit (`in_flight_config` defines it
    inline, e.g. LimitConfig.concurrency(2)); each request holds one slot of it, of the key
    `key(request)` gives, from before the endpoint runs until FastAPI runs the dependency's
    exit code, extended in the background meanwhile. The slot goes back on every way out: the
    response sent, the endpoint raising, the client gone (a streaming response cancelled). A
    request finding no free slot gets HTTPException 429 with Retry-After 1 (and RateLimit-Reset
    1: a slot frees when a request ends, sooner than the server's retry time, a lease's
    expiry), and the endpoint does not run; the failure policy is the same. With `name` too, the
    request's tokens and its slot are taken in one acquire, all or nothing; the headers then
    describe the concurrency limit unless the rate limit denied (its refusal keeps the server's
    retry time).

    FastAPI runs a dependency's exit code after the response is sent, except in versions
    0.106 to 0.117, where it runs when the endpoint returns (before a StreamingResponse
    streams): there the slot covers the endpoint only. A dependency cannot act on the
    response's messages: the slot goes back after the response has been sent, so a client
    sending its next request as soon as it has read a response may find it still held (the
    ASGI middleware gives it back before the response's end)."""

    def __init__(self, client: Union[AsyncRateLimitClient, str], name: Optional[str], *,
                 key: KeyFunc = request_ip,
                 count: Union[float, Callable[[Request], float]] = 1,
                 config: Optional[LimitConfig] = None,
                 failure_mode: FailureMode = DEFAULT_FAILURE_MODE, failure_status: int = 503,
                 timeout: Optional[float] = None, in_flight: Optional[str] = None,
                 in_flight_config: Optional[LimitConfig] = None):
        self.key = key
        self.count = count
        self.failure_status = failure_status
        self.limiter = Limiter(client, name, config=config, failure_mode=failure_mode,
                               timeout=timeout, in_flight=in_flight,
                               in_flight_config=in_flight_config)

    async def aclose(self) -> None:
        """Closes the client created from a target (call it at shutdown)."""
        await self.limiter.aclose()

    async def __call__(self, request: Request,
                       response: Response) -> AsyncIterator[Optional[Decision]]:
        key = await _resolve(self.key(request))
        count = self.count(request) if callable(self.count) else self.count
        lease: Optional[AsyncLease] = None
        if self.limiter.in_flight is not None:
            outcome, lease = await self.limiter.hold(key, count)
        else:
            outcome = await self.limiter.decide(key, count)
        if outcome.status == "denied":
            raise HTTPException(status_code=429, detail="Too Many Requests",
                                headers=dict(outcome.headers))
        if outcome.status == "unavailable":
            raise HTTPException(status_code=self.failure_status,
                                detail="Rate limit service unavailable")
        if outcome.status == "error":
            raise HTTPException(status_code=500, detail="Internal Server Error")
        if outcome.status == "bad_key":
            raise HTTPException(status_code=400, detail=outcome.problem)
        for name, value in outcome.headers:
            response.headers[name] = value
        if lease is None:
            yield outcome.decision
            return
        try:
            yield outcome.decision
        finally:
            # Shielded: a request being cancelled still gives its slot back (release failures
            # are logged; the lease then expires by itself).
            with anyio.CancelScope(shield=True):
                await lease.__aexit__(None, None, None)
