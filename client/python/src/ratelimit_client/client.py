"""The synchronous client."""
from __future__ import annotations

import logging
import secrets
import threading
import time
import weakref
from datetime import datetime, timedelta
from typing import (Any, Callable, Generic, Iterator, List, Literal, Optional, Sequence, Tuple,
                    TypeVar, Union)

import grpc

from . import _common as c
from ._lease_ops import Pending
from ._lease_stream import LeaseStream
from ._pb import ratelimit_pb2_grpc as pb_grpc
from .clock import SYSTEM_CLOCK, Clock
from .errors import (OUTCOME_UNKNOWN_CODES, UNREACHABLE_CODES, RateLimitError,
                     ReservationCancelled, ReservationTimeout, client_closed,
                     from_rpc_error)
from .leases import Lease, Seconds, as_timedelta
from .types import (AcquireResult, BatchEntry, ExtendResult, LeaseList, ReleaseResult, Decision, EnvoyPathEntry, Limit, LimitConfig, LimitSource,
                    Override, OverrideAuditEntry, OverrideAuditPage, OverridePage, OverrideTarget,
                    SetOverrideResult, SettleResult, Settlement, TlsOptions)

_log = logging.getLogger("ratelimit_client")
T = TypeVar("T")


class PendingCall(Generic[T]):
    """A call started without waiting for its answer. result() waits for it and returns the
    converted answer, or raises the RateLimitError of its failure (grpc.FutureCancelledError
    once cancelled); cancel() abandons it. Thread safety: cancel() may be called from any
    thread."""

    def __init__(self, method: str, future: Any, convert: Callable[[Any], T]):
        self._method = method
        self._future = future
        self._convert = convert

    def result(self) -> T:
        try:
            return self._convert(self._future.result())
        except grpc.RpcError as e:
            raise from_rpc_error(e, self._method) from e

    def cancel(self) -> None:
        self._future.cancel()


class RateLimitClient:
    """A blocking client of ratelimit.v1.RateLimitService.

    Every call has a deadline (`timeout`, default 1 s; each method takes `timeout=` too) and
    raises a RateLimitError subclass carrying the gRPC code and the field the server named.
    Only Check is retried (`check_retries` times on UNAVAILABLE or DEADLINE_EXCEEDED, every
    attempt within the one call's `timeout`): Consume
    and Reserve take tokens, so a retry of one whose answer was lost could take them twice;
    give them a `request_id` to make a retry safe.

    Thread safety: thread-safe; share one client (it multiplexes one gRPC channel). Close it
    with close() or use it as a context manager.

    `lease_stream=True` sends acquire, release and extend (so lease() and its heartbeat) as
    ops on one LeaseStream of the client instead of a call each; see the README.
    """

    def __init__(self, target: str = "127.0.0.1:8081", *, timeout: float = c.DEFAULT_TIMEOUT,
                 tls: Union[bool, TlsOptions, None] = None, admin_token: Optional[str] = None,
                 admin_token_file: Optional[str] = None,
                 check_retries: int = c.DEFAULT_CHECK_RETRIES,
                 channel: Optional[grpc.Channel] = None, clock: Clock = SYSTEM_CLOCK,
                 lease_stream: bool = False):
        """Connects (lazily) to `target` ("host:port"). `tls`: True for gRPC's default roots,
        or TlsOptions. The admin token is `admin_token`, else the first line of
        `admin_token_file`, else $RATELIMIT_ADMIN_TOKEN; it is read here, once, and sent with
        Reset and the override calls only.
        `channel`: use this channel instead (e.g. one with interceptors); `tls` is ignored.
        `clock`: what reserve_and_wait reads and sleeps on (tests pass a fake).
        `lease_stream`: send acquire, release and extend as ops on one LeaseStream, opened at
        the first op and shared by every thread, each op waiting for its result within its
        call's timeout and answering or raising exactly as its unary call; a stream that ends
        fails its waiting ops with UNAVAILABLE (the next op opens another), and a server
        without LeaseStream (UNIMPLEMENTED) turns the client to unary calls for good (logged
        once)."""
        self._timeout = c.check_timeout(timeout)
        self._clock = clock
        self._check_retries = check_retries
        self._admin_token = c.resolve_admin_token(admin_token, admin_token_file)
        if channel is None:
            creds, options = c.channel_credentials(tls)
            channel = (grpc.secure_channel(target, creds, options) if creds is not None
                       else grpc.insecure_channel(target, options))
        self._channel = channel
        self._closed = False
        self._leases: "weakref.WeakSet[Lease]" = weakref.WeakSet()  # held, with _leases_lock
        self._leases_lock = threading.Lock()
        self._stub = pb_grpc.RateLimitServiceStub(channel)
        self._overrides = pb_grpc.OverrideServiceStub(channel)
        self._lease_stream = LeaseStream(self._stub) if lease_stream else None

    def close(self) -> None:
        """Closes the channel: the calls in flight fail (CANCELLED), and so does every later
        call (RateLimitError CANCELLED "the client is closed"). Every lease the client holds
        is lost at once: its `lost` is set (lost_reason "the client was closed") and its
        heartbeat stops, abandoning an extend in flight, without another call. The lease
        stream (lease_stream=True) ends, its ops in flight failing as the calls do, and its
        reader thread is waited for."""
        with self._leases_lock:
            self._closed = True
            leases = list(self._leases)
            self._leases.clear()
        for lease in leases:
            lease._lose_to_close()
        if self._lease_stream is not None:
            self._lease_stream.close()
        self._channel.close()

    def _hold(self, lease: Lease) -> bool:
        """Counts an acquired lease among the client's, for close() to lose; False when the
        client is closed already (the lease is then lost at once)."""
        with self._leases_lock:
            if not self._closed:
                self._leases.add(lease)
                return True
        lease._lose_to_close()
        return False

    def _drop(self, lease: Lease) -> None:
        """A released lease is no longer the client's."""
        with self._leases_lock:
            self._leases.discard(lease)

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def __enter__(self) -> "RateLimitClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, fn: Callable[..., T], request: Any, timeout: Optional[float],
              metadata: Optional[List[Tuple[str, str]]] = None) -> T:
        deadline = self._timeout if timeout is None else c.check_timeout(timeout)
        try:
            return fn(request, timeout=deadline, metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from e
        except ValueError:  # grpc's "Cannot invoke RPC on closed channel!"
            if self._closed:
                raise client_closed(method) from None
            raise

    def _start(self, method: str, fn: Any, request: Any, convert: Callable[[Any], T],
               timeout: float) -> PendingCall[T]:
        """The unary call, started without waiting for its answer."""
        try:
            future = fn.future(request, timeout=timeout)
        except ValueError:  # grpc's "Cannot invoke RPC on closed channel!"
            if self._closed:
                raise client_closed(method) from None
            raise
        return PendingCall(method, future, convert)

    def _lease_call(self, method: str, fn: Any, request: Any, convert: Callable[[Any], T],
                    timeout: Optional[float]) -> T:
        """Acquire, Release or Extend: a unary call, or an op on the lease stream."""
        if self._lease_stream is None:
            return convert(self._call(method, fn, request, timeout))
        deadline = self._timeout if timeout is None else c.check_timeout(timeout)
        return self._lease_stream.start(
            method, request, deadline,
            lambda left: self._start(method, fn, request, convert, left), convert).result()

    def consume(self, limits: c.LimitsArg, key: Optional[str] = None,
                count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                request_id: Optional[str] = None, omit_receipts: bool = False,
                timeout: Optional[float] = None) -> Decision:
        """Takes `count` (default 1) tokens from every limit, or from none. Never retried.
        `omit_receipts=True`: an allowed answer carries no receipts (for callers that never
        settle; it spares the server the signing and the reply the bytes)."""
        request = c.to_request(c.limits_of(limits, key, count, config), request_id,
                               omit_receipts)
        return c.to_decision(self._call("Consume", self._stub.Consume, request, timeout))

    def reserve(self, limits: c.LimitsArg, key: Optional[str] = None,
                count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                request_id: Optional[str] = None, omit_receipts: bool = False,
                timeout: Optional[float] = None) -> Decision:
        """Like consume, but may go into debt down to -max_reserved; an allowed reservation's
        retry_at is when its work may run. Never retried. `omit_receipts=True`: no receipts,
        as for consume (the reservation can then not be settled or cancelled)."""
        request = c.to_request(c.limits_of(limits, key, count, config), request_id,
                               omit_receipts)
        return c.to_decision(self._call("Reserve", self._stub.Reserve, request, timeout))

    def check(self, limits: c.LimitsArg, key: Optional[str] = None,
              count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
              timeout: Optional[float] = None) -> Decision:
        """What consume would answer now; writes nothing, so it is retried on UNAVAILABLE and
        DEADLINE_EXCEEDED (`check_retries` times, short backoff). `timeout` bounds the whole
        call, its retries and their pauses included: a retry that no longer fits is not made."""
        request = c.to_request(c.limits_of(limits, key, count, config), None)
        deadline = time.monotonic() + (self._timeout if timeout is None
                                       else c.check_timeout(timeout))
        attempt = 0
        while True:
            try:
                return c.to_decision(self._call("Check", self._stub.Check, request,
                                                c.attempt_timeout(deadline, time.monotonic())))
            except Exception as e:
                code = getattr(e, "code", None)
                if code not in UNREACHABLE_CODES or attempt >= self._check_retries:
                    raise
                pause = c.check_retry_pause(attempt + 1, deadline, time.monotonic())
                if pause is None:
                    raise
                attempt += 1
                time.sleep(pause)

    def settle(self, settlements: Sequence[Settlement], *,
               timeout: Optional[float] = None) -> Tuple[SettleResult, ...]:
        """Settles receipts of allowed Consume/Reserve calls with what was really used
        (used=0 cancels a reservation). All-or-nothing; each receipt settles once. Never
        retried."""
        request = c.to_settle_request(settlements)
        return c.to_settle_results(self._call("Settle", self._stub.Settle, request, timeout))

    def batch(self, entries: Sequence[BatchEntry], *,
              timeout: Optional[float] = None) -> Tuple[c.BatchResult, ...]:
        """Sends independent Consume/Check/Reserve requests in one call. The server decides
        them in order (a later entry sees the effect of the earlier ones), each all-or-nothing
        on its own. Returns one result per entry, in order: its Decision, or its own
        RateLimitError (returned, not raised; `field` names the entry, e.g.
        "entries[2].limits[0].count"). Raises only for the whole call (no entries, over the
        server's bounds, unreachable). Never retried."""
        request = c.to_batch_request(entries)
        return c.to_batch_results(self._call("Batch", self._stub.Batch, request, timeout))

    def reset(self, name: str, key: str = "", *, all_keys: bool = False,
              source: LimitSource = LimitSource.LIMITS_FILE,
              envoy_path: Sequence[EnvoyPathEntry] = (), envoy_override: bool = False,
              timeout: Optional[float] = None) -> None:
        """Administrative: makes one key (or every key, all_keys=True) of a limit full again.
        Sends the admin token; UnauthenticatedError without one, PermissionDeniedError with a
        wrong one, or from a server whose Reset is disabled (the server's message says so)."""
        request = c.to_reset_request(name, key, all_keys, source, envoy_path, envoy_override)
        self._call("Reset", self._stub.Reset, request, timeout,
                   c.admin_metadata(self._admin_token))

    # Concurrency limits (kind CONCURRENCY): at most `capacity` slots held at once, taken for a
    # lease that ends when released or when it expires unextended. Never retried.

    def acquire(self, limits: c.LimitsArg, key: Optional[str] = None,
                count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                ttl: Optional[Seconds] = None, request_id: Optional[str] = None,
                holder: str = "", timeout: Optional[float] = None) -> AcquireResult:
        """Takes `count` (default 1) slots of one concurrency limit, with the tokens of any
        rate limits in `limits`, all or nothing. A denial is a value (allowed=False,
        retry_after), not an exception. `ttl` (seconds or a timedelta; None: the limit's
        lease_ttl) is the lease's life unless extended; `request_id` makes a retry answer the
        same lease (replayed) instead of taking again; `holder` names the holder (shown by
        list_leases). Nothing extends the lease: see lease() for a held one."""
        request = c.to_acquire_request(c.limits_of(limits, key, count, config),
                                       as_timedelta(ttl), request_id, holder)
        return self._lease_call("Acquire", self._stub.Acquire, request, c.to_acquire_result,
                                timeout)

    def release(self, name: str, key: str, lease_id: str, *,
                config: Optional[LimitConfig] = None,
                timeout: Optional[float] = None) -> ReleaseResult:
        """Gives a lease's slots back: RELEASED, or NOT_HELD (released before, expired, reset)
        with nothing changed, so a retried release is harmless. `config`: the inline config of
        an inline limit."""
        request = c.to_release_request(name, key, lease_id, config)
        return self._lease_call("Release", self._stub.Release, request, c.to_release_result,
                                timeout)

    def extend(self, name: str, key: str, lease_id: str, *, ttl: Optional[Seconds] = None,
               config: Optional[LimitConfig] = None,
               timeout: Optional[float] = None) -> ExtendResult:
        """Pushes a held lease's expiry to now + ttl (None: the limit's lease_ttl): HELD with
        the new expiry, or NOT_HELD (nothing changed: the holder has lost its slots)."""
        request = c.to_extend_request(name, key, lease_id, as_timedelta(ttl), config)
        return self._lease_call("Extend", self._stub.Extend, request, c.to_extend_result,
                                timeout)

    def _start_extend(self, name: str, key: str, lease_id: str, *, ttl: Optional[timedelta],
                      config: Optional[LimitConfig],
                      timeout: float) -> Pending[ExtendResult]:
        """extend, started without waiting for its answer: a held lease's heartbeat, which
        leaving the block abandons (an op on the lease stream with lease_stream=True)."""
        request = c.to_extend_request(name, key, lease_id, ttl, config)
        deadline = c.check_timeout(timeout)
        fn = self._stub.Extend
        if self._lease_stream is None:
            return self._start("Extend", fn, request, c.to_extend_result, deadline)
        return self._lease_stream.start(
            "Extend", request, deadline,
            lambda left: self._start("Extend", fn, request, c.to_extend_result, left),
            c.to_extend_result)

    def list_leases(self, name: str, key: str, *,
                    source: LimitSource = LimitSource.LIMITS_FILE,
                    config: Optional[LimitConfig] = None, page_size: int = 0,
                    page_token: str = "", timeout: Optional[float] = None) -> LeaseList:
        """Administrative (sends the admin token, as reset does): the leases held on one key of
        a concurrency limit, soonest expiry first, a page at a time (page_size: 1..1000, 0 for the
        server's 100; page_token: the previous page's next_page_token), with the slots held and
        the capacity. `config`: the inline config of an inline limit; it is sent with source
        INLINE in place of LIMITS_FILE, the default (acquire, release and extend have none)."""
        request = c.to_list_leases_request(name, key, source, config, page_size, page_token)
        return c.to_lease_list(self._admin("ListLeases", self._stub.ListLeases, request,
                                           timeout))

    def lease(self, limits: c.LimitsArg, key: Optional[str] = None,
              count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
              ttl: Optional[Seconds] = None, request_id: Optional[str] = None,
              holder: str = "", heartbeat: Optional[float] = None, wait: float = 0.0,
              timeout: Optional[float] = None) -> Lease:
        """A held lease, for `with client.lease("jobs", tenant) as lease:`. Entering the block
        acquires (as acquire, same arguments); a denial raises LeaseDenied carrying retry_after,
        unless `wait` (seconds) is given: the acquire is then retried while denied, sleeping
        the denial's retry_after but at most a backoff of 50 ms doubling up to 1 s, until
        `wait` has passed. While the block runs, a thread extends the lease every `heartbeat`
        seconds (default: a third of its TTL; 0: never; a replayed lease at once); leaving the
        block, on an exception too, stops it (abandoning an extend in flight) and releases the
        lease. `lease.lost` (threading.Event) is set when the lease is lost (see
        ratelimit_client.leases). A `heartbeat` or `wait` that is negative or not finite is a
        ValueError naming it, before any call."""
        return Lease(self, c.limits_of(limits, key, count, config), ttl=ttl,
                     request_id=request_id, holder=holder, heartbeat=heartbeat, wait=wait,
                     timeout=self._timeout if timeout is None else c.check_timeout(timeout),
                     clock=self._clock)

    # Overrides (ratelimit.v1.OverrideService, docs/overrides.md): administrative like reset,
    # each call sends the admin token and raises as reset does. Never retried.

    def set_override(self, target: OverrideTarget, *, rate: Optional[float] = None,
                     period: Optional[timedelta] = None, capacity: Optional[float] = None,
                     max_reserved: Optional[float] = None, unlimited: bool = False,
                     blocked: bool = False, expires_at: Optional[datetime] = None,
                     expires_in: Optional[timedelta] = None, reason: str = "", actor: str = "",
                     timeout: Optional[float] = None) -> SetOverrideResult:
        """Creates the override of `target`, or replaces it. Its effect is one of: a new limit
        (any of rate, period, capacity, max_reserved; the others keep the configured values),
        unlimited=True (every request allowed) or blocked=True (every request denied with
        DenyReason.BLOCKED). It ends by itself at `expires_at` (timezone-aware) or after
        `expires_in`, else never. `reason` and `actor` are recorded in the audit history.
        Returns the override as stored and the one it replaced. A bad field raises
        InvalidArgumentError naming it ("override.limit.rate"); a name the limits file does not
        define, NotFoundError."""
        request = c.to_set_override_request(
            target, c.override_limit_of(rate, period, capacity, max_reserved), unlimited,
            blocked, expires_at, expires_in, reason, actor, self._clock)
        return c.to_set_override_result(self._admin("SetOverride", self._overrides.SetOverride,
                                                    request, timeout))

    def get_override(self, target: OverrideTarget, *,
                     timeout: Optional[float] = None) -> Override:
        """The override of `target` (an expired one too, marked expired); NotFoundError when it
        has none."""
        request = c.to_get_override_request(target)
        return c.to_override(self._admin("GetOverride", self._overrides.GetOverride, request,
                                         timeout).override)

    def delete_override(self, target: OverrideTarget, *, reason: str = "", actor: str = "",
                        timeout: Optional[float] = None) -> Override:
        """Deletes the override of `target` and returns it: its keys go back to the configured
        limit. NotFoundError when it has none."""
        request = c.to_delete_override_request(target, reason, actor)
        return c.to_override(self._admin("DeleteOverride", self._overrides.DeleteOverride,
                                         request, timeout).deleted)

    def list_overrides(self, name: str = "", *, source: LimitSource = LimitSource.LIMITS_FILE,
                       page_size: int = 0, page_token: str = "",
                       timeout: Optional[float] = None) -> OverridePage:
        """One page of the overrides of `source` (of the limit `name`, or of every limit when
        empty), expired ones included, in (name, target) order. page_size: 1..1000, 0 for the
        server's default (100); page_token: the previous page's next_page_token."""
        request = c.to_list_overrides_request(name, source, page_size, page_token)
        return c.to_override_page(self._admin("ListOverrides", self._overrides.ListOverrides,
                                              request, timeout))

    def iter_overrides(self, name: str = "", *, source: LimitSource = LimitSource.LIMITS_FILE,
                       page_size: int = 0,
                       timeout: Optional[float] = None) -> Iterator[Override]:
        """Every override list_overrides would page through, fetching each page as it is
        reached (`timeout` applies to each call)."""
        token = ""
        while True:
            page = self.list_overrides(name, source=source, page_size=page_size,
                                       page_token=token, timeout=timeout)
            yield from page.overrides
            token = page.next_page_token
            if not token:
                return

    def list_override_audit(self, name: str = "", *, page_size: int = 0, page_token: str = "",
                            timeout: Optional[float] = None) -> OverrideAuditPage:
        """One page of the audit history of the overrides (of the limit `name`, or of every
        limit when empty), newest first; paged as list_overrides."""
        request = c.to_list_audit_request(name, page_size, page_token)
        return c.to_audit_page(self._admin("ListOverrideAudit",
                                           self._overrides.ListOverrideAudit, request, timeout))

    def iter_override_audit(self, name: str = "", *, page_size: int = 0,
                            timeout: Optional[float] = None) -> Iterator[OverrideAuditEntry]:
        """Every entry list_override_audit would page through, newest first, fetching each page
        as it is reached."""
        token = ""
        while True:
            page = self.list_override_audit(name, page_size=page_size, page_token=token,
                                            timeout=timeout)
            yield from page.entries
            token = page.next_page_token
            if not token:
                return

    def _admin(self, method: str, fn: Callable[..., T], request: Any,
               timeout: Optional[float]) -> T:
        return self._call(method, fn, request, timeout, c.admin_metadata(self._admin_token))

    def reserve_and_wait(self, limits: c.LimitsArg, key: Optional[str] = None,
                         count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                         request_id: Optional[str] = None, timeout: Optional[float] = None,
                         cancel: Optional[threading.Event] = None) -> Decision:
        """Reserves, then blocks until the reservation's retry_at (never earlier on this
        machine's clock, nor before retry_after has passed since the answer), so the caller may
        run its pre-paid work when it returns. A denied reservation returns at once
        (allowed=False).

        `timeout` (seconds; None: no bound) bounds the whole call, not only the Reserve: the
        Reserve's deadline is the smaller of it and the client's timeout, and a reservation
        whose work may only run after `timeout` has passed is given back at once (settled with
        used=0) and ReservationTimeout is raised, without waiting.

        When `cancel` is set before retry_at, the reservation is given back and
        ReservationCancelled is raised; when it is set already, or `timeout` is not a positive
        number (ValueError naming `timeout`), nothing is sent at all. A Reserve whose answer is
        lost (DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE), or interrupted (KeyboardInterrupt),
        may still have reserved: it carries a request_id (a random one unless given), so the
        same Reserve is sent again to fetch the remembered reservation (or to reserve now),
        which is given back before the error is re-raised. So is a reservation whose wait is
        interrupted. The give-back calls have the client's timeout (a failure is logged)."""
        clock = self._clock
        if timeout is not None:
            timeout = c.check_timeout(timeout)
        give_up_at = None if timeout is None else clock.monotonic() + timeout
        request = c.limits_of(limits, key, count, config)
        if cancel is not None and cancel.is_set():
            raise ReservationCancelled(False, reserved=False)
        if request_id is None:
            request_id = secrets.token_hex(16)
        try:
            decision = self.reserve(request, request_id=request_id,
                                    timeout=c.reserve_deadline(self._timeout, timeout))
        except RateLimitError as e:
            if e.code in OUTCOME_UNKNOWN_CODES:
                self._give_back_unknown(request, request_id)
            raise
        except KeyboardInterrupt:  # interrupted during the call: the server may have reserved
            self._give_back_unknown(request, request_id)
            raise
        received = clock.monotonic()
        if not decision.allowed or decision.retry_at is None:
            return decision
        try:
            ending = self._wait(decision, received, give_up_at, cancel)
        except BaseException:  # interrupted while waiting (KeyboardInterrupt...): no work runs
            self._give_back(decision)
            raise
        if ending == "ready":
            return decision
        settled, error = self._give_back(decision)
        if ending == "late":
            raise ReservationTimeout(decision, settled, error)
        raise ReservationCancelled(settled, error)

    def _wait(self, decision: Decision, received: float, give_up_at: Optional[float],
              cancel: Optional[threading.Event]) -> Literal["ready", "late", "cancelled"]:
        """Sleeps until the reservation may run: "ready"; "late" when it may only run after
        `give_up_at` (then it does not sleep); "cancelled" when `cancel` is set first."""
        clock = self._clock
        while True:
            if cancel is not None and cancel.is_set():
                return "cancelled"
            remaining = c.wait_remaining(decision, received, clock)
            if remaining <= 0:
                return "ready"
            if give_up_at is not None and clock.monotonic() + remaining > give_up_at:
                return "late"
            clock.sleep(remaining, cancel)

    def _give_back(self, decision: Decision) -> Tuple[bool, Optional[BaseException]]:
        """Settles every receipt of `decision` with used=0: (given back, the error if not)."""
        receipts = decision.receipts
        if not receipts:
            return False, None
        try:
            self.settle([Settlement(r, 0.0) for r in receipts])
            return True, None
        except Exception as e:  # the caller reports the outcome either way
            _log.warning("could not give back a reservation: %s", e)
            return False, e

    def _give_back_unknown(self, limits: List[Limit], request_id: str) -> None:
        """Gives back the reservation a Reserve whose answer was lost may have made: the same
        Reserve again (the server answers it with the remembered reservation, or reserves now),
        settled with used=0."""
        try:
            again = self.reserve(limits, request_id=request_id)
            self._give_back(again)
        except Exception as e:
            _log.warning("could not give back a reservation whose answer was lost: %s", e)
