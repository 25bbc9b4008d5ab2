"""ASGI middleware: rate-limits every HTTP request of any ASGI application (Starlette,
FastAPI, Quart, Django's ASGI handler...); it depends on no web framework."""
from __future__ import annotations

import asyncio
from typing import (Any, Awaitable, Callable, List, MutableMapping, Optional, Set, Tuple,
                    Union)

from .aio import AsyncRateLimitClient
from .http import (DEFAULT_FAILURE_MODE, FAIL_CLOSED, FAIL_OPEN, FailureMode, Limiter, _resolve,
                   rate_limit_headers)
from .leases import AsyncLease
from .types import LimitConfig

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
KeyFunc = Callable[[Scope], Union[Optional[str], Awaitable[Optional[str]]]]

__all__ = ["RateLimitMiddleware", "FailureMode", "FAIL_CLOSED", "FAIL_OPEN", "client_ip",
           "rate_limit_headers"]


def client_ip(scope: Scope) -> Optional[str]:
    """The default key: the peer address of the connection (behind a proxy, pass a key
    function that reads the forwarded address your proxy sets)."""
    client = scope.get("client")
    return client[0] if client else "unknown"


class RateLimitMiddleware:
    """Takes `count` tokens of the limit `name`, keyed by `key(scope)`, for every HTTP request.

    - allowed: the application runs; its response gets RateLimit-Limit, RateLimit-Remaining
      (and RateLimit-Reset when known, see rate_limit_headers).
    - denied: 429 Too Many Requests with Retry-After and the RateLimit-* headers; the
      application does not run.
    - the service unreachable (UNAVAILABLE, DEADLINE_EXCEEDED): failure_mode "closed"
      (default) answers `failure_status` (503); "open" runs the application without headers.
    - any other error of the service (NOT_FOUND for a limit name it does not define,
      INVALID_ARGUMENT, PERMISSION_DENIED...): 500, whatever failure_mode says; it is logged.
    - a key that cannot be sent (empty, longer than 1024 bytes in UTF-8, or not text UTF-8 can
      encode, see http.key_problem): 400 Bad Request naming the problem (not the key), without
      a call and whatever failure_mode says; the application does not run.
    `name` is required (no default: two routes or services would share its counter), unless
    `in_flight` is given.

    Max in flight: `in_flight` names a concurrency limit (`in_flight_config` defines it
    inline, e.g. LimitConfig.concurrency(2)); each request holds one slot of it, of the key
    `key(scope)` gives, from before the application runs until its response ends, extended in
    the background meanwhile. The slot is given back before the response's last message (the
    body's message without more_body, or the last trailers when the start announced them) is
    passed on to the server, which waits for the release (at most the call timeout; a release
    that fails is logged, and the lease expires by its TTL): a client that waits for each
    response before sending the next is never refused for want of a slot. Earlier body chunks
    pass at once. An application that returns or raises without ending its response gives the
    slot back then; work it does after its response has ended (background tasks) holds no
    slot. A request finding
    no free slot is answered 429 with Retry-After 1 (and RateLimit-Reset 1: a slot frees when a
    request ends, sooner than the server's retry time, a lease's expiry), without running; the
    failure policy is the same. With `name` too, the request's tokens and its slot are taken in
    one acquire, all or nothing (a refusal of the rate limit keeps the server's retry time).
    `key` may be async and may return None to leave a request unlimited. `count` may be a
    function of the scope (e.g. a cost per route). Non-HTTP scopes (lifespan, websocket) pass
    through. `client` is an AsyncRateLimitClient or a target ("host:port"; the client is then
    created on the first request, in the server's event loop, and closed at lifespan
    shutdown).
    """

    def __init__(self, app: ASGIApp, client: Union[AsyncRateLimitClient, str],
                 name: Optional[str], *, key: KeyFunc = client_ip,
                 count: Union[float, Callable[[Scope], float]] = 1,
                 config: Optional[LimitConfig] = None,
                 failure_mode: FailureMode = DEFAULT_FAILURE_MODE, failure_status: int = 503,
                 timeout: Optional[float] = None, in_flight: Optional[str] = None,
                 in_flight_config: Optional[LimitConfig] = None):
        self.app = app
        self.key = key
        self.count = count
        self.failure_status = failure_status
        self.limiter = Limiter(client, name, config=config, failure_mode=failure_mode,
                               timeout=timeout, in_flight=in_flight,
                               in_flight_config=in_flight_config)
        self._releasing: Set["asyncio.Task[None]"] = set()  # releases under way

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "lifespan":
            await self.app(scope, self._closing_on_shutdown(receive), send)
            return
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        key = await _resolve(self.key(scope))
        count = self.count(scope) if callable(self.count) else self.count
        lease: Optional[AsyncLease] = None
        if self.limiter.in_flight is not None:
            outcome, lease = await self.limiter.hold(key, count)
        else:
            outcome = await self.limiter.decide(key, count)
        if outcome.status == "denied":
            await _respond(send, 429, b"Too Many Requests\n", outcome.headers)
            return
        if outcome.status == "unavailable":
            await _respond(send, self.failure_status, b"Rate limit service unavailable\n", [])
            return
        if outcome.status == "error":
            await _respond(send, 500, b"Internal Server Error\n", [])
            return
        if outcome.status == "bad_key":
            await _respond(send, 400, outcome.problem.encode() + b"\n", [])
            return
        extra = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                 for k, v in outcome.headers]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        if lease is None:
            await self.app(scope, receive, send_with_headers)
            return
        slot = _Slot(lease, self._releasing)
        trailers = False

        async def send_holding_the_slot(message: Message) -> None:
            nonlocal trailers
            if message["type"] == "http.response.start":
                trailers = bool(message.get("trailers", False))
            elif _ends_response(message, trailers):
                await slot.give_back()
            await send_with_headers(message)

        try:
            await self.app(scope, receive, send_holding_the_slot)
        finally:  # the application returned or raised: the slot is back (or goes back now)
            await slot.give_back()

    def _closing_on_shutdown(self, receive: Receive) -> Receive:
        """Closes the client the middleware created when the server shuts down."""

        async def wrapped() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await self.limiter.aclose()
            return message

        return wrapped


async def _respond(send: Send, status: int, body: bytes, headers: List[Tuple[str, str]]) -> None:
    raw = [(b"content-type", b"text/plain; charset=utf-8"),
           (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _ends_response(message: Message, trailers: bool) -> bool:
    """Whether `message` is a response's last: the last trailers message when the start
    announced trailers, else the body's message without more_body (or a pathsend)."""
    kind = message.get("type")
    if trailers:
        return kind == "http.response.trailers" and not message.get("more_trailers", False)
    if kind == "http.response.pathsend":
        return True
    return (kind in ("http.response.body", "http.response.zerocopysend")
            and not message.get("more_body", False))


class _Slot:
    """A request's lease, given back once: before the response's last message, or when the
    application returns or raises, whichever comes first (the lease's exit sends one Release
    however often it is called, and later calls wait for that one).

    The release runs in a task of its own, shielded: a request cancelled while it waits still
    gives its slot back. It takes at most the calls' timeout (the Release's deadline); a failure
    is logged by the lease's exit, and the lease then expires by its TTL. `pending` keeps the
    tasks referenced until they end."""

    def __init__(self, lease: AsyncLease, pending: Set["asyncio.Task[None]"]):
        self._lease = lease
        self._pending = pending
        self._release: Optional["asyncio.Task[None]"] = None

    async def give_back(self) -> None:
        if self._release is None:
            task = asyncio.ensure_future(self._lease.__aexit__(None, None, None))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            self._release = task
        await asyncio.shield(self._release)
