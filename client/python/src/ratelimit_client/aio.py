"""The asyncio client (grpc.aio)."""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
import weakref
from datetime import datetime, timedelta
from typing import (Any, AsyncIterator, Awaitable, Callable, List, Optional, Sequence, Tuple,
                    TypeVar, Union)

import grpc
import grpc.aio

from . import _common as c
from ._lease_stream_aio import AsyncLeaseStream
from ._pb import ratelimit_pb2_grpc as pb_grpc
from .clock import SYSTEM_CLOCK, Clock
from .errors import (OUTCOME_UNKNOWN_CODES, UNREACHABLE_CODES, RateLimitError,
                     ReservationTimeout, client_closed, from_rpc_error)
from .leases import AsyncLease, Seconds, as_timedelta
from .types import (AcquireResult, BatchEntry, ExtendResult, LeaseList, ReleaseResult, Decision, EnvoyPathEntry, LimitConfig, LimitSource, Override,
                    OverrideAuditEntry, OverrideAuditPage, OverridePage, OverrideTarget,
                    SetOverrideResult, SettleResult, Settlement, TlsOptions)

_log = logging.getLogger("ratelimit_client")
T = TypeVar("T")


class AsyncRateLimitClient:
    """An asyncio client of ratelimit.v1.RateLimitService; the same calls, options, deadlines,
    errors and retry rule (only Check) as RateLimitClient.

    Create it inside the event loop that uses it (grpc.aio channels belong to one loop); close
    it with `await client.close()` or `async with`. `lease_stream=True` sends acquire, release
    and extend as ops on one LeaseStream of the client (shared by every task), as
    RateLimitClient's option does.
    """

    def __init__(self, target: str = "127.0.0.1:8081", *, timeout: float = c.DEFAULT_TIMEOUT,
                 tls: Union[bool, TlsOptions, None] = None, admin_token: Optional[str] = None,
                 admin_token_file: Optional[str] = None,
                 check_retries: int = c.DEFAULT_CHECK_RETRIES,
                 interceptors: Optional[Sequence[grpc.aio.ClientInterceptor]] = None,
                 clock: Clock = SYSTEM_CLOCK, lease_stream: bool = False):
        """`clock`: what reserve_and_wait reads and sleeps on (tests pass a fake); the other
        options are RateLimitClient's (`lease_stream` too: a writer and a reader task serve
        the stream)."""
        self._timeout = c.check_timeout(timeout)
        self._clock = clock
        self._check_retries = check_retries
        self._admin_token = c.resolve_admin_token(admin_token, admin_token_file)
        creds, options = c.channel_credentials(tls)
        if creds is not None:
            self._channel = grpc.aio.secure_channel(target, creds, options,
                                                    interceptors=interceptors)
        else:
            self._channel = grpc.aio.insecure_channel(target, options, interceptors=interceptors)
        self._closed = False
        self._leases: "weakref.WeakSet[AsyncLease]" = weakref.WeakSet()  # held
        self._stub = pb_grpc.RateLimitServiceStub(self._channel)
        self._overrides = pb_grpc.OverrideServiceStub(self._channel)
        self._lease_stream = AsyncLeaseStream(self._stub) if lease_stream else None

    async def close(self) -> None:
        """Closes the channel: the calls in flight fail (CANCELLED), and so does every later
        call (RateLimitError CANCELLED "the client is closed"). Every lease the client holds
        is lost at once: its `lost` is set (lost_reason "the client was closed") and its
        heartbeat task is cancelled and waited for, abandoning an extend in flight, before the
        channel closes; no call is sent. The lease stream (lease_stream=True) ends, its ops in
        flight failing as the calls do, and its tasks are waited for."""
        self._closed = True
        leases = list(self._leases)
        self._leases.clear()
        tasks = [t for t in (lease._lose_to_close() for lease in leases) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._lease_stream is not None:
            await self._lease_stream.close()
        await self._channel.close()

    def _hold(self, lease: AsyncLease) -> bool:
        """Counts an acquired lease among the client's, for close() to lose; False when the
        client is closed already (the lease is then lost at once)."""
        if self._closed:
            lease._lose_to_close()
            return False
        self._leases.add(lease)
        return True

    def _drop(self, lease: AsyncLease) -> None:
        """A released lease is no longer the client's."""
        self._leases.discard(lease)

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    async def __aenter__(self) -> "AsyncRateLimitClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, fn: Callable[..., Awaitable[T]], request: Any,
                    timeout: Optional[float],
                    metadata: Optional[List[Tuple[str, str]]] = None) -> T:
        deadline = self._timeout if timeout is None else c.check_timeout(timeout)
        try:
            return await fn(request, timeout=deadline, metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from e
        except grpc.aio.UsageError:  # grpc's "Channel is closed."
            if self._closed:
                raise client_closed(method) from None
            raise

    async def _lease_call(self, method: str, fn: Callable[..., Awaitable[Any]], request: Any,
                          timeout: Optional[float]) -> Any:
        """Acquire, Release or Extend: a unary call, or an op on the lease stream; the
        response message either way."""
        if self._lease_stream is None:
            return await self._call(method, fn, request, timeout)
        deadline = self._timeout if timeout is None else c.check_timeout(timeout)
        return await self._lease_stream.call(
            method, request, deadline, lambda left: self._call(method, fn, request, left))

    async def consume(self, limits: c.LimitsArg, key: Optional[str] = None,
                      count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                      request_id: Optional[str] = None, omit_receipts: bool = False,
                      timeout: Optional[float] = None) -> Decision:
        """Takes `count` (default 1) tokens from every limit, or from none. Never retried.
        `omit_receipts=True`: an allowed answer carries no receipts (for callers that never
        settle; it spares the server the signing and the reply the bytes)."""
        request = c.to_request(c.limits_of(limits, key, count, config), request_id,
                               omit_receipts)
        return c.to_decision(await self._call("Consume", self._stub.Consume, request, timeout))

    async def reserve(self, limits: c.LimitsArg, key: Optional[str] = None,
                      count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                      request_id: Optional[str] = None, omit_receipts: bool = False,
                      timeout: Optional[float] = None) -> Decision:
        """Like consume, but may go into debt down to -max_reserved. Never retried.
        `omit_receipts=True`: no receipts, as for consume (the reservation can then not be
        settled or cancelled)."""
        request = c.to_request(c.limits_of(limits, key, count, config), request_id,
                               omit_receipts)
        return c.to_decision(await self._call("Reserve", self._stub.Reserve, request, timeout))

    async def check(self, limits: c.LimitsArg, key: Optional[str] = None,
                    count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                    timeout: Optional[float] = None) -> Decision:
        """What consume would answer now; writes nothing, so retried on UNAVAILABLE and
        DEADLINE_EXCEEDED (`check_retries` times, short backoff). `timeout` bounds the whole
        call, its retries and their pauses included: a retry that no longer fits is not made."""
        request = c.to_request(c.limits_of(limits, key, count, config), None)
        deadline = time.monotonic() + (self._timeout if timeout is None
                                       else c.check_timeout(timeout))
        attempt = 0
        while True:
            try:
                return c.to_decision(await self._call(
                    "Check", self._stub.Check, request,
                    c.attempt_timeout(deadline, time.monotonic())))
            except Exception as e:
                code = getattr(e, "code", None)
                if code not in UNREACHABLE_CODES or attempt >= self._check_retries:
                    raise
                pause = c.check_retry_pause(attempt + 1, deadline, time.monotonic())
                if pause is None:
                    raise
                attempt += 1
                await asyncio.sleep(pause)

    async def settle(self, settlements: Sequence[Settlement], *,
                     timeout: Optional[float] = None) -> Tuple[SettleResult, ...]:
        """Settles receipts with what was really used (used=0 cancels a reservation)."""
        request = c.to_settle_request(settlements)
        return c.to_settle_results(await self._call("Settle", self._stub.Settle, request,
                                                    timeout))

    async def batch(self, entries: Sequence[BatchEntry], *,
                    timeout: Optional[float] = None) -> Tuple[c.BatchResult, ...]:
        """Sends independent Consume/Check/Reserve requests in one call. The server decides
        them in order (a later entry sees the effect of the earlier ones), each all-or-nothing
        on its own. Returns one result per entry, in order: its Decision, or its own
        RateLimitError (returned, not raised; `field` names the entry, e.g.
        "entries[2].limits[0].count"). Raises only for the whole call (no entries, over the
        server's bounds, unreachable). Never retried."""
        request = c.to_batch_request(entries)
        return c.to_batch_results(await self._call("Batch", self._stub.Batch, request,
                                                   timeout))

    async def reset(self, name: str, key: str = "", *, all_keys: bool = False,
                    source: LimitSource = LimitSource.LIMITS_FILE,
                    envoy_path: Sequence[EnvoyPathEntry] = (), envoy_override: bool = False,
                    timeout: Optional[float] = None) -> None:
        """Administrative: makes one key (or every key) of a limit full again. Sends the admin
        token; UnauthenticatedError without one, PermissionDeniedError with a wrong one, or
        from a server whose Reset is disabled (the server's message says so)."""
        request = c.to_reset_request(name, key, all_keys, source, envoy_path, envoy_override)
        await self._call("Reset", self._stub.Reset, request, timeout,
                         c.admin_metadata(self._admin_token))

    # Concurrency limits: RateLimitClient's lease calls, awaited.

    async def acquire(self, limits: c.LimitsArg, key: Optional[str] = None,
                      count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                      ttl: Optional[Seconds] = None, request_id: Optional[str] = None,
                      holder: str = "", timeout: Optional[float] = None) -> AcquireResult:
        """Takes slots of one concurrency limit (and tokens of any rate limits), all or
        nothing; a denial is a value. See RateLimitClient.acquire."""
        request = c.to_acquire_request(c.limits_of(limits, key, count, config),
                                       as_timedelta(ttl), request_id, holder)
        return c.to_acquire_result(await self._lease_call("Acquire", self._stub.Acquire,
                                                          request, timeout))

    async def release(self, name: str, key: str, lease_id: str, *,
                      config: Optional[LimitConfig] = None,
                      timeout: Optional[float] = None) -> ReleaseResult:
        """Gives a lease's slots back (RELEASED, or NOT_HELD changing nothing)."""
        request = c.to_release_request(name, key, lease_id, config)
        return c.to_release_result(await self._lease_call("Release", self._stub.Release,
                                                          request, timeout))

    async def extend(self, name: str, key: str, lease_id: str, *,
                     ttl: Optional[Seconds] = None, config: Optional[LimitConfig] = None,
                     timeout: Optional[float] = None) -> ExtendResult:
        """Pushes a held lease's expiry to now + ttl (HELD), or answers NOT_HELD."""
        request = c.to_extend_request(name, key, lease_id, as_timedelta(ttl), config)
        return c.to_extend_result(await self._lease_call("Extend", self._stub.Extend,
                                                         request, timeout))

    async def list_leases(self, name: str, key: str, *,
                          source: LimitSource = LimitSource.LIMITS_FILE,
                          config: Optional[LimitConfig] = None, page_size: int = 0,
                          page_token: str = "", timeout: Optional[float] = None) -> LeaseList:
        """Administrative: a page of the leases held on one key of a concurrency limit (as
        RateLimitClient.list_leases: a `config` is sent with source INLINE)."""
        request = c.to_list_leases_request(name, key, source, config, page_size, page_token)
        return c.to_lease_list(await self._admin("ListLeases", self._stub.ListLeases, request,
                                                 timeout))

    def lease(self, limits: c.LimitsArg, key: Optional[str] = None,
              count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
              ttl: Optional[Seconds] = None, request_id: Optional[str] = None,
              holder: str = "", heartbeat: Optional[float] = None, wait: float = 0.0,
              timeout: Optional[float] = None) -> AsyncLease:
        """A held lease, for `async with client.lease("jobs", tenant) as lease:`; see
        RateLimitClient.lease. An asyncio task extends it; `lease.lost` is an asyncio.Event."""
        return AsyncLease(self, c.limits_of(limits, key, count, config), ttl=ttl,
                          request_id=request_id, holder=holder, heartbeat=heartbeat,
                          wait=wait,
                          timeout=self._timeout if timeout is None else c.check_timeout(timeout),
                          clock=self._clock)

    # Overrides: RateLimitClient's override calls, awaited.

    async def set_override(self, target: OverrideTarget, *, rate: Optional[float] = None,
                           period: Optional[timedelta] = None,
                           capacity: Optional[float] = None,
                           max_reserved: Optional[float] = None, unlimited: bool = False,
                           blocked: bool = False, expires_at: Optional[datetime] = None,
                           expires_in: Optional[timedelta] = None, reason: str = "",
                           actor: str = "",
                           timeout: Optional[float] = None) -> SetOverrideResult:
        """Creates or replaces the override of `target`; see RateLimitClient.set_override."""
        request = c.to_set_override_request(
            target, c.override_limit_of(rate, period, capacity, max_reserved), unlimited,
            blocked, expires_at, expires_in, reason, actor, self._clock)
        return c.to_set_override_result(await self._admin(
            "SetOverride", self._overrides.SetOverride, request, timeout))

    async def get_override(self, target: OverrideTarget, *,
                           timeout: Optional[float] = None) -> Override:
        """The override of `target`; NotFoundError when it has none."""
        request = c.to_get_override_request(target)
        response = await self._admin("GetOverride", self._overrides.GetOverride, request,
                                     timeout)
        return c.to_override(response.override)

    async def delete_override(self, target: OverrideTarget, *, reason: str = "",
                              actor: str = "", timeout: Optional[float] = None) -> Override:
        """Deletes the override of `target` and returns it; NotFoundError when it has none."""
        request = c.to_delete_override_request(target, reason, actor)
        response = await self._admin("DeleteOverride", self._overrides.DeleteOverride, request,
                                     timeout)
        return c.to_override(response.deleted)

    async def list_overrides(self, name: str = "", *,
                             source: LimitSource = LimitSource.LIMITS_FILE, page_size: int = 0,
                             page_token: str = "",
                             timeout: Optional[float] = None) -> OverridePage:
        """One page of the overrides; see RateLimitClient.list_overrides."""
        request = c.to_list_overrides_request(name, source, page_size, page_token)
        return c.to_override_page(await self._admin(
            "ListOverrides", self._overrides.ListOverrides, request, timeout))

    async def iter_overrides(self, name: str = "", *,
                             source: LimitSource = LimitSource.LIMITS_FILE, page_size: int = 0,
                             timeout: Optional[float] = None) -> AsyncIterator[Override]:
        """Every override list_overrides would page through (`async for`), fetching each page
        as it is reached."""
        token = ""
        while True:
            page = await self.list_overrides(name, source=source, page_size=page_size,
                                             page_token=token, timeout=timeout)
            for o in page.overrides:
                yield o
            token = page.next_page_token
            if not token:
                return

    async def list_override_audit(self, name: str = "", *, page_size: int = 0,
                                  page_token: str = "",
                                  timeout: Optional[float] = None) -> OverrideAuditPage:
        """One page of the audit history, newest first; see
        RateLimitClient.list_override_audit."""
        request = c.to_list_audit_request(name, page_size, page_token)
        return c.to_audit_page(await self._admin(
            "ListOverrideAudit", self._overrides.ListOverrideAudit, request, timeout))

    async def iter_override_audit(self, name: str = "", *, page_size: int = 0,
                                  timeout: Optional[float] = None
                                  ) -> AsyncIterator[OverrideAuditEntry]:
        """Every audit entry, newest first (`async for`), fetching each page as it is
        reached."""
        token = ""
        while True:
            page = await self.list_override_audit(name, page_size=page_size, page_token=token,
                                                  timeout=timeout)
            for e in page.entries:
                yield e
            token = page.next_page_token
            if not token:
                return

    async def _admin(self, method: str, fn: Callable[..., Awaitable[T]], request: Any,
                     timeout: Optional[float]) -> T:
        return await self._call(method, fn, request, timeout,
                                c.admin_metadata(self._admin_token))

    async def reserve_and_wait(self, limits: c.LimitsArg, key: Optional[str] = None,
                               count: Optional[float] = None, *,
                               config: Optional[LimitConfig] = None,
                               request_id: Optional[str] = None,
                               timeout: Optional[float] = None) -> Decision:
        """Reserves, then sleeps until the reservation's retry_at (never earlier on this
        machine's clock, nor before retry_after has passed since the answer). A denied
        reservation returns at once (allowed=False).

        `timeout` (seconds; None: no bound) bounds the whole call, not only the Reserve: the
        Reserve's deadline is the smaller of it and the client's timeout, and a reservation
        whose work may only run after `timeout` has passed is given back at once (settled with
        used=0) and ReservationTimeout is raised, without sleeping.

        A task whose cancellation is already pending (task.cancel() was called, an
        asyncio.timeout() has expired) raises CancelledError before anything is sent, and so
        does a `timeout` that is not a positive number (ValueError naming `timeout`).

        Cancelling the task while it sleeps settles the reservation with used=0 (its tokens go
        back to the limits; a failure to do so is logged) and re-raises CancelledError. So does
        cancelling it while the Reserve call itself is in flight, or that call timing out or
        being cut off (DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE): the server may have reserved
        without the answer arriving, so the Reserve carries a request_id (a random one unless
        given), and the same Reserve is sent again to fetch the remembered reservation (or to
        reserve now), which is then settled with used=0. The give-back calls have the client's
        timeout."""
        clock = self._clock
        if timeout is not None:
            timeout = c.check_timeout(timeout)
        give_up_at = None if timeout is None else clock.monotonic() + timeout
        request = c.limits_of(limits, key, count, config)
        if request_id is None:
            request_id = secrets.token_hex(16)
        # A cancellation already pending is delivered here, before the Reserve: nothing has
        # been sent, so there is nothing to give back.
        await asyncio.sleep(0)

        async def give_back_unknown() -> None:
            again = await self.reserve(request, request_id=request_id)
            if again.receipts:
                await self.settle([Settlement(r, 0.0) for r in again.receipts])

        try:
            decision = await self.reserve(request, request_id=request_id,
                                          timeout=c.reserve_deadline(self._timeout, timeout))
        except asyncio.CancelledError:
            await self._finish_give_back(asyncio.ensure_future(give_back_unknown()))
            raise
        except RateLimitError as e:
            if e.code in OUTCOME_UNKNOWN_CODES:
                await self._finish_give_back(asyncio.ensure_future(give_back_unknown()))
            raise
        received = clock.monotonic()
        if not decision.allowed or decision.retry_at is None:
            return decision
        try:
            while True:
                remaining = c.wait_remaining(decision, received, clock)
                if remaining <= 0:
                    return decision
                if give_up_at is not None and clock.monotonic() + remaining > give_up_at:
                    break
                # The loop's timers may fire up to its clock resolution early: sleep again
                # until retry_at has really passed.
                await clock.sleep_async(remaining)
        except BaseException:  # cancelled (or interrupted) while sleeping: no work runs
            await self._give_back_decision(decision)
            raise
        # The work may only run after the bound: give the reservation back at once.
        give_back = await self._give_back_decision(decision)
        if give_back is None:
            raise asyncio.CancelledError()  # cancelled while giving back (it goes on)
        settled, error = give_back
        raise ReservationTimeout(decision, settled, error)

    async def _give_back_decision(self, decision: Decision
                                  ) -> Optional[Tuple[bool, Optional[BaseException]]]:
        """Settles every receipt of `decision` with used=0, through a further cancellation:
        (given back, the error if not), or None when the task was cancelled meanwhile (the
        give-back goes on in the background)."""
        receipts = decision.receipts
        if not receipts:
            return False, None
        give_back = asyncio.ensure_future(self.settle([Settlement(r, 0.0) for r in receipts]))
        if await self._finish_give_back(give_back):
            return None
        if give_back.cancelled():
            return False, None
        error = give_back.exception()
        return error is None, error

    @staticmethod
    async def _finish_give_back(give_back: "asyncio.Future[Any]") -> bool:
        """Waits for a reservation's give-back, which a further cancellation does not stop (it
        goes on in the background); a failure is logged. True when the waiting task was
        cancelled meanwhile."""
        try:
            await asyncio.shield(give_back)
        except asyncio.CancelledError:
            return True  # cancelled again: the give-back goes on in the background
        except Exception as e:
            _log.warning("could not give back a reservation: %s", e)
        return False
