"""HTTP answers for a Decision: 429 with Retry-After and the IETF RateLimit-* headers
(draft-ietf-httpapi-ratelimit-headers: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset),
and the limiter the ASGI middleware and the FastAPI dependency share."""
from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass
from typing import Awaitable, List, Optional, Tuple, TypeVar, Union, cast

from .aio import AsyncRateLimitClient
from .errors import UNREACHABLE_CODES, RateLimitError
from .types import Decision, Kind, Limit, LimitConfig, LimitResult

_log = logging.getLogger("ratelimit_client")

FAIL_OPEN = "open"
FAIL_CLOSED = "closed"


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


def rate_limit_headers(decision: Decision,
                       config: Optional[LimitConfig] = None) -> List[Tuple[str, str]]:
    """RateLimit-Limit (the capacity), RateLimit-Remaining (whole tokens left, >= 0) and
    RateLimit-Reset (seconds) of a decision, plus Retry-After on a denial that can be retried.

    RateLimit-Reset is the denial's retry_after; on an allowed answer it is the time until the
    bucket is full again, which needs the rate: it is sent when `config` (a token bucket) is
    given and omitted otherwise. A decision the server allowed without evaluating
    (failed_open) has no values: no headers."""
    result = _headline(decision)
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


@dataclass(frozen=True)
class Outcome:
    """What the limiter decided for one HTTP request. status: "allowed", "denied" or
    "unavailable" (the service could not be reached and the limiter fails closed);
    `decision` is None when the request was not evaluated (skipped, or unreachable)."""

    status: str
    decision: Optional[Decision]
    headers: List[Tuple[str, str]]


T = TypeVar("T")


async def _resolve(value: Union[T, Awaitable[T]]) -> T:
    """The value of a key function that may be sync or async."""
    if inspect.isawaitable(value):
        return await cast(Awaitable[T], value)
    return cast(T, value)


class Limiter:
    """Consumes `count` tokens of (`name`, key) per HTTP request, through one
    AsyncRateLimitClient (given, or created on first use from a target in the running loop).

    failure_mode: when the service is unreachable (UNAVAILABLE or DEADLINE_EXCEEDED),
    "open" lets the request through (logged) and "closed" refuses it. Other errors (a bad
    limit definition: INVALID_ARGUMENT, NOT_FOUND...) are programming errors and propagate."""

    def __init__(self, client: Union[AsyncRateLimitClient, str], name: str, *,
                 count: float = 1, config: Optional[LimitConfig] = None,
                 failure_mode: str = FAIL_OPEN, timeout: Optional[float] = None):
        if failure_mode not in (FAIL_OPEN, FAIL_CLOSED):
            raise ValueError("failure_mode must be %r or %r, got %r" %
                             (FAIL_OPEN, FAIL_CLOSED, failure_mode))
        self._client = client if isinstance(client, AsyncRateLimitClient) else None
        self._target = client if isinstance(client, str) else None
        self.name = name
        self.count = count
        self.config = config
        self.failure_mode = failure_mode
        self.timeout = timeout

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
        limit = Limit(self.name, key, self.count if count is None else count, self.config)
        try:
            decision = await self.client().consume(limit, timeout=self.timeout)
        except RateLimitError as e:
            if e.code not in UNREACHABLE_CODES:
                raise
            _log.warning("rate limit service unreachable (%s), failing %s", e,
                         self.failure_mode)
            if self.failure_mode == FAIL_OPEN:
                return Outcome("allowed", None, [])
            return Outcome("unavailable", None, [])
        headers = rate_limit_headers(decision, self.config)
        return Outcome("allowed" if decision.allowed else "denied", decision, headers)
