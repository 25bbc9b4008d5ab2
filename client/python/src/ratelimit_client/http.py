"""HTTP answers for a Decision: 429 with Retry-After and the IETF RateLimit-* headers
(draft-ietf-httpapi-ratelimit-headers: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset),
and the limiter the ASGI middleware and the FastAPI dependency share."""
from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Awaitable, Final, List, Literal, Optional, Tuple, TypeVar, Union, cast

from ._repeated_log import RepeatedLog
from .aio import AsyncRateLimitClient
from .errors import UNREACHABLE_CODES, LeaseDenied, RateLimitError
from .leases import AsyncLease
from .types import AcquireResult, Decision, DenyReason, Kind, Limit, LimitConfig, LimitResult

_logger = logging.getLogger("ratelimit_client")

FailureMode = Literal["open", "closed"]
"""What a middleware does with a request while the service is unreachable: "closed" refuses
it (the default), "open" lets it through unlimited."""

FAIL_OPEN: Final = "open"
FAIL_CLOSED: Final = "closed"
DEFAULT_FAILURE_MODE: Final = FAIL_CLOSED

IN_FLIGHT_RETRY_AFTER: Final = timedelta(seconds=1)
"""Retry-After (and RateLimit-Reset) of a request refused for want of a free slot of the max in
flight limit. The server's retry time is when enough leases expire if no holder releases (a
whole lease TTL), but a middleware's lease is released when its request ends."""


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _ceil_seconds(seconds: float) -> int:
    return max(0, int(math.ceil(seconds - 1e-9)))


def _headline(decision: Decision) -> Optional[LimitResult]:
    """The limit the headers describe: the deciding one on denial, else the one with the
    fewest tokens left."""
    if not decision.results:
        return None
    if decision.denied_by is not None and decision.denied_by < len(decision.results):
        return decision.results[decision.denied_by]
    return min(decision.results, key=lambda r: r.value)


def rate_limit_headers(decision: Decision, config: Optional[LimitConfig] = None, *,
                       allowed_describes: Optional[int] = None) -> List[Tuple[str, str]]:
    """RateLimit-Limit (the capacity), RateLimit-Remaining (whole tokens left, >= 0) and
    RateLimit-Reset (seconds) of a decision, plus Retry-After on a denial that can be retried.

    RateLimit-Reset is the denial's retry_after; on an allowed answer it is the time until the
    bucket is full again, which needs the rate: it is sent when `config` (a token bucket) is
    given and omitted otherwise. A decision the server allowed without evaluating
    (failed_open) has no values: no headers. `allowed_describes`: on an allowed answer, the
    index of the limit the headers describe (else the one with the fewest tokens left)."""
    result = _headline(decision)
    if (decision.allowed and allowed_describes is not None
            and allowed_describes < len(decision.results)):
        result = decision.results[allowed_describes]
    if result is None or decision.failed_open:
        return []
    headers = [("RateLimit-Limit", _number(result.capacity)),
               ("RateLimit-Remaining", str(max(0, int(math.floor(result.value + 1e-9)))))]
    if not decision.allowed:
        if decision.retry_after is not None:
            wait = str(_ceil_seconds(decision.retry_after.total_seconds()))
            headers.append(("RateLimit-Reset", wait))
            headers.append(("Retry-After", wait))
    elif config is not None and config.kind == Kind.TOKEN_BUCKET:
        missing = max(0.0, result.capacity - result.value)
        seconds = missing * config.period.total_seconds() / config.rate
        headers.append(("RateLimit-Reset", str(_ceil_seconds(seconds))))
    return headers


OutcomeStatus = Literal["allowed", "denied", "unavailable", "error", "bad_key"]


@dataclass(frozen=True)
class Outcome:
    """What the limiter decided for one HTTP request. status: "allowed", "denied",
    "unavailable" (the service could not be reached and the limiter fails closed: answer
    failure_status), "error" (the service answered an error that is not an outage, e.g.
    NOT_FOUND for a limit name it does not define: answer 500) or "bad_key" (the request's key
    cannot be sent, see key_problem: answer 400 with `problem`). `decision` is None when the
    request was not evaluated (skipped, unreachable, error, bad key)."""

    status: OutcomeStatus
    decision: Optional[Decision]
    headers: List[Tuple[str, str]]
    problem: str = ""


MAX_KEY_BYTES: Final = 1024
"""The longest key the service takes, in UTF-8 bytes (ratelimit.proto: a key is 1..1024
bytes)."""


def key_problem(key: Union[str, bytes]) -> Optional[str]:
    """Why a request's key cannot be sent (None when it can): empty, not text that UTF-8 can
    encode (a str with lone surrogates, e.g. bytes decoded with errors="surrogateescape"; raw
    bytes that are not UTF-8), or longer than MAX_KEY_BYTES. Each is the request's fault, not
    an outage nor a configuration error: the middlewares answer 400 without a call, whatever
    the failure mode. The message does not echo the key (it may be an API key)."""
    if isinstance(key, str):
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError:
            return "rate limit key is not valid UTF-8 text"
    elif isinstance(key, (bytes, bytearray)):
        data = bytes(key)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return "rate limit key is not valid UTF-8 text"
    else:  # not a key at all: a programming error, left to the call to raise (TypeError)
        return None
    if not data:
        return "rate limit key missing"
    if len(data) > MAX_KEY_BYTES:
        return "rate limit key is longer than %d bytes" % MAX_KEY_BYTES
    return None


def _bad_key(key: Union[str, bytes]) -> Optional[Outcome]:
    problem = key_problem(key)
    return None if problem is None else Outcome("bad_key", None, [], problem)


T = TypeVar("T")


async def _resolve(value: Union[T, Awaitable[T]]) -> T:
    """The value of a key function that may be sync or async."""
    if inspect.isawaitable(value):
        return await cast(Awaitable[T], value)
    return cast(T, value)


class Limiter:
    """Consumes `count` tokens of (`name`, key) per HTTP request, through one
    AsyncRateLimitClient (given, or created on first use from a target in the running loop).

    `name` is required: it is the counter's identity on the server, and a default would make
    unrelated routes or services share one counter.

    failure_mode applies only when the service is unreachable (UNAVAILABLE or
    DEADLINE_EXCEEDED): "closed" (default) refuses the request, "open" lets it through. Every
    other error (NOT_FOUND for a misspelt limit name, INVALID_ARGUMENT, PERMISSION_DENIED...)
    is a configuration or programming error whatever the mode: the request is refused with
    status "error". A key that cannot be sent (key_problem) is the request's fault: status
    "bad_key", without a call, whatever the mode. Outages and errors are logged (logger
    "ratelimit_client"), each limiter writing at most
    one line per 10 s per distinct (code, message) of an error and per code of an outage, with
    the count of repeats held back."""

    def __init__(self, client: Union[AsyncRateLimitClient, str], name: Optional[str], *,
                 count: float = 1, config: Optional[LimitConfig] = None,
                 failure_mode: FailureMode = DEFAULT_FAILURE_MODE,
                 timeout: Optional[float] = None, in_flight: Optional[str] = None,
                 in_flight_config: Optional[LimitConfig] = None):
        if in_flight is not None and (not isinstance(in_flight, str) or not in_flight):
            raise ValueError("in_flight: the name of a concurrency limit, got %r" % (in_flight,))
        if not (name is None and in_flight) and (not isinstance(name, str) or not name):
            raise ValueError("name: the limit's name is required (a limit of the server's "
                             "limits file, or any name with config= for an inline limit), "
                             "got %r" % (name,))
        if failure_mode not in (FAIL_OPEN, FAIL_CLOSED):
            raise ValueError("failure_mode must be %r or %r, got %r" %
                             (FAIL_CLOSED, FAIL_OPEN, failure_mode))
        self._client = client if isinstance(client, AsyncRateLimitClient) else None
        self._target = client if isinstance(client, str) else None
        self.name = name
        self.in_flight = in_flight
        self.in_flight_config = in_flight_config
        self.count = count
        self.config = config
        self.failure_mode: FailureMode = failure_mode
        self.timeout = timeout
        self._log = RepeatedLog(_logger)

    def client(self) -> AsyncRateLimitClient:
        if self._client is None:
            assert self._target is not None
            self._client = AsyncRateLimitClient(self._target)
        return self._client

    async def aclose(self) -> None:
        """Closes the client this limiter created from a target (a given client is left to
        its owner)."""
        if self._target is not None and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def decide(self, key: Optional[str], count: Optional[float] = None) -> Outcome:
        if key is None:
            return Outcome("allowed", None, [])
        bad = _bad_key(key)
        if bad is not None:
            return bad
        assert self.name is not None
        limit = Limit(self.name, key, self.count if count is None else count, self.config)
        try:
            decision = await self.client().consume(limit, timeout=self.timeout)
        except RateLimitError as e:
            return self._failed(self.name, e)
        headers = rate_limit_headers(decision, self.config)
        return Outcome("allowed" if decision.allowed else "denied", decision, headers)

    async def hold(self, key: Optional[str],
                   count: Optional[float] = None) -> Tuple[Outcome, Optional[AsyncLease]]:
        """With `in_flight`: acquires one slot of it (and the rate limit's tokens, when `name`
        is set: one acquire, all or nothing) for a request, as a held lease the caller releases
        when the response has ended. The headers describe the concurrency limit (its capacity
        and free slots) unless the rate limit denied. A denial for want of a free slot alone
        says retry after IN_FLIGHT_RETRY_AFTER (1 s); one of the rate limit, the server's
        time."""
        if key is None:
            return Outcome("allowed", None, []), None
        bad = _bad_key(key)
        if bad is not None:
            return bad, None
        assert self.in_flight is not None
        limits = [Limit(self.in_flight, key, 1, self.in_flight_config)]
        if self.name is not None:
            limits.append(Limit(self.name, key, self.count if count is None else count,
                                self.config))
        lease = self.client().lease(limits, timeout=self.timeout)
        try:
            await lease.acquire()
        except LeaseDenied as e:
            decision = _decision_of(e.result)
            headers = rate_limit_headers(_in_flight_retry(decision))
            return Outcome("denied", decision, headers), None
        except RateLimitError as e:
            return self._failed(self.in_flight, e), None
        assert lease.result is not None
        decision = _decision_of(lease.result)
        # limits[0] is the concurrency limit: its capacity and free slots.
        headers = rate_limit_headers(decision, allowed_describes=0)
        return Outcome("allowed", decision, headers), lease

    def _failed(self, name: str, e: RateLimitError) -> Outcome:
        if e.code not in UNREACHABLE_CODES:
            self._log.log(logging.ERROR, (e.code, e.details),
                          "rate limit %r: the service answered %s: %s; answering 500 (a "
                          "configuration error, not an outage)"
                          % (name, e.code.name, e.details))
            return Outcome("error", None, [])
        # One event per code: an outage's messages differ in transient details.
        self._log.log(logging.WARNING, e.code,
                      "rate limit %r: the service is unreachable (%s: %s); failing %s"
                      % (name, e.code.name, e.details, self.failure_mode))
        if self.failure_mode == FAIL_OPEN:
            return Outcome("allowed", None, [])
        return Outcome("unavailable", None, [])


def _in_flight_retry(decision: Decision) -> Decision:
    """A denial of hold() as its headers describe it: refused for the slots of the concurrency
    limit (results[0]) alone, retry after IN_FLIGHT_RETRY_AFTER; refused by a rate limit too,
    after the server's retry time."""
    results = decision.results
    if (decision.retry_after is None or not results or results[0].allowed
            or results[0].reason != DenyReason.NO_FREE_SLOTS
            or not all(r.allowed for r in results[1:])):
        return decision
    return dataclasses.replace(decision, retry_after=IN_FLIGHT_RETRY_AFTER)


def _decision_of(result: AcquireResult) -> Decision:
    """An acquire's answer as a Decision, for the headers."""
    return Decision(allowed=result.allowed, results=result.results, retry_at=result.retry_at,
                    retry_after=result.retry_after, reason=result.reason,
                    denied_by=result.denied_by, replayed=result.replayed)
