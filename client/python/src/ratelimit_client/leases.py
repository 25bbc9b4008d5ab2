"""Held leases on slots of a concurrency limit: `with client.lease(...)` (a thread extends the
lease) and `async with aio_client.lease(...)` (an asyncio task extends it).

The heartbeat extends the lease every third of its TTL (`heartbeat=` sets another period, 0
none), each time by the same TTL, so two extends in a row may fail before the lease expires.
A lease answered to a retried request_id (replayed) is extended at once: it is an earlier
acquire's, with only part of its TTL left. The next extend never comes after the lease's expiry
(counted from the sending of the last call that set it): when the period would bring it there
(a heartbeat not shorter than the TTL, an acquire or extend answered late), it comes after half
the time left. An extend's deadline is the client's timeout but no later than that expiry, so a
hung call cannot keep a lost lease looking held. The lease is lost when an extend answers
NOT_HELD (it expired, was reset, or was released elsewhere), when extends have failed and the
next one would come after the lease's expiry, when it expires before an extend could be sent, or
when the client is closed: the holder may no longer count on its slots. `lease.lost` (an Event)
is then set and `lease.lost_reason` says why. The client's close() does so at once for every
lease it holds, and stops their heartbeats (abandoning an extend in flight) without another
call.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any, List, Optional, Union

import grpc

from .clock import Clock
from .errors import LeaseDenied, LeaseLost, RateLimitError
from .types import AcquireResult, ExtendResult, Kind, LeaseInfo, LeaseState, Limit, LimitConfig

if TYPE_CHECKING:
    from .aio import AsyncRateLimitClient
    from ._lease_ops import Pending
    from .client import RateLimitClient

_log = logging.getLogger("ratelimit_client")

Seconds = Union[float, timedelta]

HEARTBEAT_FRACTION = 1.0 / 3.0
"""The default heartbeat period, as a fraction of the lease's TTL."""


MIN_TTL = timedelta(milliseconds=1)
"""The shortest lease TTL the service takes."""

CLOSED_REASON = "the client was closed"
"""lost_reason of the leases a client's close() found held."""

MIN_EARLY_EXTEND = 0.01
"""The shortest wait (seconds) for an extend brought forward before the lease's expiry; with
less time left, the heartbeat waits for the expiry, when the lease is lost."""


def as_timedelta(value: Optional[Seconds]) -> Optional[timedelta]:
    """A TTL given as seconds or as a timedelta. One that is under 1 ms (0 included), negative
    or not finite is a ValueError naming `ttl`, before any call (the server takes 1 ms at least
    and keeps whole microseconds: 100 ns would be sent as 0). None: the limit's lease_ttl."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if math.isfinite(seconds) and seconds >= MIN_TTL.total_seconds():
        try:
            return value if isinstance(value, timedelta) else timedelta(seconds=seconds)
        except OverflowError:  # longer than a timedelta holds
            pass
    raise ValueError("ttl: must be a finite number of seconds (or a timedelta) of at least "
                     "1 ms (0.001 s), or None for the limit's lease_ttl, got %r" % (value,))


def check_seconds(value: Any, field: str, meaning: str = "") -> float:
    """`value` (seconds) when it is a finite number, 0 or more; else a ValueError naming `field`
    and the value, before any call (a negative or NaN period would silently turn the heartbeat
    off, a NaN wait would retry forever)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value >= 0):
        raise ValueError("%s: must be a finite number of seconds, 0 or more%s, got %r"
                         % (field, meaning, value))
    return float(value)


def wait_step(result: AcquireResult, attempt: int, remaining: float) -> float:
    """How long a waiting lease() sleeps before acquiring again: the denial's retry_after (when
    leases expire), but no more than a backoff of 50 ms doubling up to 1 s (a release frees a
    slot sooner than an expiry), nor than the time left."""
    step = min(0.05 * 2.0 ** attempt, 1.0, remaining)
    if result.retry_after is not None:
        step = min(step, max(result.retry_after.total_seconds(), 0.001))
    return step


class _Held:
    """What both kinds of lease share: the request, the lease's life and heartbeat, the
    outcome."""

    def __init__(self, limits: List[Limit], ttl: Optional[Seconds], request_id: Optional[str],
                 holder: str, heartbeat: Optional[float], wait: float, timeout: float,
                 clock: Clock):
        """`timeout`: the deadline of each call (seconds), already checked by the client."""
        self._limits = limits
        self._ttl = as_timedelta(ttl)
        self._request_id = request_id
        self._holder = holder
        self._heartbeat = (None if heartbeat is None
                           else check_seconds(heartbeat, "heartbeat", " (0: none)"))
        self._wait = check_seconds(wait, "wait")
        self._timeout = timeout
        self._clock = clock
        self._config: Optional[LimitConfig] = None
        self._life = 0.0
        self._every = 0.0
        self._first = 0.0
        self._expiring = False  # the heartbeat's sleep ends at the expiry, too late to extend
        self.result: Optional[AcquireResult] = None
        """The acquire's answer (per-limit results, replayed); None before acquiring."""
        self.info: Optional[LeaseInfo] = None
        """The lease as the server last described it (expires_at moves with each extend)."""
        self.extensions = 0
        """How many extends the heartbeat made."""
        self.lost_reason: Optional[str] = None
        """Why the lease was lost; None while it is not."""
        self.released = False

    @property
    def id(self) -> str:
        return self.info.id if self.info is not None else ""

    def _held(self, result: AcquireResult, sent: float) -> float:
        """Records an allowed acquire sent at `sent` (monotonic): the lease, its config, its life
        and heartbeat. Returns when the lease expires unless extended (monotonic)."""
        assert result.lease is not None
        self.result, self.info = result, result.lease
        for limit in self._limits:
            c = limit.config
            if (limit.name, limit.key) == (self.info.name, self.info.key) and c is not None \
                    and c.kind == Kind.CONCURRENCY:
                self._config = c
        if self._ttl is not None:
            self._life = self._ttl.total_seconds()
        elif self.info.expires_at is not None and self.info.acquired_at is not None:
            self._life = (self.info.expires_at - self.info.acquired_at).total_seconds()
        self._every = (self._life * HEARTBEAT_FRACTION if self._heartbeat is None
                       else self._heartbeat)
        self._first = self._every
        valid_until = sent + self._life
        if result.replayed:
            # An earlier acquire's lease: only part of its life is left, which this machine can
            # only estimate from the server's expires_at. Extended at once.
            self._first = 0.0
            if self.info.expires_at is not None:
                left = (self.info.expires_at - self._clock.now()).total_seconds()
                valid_until = min(valid_until, self._clock.monotonic() + left)
        return valid_until

    def _pause(self, wait: float, valid_until: float) -> float:
        """The sleep before the next extend: `wait`, unless that would reach the lease's expiry;
        then half the time left (or, with too little left, until the expiry)."""
        left = valid_until - self._clock.monotonic()
        self._expiring = False
        if wait < left:
            return wait
        if left / 2 >= MIN_EARLY_EXTEND:
            return left / 2
        self._expiring = True
        return max(0.0, left)

    def _extend_timeout(self, valid_until: float) -> Optional[float]:
        """The deadline of the next extend: the calls' timeout, but no later than the lease's
        expiry. None when the lease has expired (lost_reason set)."""
        left = valid_until - self._clock.monotonic()
        if self._expiring or left <= 0:
            self.lost_reason = "it expired before an extend could be sent"
            return None
        return min(self._timeout, left)

    def _after_extend(self, response: Any, error: Optional[BaseException], sent: float,
                      valid_until: float) -> Optional[float]:
        """The heartbeat's bookkeeping after one extend: the new local expiry, or None when
        the lease is lost (lost_reason set)."""
        if error is None and response.state == LeaseState.HELD:
            self.extensions += 1
            if response.lease is not None:
                self.info = response.lease
            return sent + self._life
        if error is None:
            self.lost_reason = "extend answered %s" % response.state.name
            return None
        if self._client_closed():
            self.lost_reason = "the client was closed (%s)" % error
            return None
        if self._clock.monotonic() + self._every >= valid_until:
            self.lost_reason = "every extend failed until the lease's expiry (last: %s)" % error
            return None
        return valid_until

    def _client_closed(self) -> bool:
        raise NotImplementedError

    def _release_failed(self, error: Exception) -> None:
        _log.warning("could not release lease %s of %r (it expires by itself): %s",
                     self.id, self.info.name if self.info else "", error)

    def raise_if_lost(self) -> None:
        """Raises LeaseLost when the lease was lost."""
        if self.lost_reason is not None:
            raise LeaseLost(self.lost_reason)

    def _denied(self, result: AcquireResult, attempt: int, give_up_at: float) -> float:
        """The sleep before the next acquire, or raises LeaseDenied when the wait is over."""
        remaining = give_up_at - self._clock.monotonic()
        if remaining <= 0:
            raise LeaseDenied(result)
        return wait_step(result, attempt, remaining)


class Lease(_Held):
    """A lease held with `with client.lease(...) as lease:` (RateLimitClient.lease).

    Entering acquires (LeaseDenied when no slot frees within `wait`); a daemon thread then
    extends the lease until the block ends, which stops the thread (abandoning an extend in
    flight) and releases the lease, on an exception too. A release that fails, or that the
    client can no longer send (closed), is logged, not raised (the lease then expires by
    itself). `lost` is a threading.Event set when the lease is lost. Thread safety: the
    attributes may be read from any thread; enter and exit it from one."""

    def __init__(self, client: "RateLimitClient", limits: List[Limit], **kwargs: Any):
        super().__init__(limits, **kwargs)
        self._client = client
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()  # orders the stop and the start of an extend
        self._in_flight: Optional["Pending[ExtendResult]"] = None

    def _client_closed(self) -> bool:
        return self._client.closed

    def acquire(self) -> "Lease":
        """Acquires (retrying within `wait` while denied) and starts the heartbeat."""
        clock = self._clock
        give_up_at = clock.monotonic() + self._wait
        attempt = 0
        while True:
            sent = clock.monotonic()
            result = self._client.acquire(self._limits, ttl=self._ttl,
                                          request_id=self._request_id, holder=self._holder,
                                          timeout=self._timeout)
            if result.allowed and result.lease is not None:
                break
            clock.sleep(self._denied(result, attempt, give_up_at))
            attempt += 1
        valid_until = self._held(result, sent)
        if self._client._hold(self) and self._every > 0 and self._life > 0:
            self._thread = threading.Thread(target=self._beat, args=(valid_until,),
                                            name="ratelimit-lease-%s" % self.id, daemon=True)
            self._thread.start()
        return self

    def _beat(self, valid_until: float) -> None:
        clock = self._clock
        info = self.info
        assert info is not None
        wait = self._first
        while True:
            if clock.sleep(self._pause(wait, valid_until), self._stop) or self._stop.is_set():
                return
            wait = self._every
            timeout = self._extend_timeout(valid_until)
            if timeout is None:
                self.lost.set()
                return
            sent = clock.monotonic()
            response, error = None, None
            try:
                with self._lock:
                    if self._stop.is_set():
                        return
                    self._in_flight = call = self._client._start_extend(
                        info.name, info.key, info.id, ttl=self._ttl, config=self._config,
                        timeout=timeout)
                response = call.result()
            except grpc.FutureCancelledError:  # abandoned by release()
                return
            except RateLimitError as e:
                error = e
            if self._stop.is_set():
                return
            until = self._after_extend(response, error, sent, valid_until)
            if until is None:
                self.lost.set()
                return
            valid_until = until

    def release(self) -> None:
        """Stops the heartbeat, abandoning an extend in flight, and gives the slots back (a lost
        lease too, in case the server still holds it) within the calls' timeout. Only the first
        call does anything. Raises the release call's error."""
        if self.released or self.info is None:
            return
        self.released = True
        self._client._drop(self)
        with self._lock:
            self._stop.set()
            in_flight = self._in_flight
        if in_flight is not None:
            in_flight.cancel()
        if self._thread is not None:
            self._thread.join()
        info = self.info
        self._client.release(info.name, info.key, info.id, config=self._config,
                             timeout=self._timeout)

    def _lose_to_close(self) -> None:
        """The client's close(): the lease is lost now, and its heartbeat stops, abandoning an
        extend in flight, without another call (the thread is not waited for)."""
        with self._lock:
            self._stop.set()
            in_flight = self._in_flight
            if self.lost_reason is None:
                self.lost_reason = CLOSED_REASON
        if in_flight is not None:
            in_flight.cancel()
        self.lost.set()

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except RateLimitError as e:
            self._release_failed(e)


class AsyncLease(_Held):
    """A lease held with `async with aio_client.lease(...) as lease:`
    (AsyncRateLimitClient.lease): Lease's behaviour, with an asyncio task for the heartbeat
    and `lost` an asyncio.Event. Leaving the block cancels the task (an extend in flight is
    abandoned) and releases the lease, on an exception or a cancellation too."""

    def __init__(self, client: "AsyncRateLimitClient", limits: List[Limit], **kwargs: Any):
        super().__init__(limits, **kwargs)
        self._client = client
        self.lost = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None

    def _client_closed(self) -> bool:
        return self._client.closed

    async def acquire(self) -> "AsyncLease":
        """Acquires (retrying within `wait` while denied) and starts the heartbeat."""
        clock = self._clock
        give_up_at = clock.monotonic() + self._wait
        attempt = 0
        while True:
            sent = clock.monotonic()
            result = await self._client.acquire(self._limits, ttl=self._ttl,
                                                request_id=self._request_id,
                                                holder=self._holder, timeout=self._timeout)
            if result.allowed and result.lease is not None:
                break
            await clock.sleep_async(self._denied(result, attempt, give_up_at))
            attempt += 1
        valid_until = self._held(result, sent)
        if self._client._hold(self) and self._every > 0 and self._life > 0:
            self._task = asyncio.ensure_future(self._beat(valid_until))
        return self

    async def _beat(self, valid_until: float) -> None:
        clock = self._clock
        info = self.info
        assert info is not None
        wait = self._first
        while True:
            await clock.sleep_async(self._pause(wait, valid_until))
            wait = self._every
            timeout = self._extend_timeout(valid_until)
            if timeout is None:
                self.lost.set()
                return
            sent = clock.monotonic()
            response, error = None, None
            try:
                response = await self._client.extend(info.name, info.key, info.id,
                                                     ttl=self._ttl, config=self._config,
                                                     timeout=timeout)
            except RateLimitError as e:
                error = e
            until = self._after_extend(response, error, sent, valid_until)
            if until is None:
                self.lost.set()
                return
            valid_until = until

    async def release(self) -> None:
        """Cancels the heartbeat and gives the slots back (a lost lease too). Only the first
        call does anything. Raises the release call's error."""
        if self.released or self.info is None:
            return
        self.released = True
        self._client._drop(self)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        info = self.info
        await self._client.release(info.name, info.key, info.id, config=self._config,
                                   timeout=self._timeout)

    def _lose_to_close(self) -> Optional["asyncio.Task[None]"]:
        """The client's close(): the lease is lost now and its heartbeat task is cancelled (an
        extend in flight abandoned); returns the task, for close() to wait for its end."""
        if self.lost_reason is None:
            self.lost_reason = CLOSED_REASON
        self.lost.set()
        if self._task is not None:
            self._task.cancel()
        return self._task

    async def __aenter__(self) -> "AsyncLease":
        return await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.release()
        except RateLimitError as e:
            self._release_failed(e)
