"""The synchronous client."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from . import _common as c
from ._pb import ratelimit_pb2_grpc as pb_grpc
from .errors import ReservationCancelled, UNREACHABLE_CODES, from_rpc_error
from .types import (BatchEntry, Decision, EnvoyPathEntry, LimitConfig, LimitSource, SettleResult,
                    Settlement, TlsOptions)

_log = logging.getLogger("ratelimit_client")
T = TypeVar("T")


class RateLimitClient:
    """A blocking client of ratelimit.v1.RateLimitService.

    Every call has a deadline (`timeout`, default 1 s; each method takes `timeout=` too) and
    raises a RateLimitError subclass carrying the gRPC code and the field the server named.
    Only Check is retried (`check_retries` times on UNAVAILABLE or DEADLINE_EXCEEDED): Consume
    and Reserve take tokens, so a retry of one whose answer was lost could take them twice;
    give them a `request_id` to make a retry safe.

    Thread safety: thread-safe; share one client (it multiplexes one gRPC channel). Close it
    with close() or use it as a context manager.
    """

    def __init__(self, target: str = "127.0.0.1:8081", *, timeout: float = c.DEFAULT_TIMEOUT,
                 tls: Union[bool, TlsOptions, None] = None, admin_token: Optional[str] = None,
                 admin_token_file: Optional[str] = None,
                 check_retries: int = c.DEFAULT_CHECK_RETRIES,
                 channel: Optional[grpc.Channel] = None):
        """Connects (lazily) to `target` ("host:port"). `tls`: True for gRPC's default roots,
        or TlsOptions. The admin token (sent with Reset only) is `admin_token`, else the first
        line of `admin_token_file`, else $RATELIMIT_ADMIN_TOKEN; it is read here, once.
        `channel`: use this channel instead (e.g. one with interceptors); `tls` is ignored."""
        self._timeout = timeout
        self._check_retries = check_retries
        self._admin_token = c.resolve_admin_token(admin_token, admin_token_file)
        if channel is None:
            creds, options = c.channel_credentials(tls)
            channel = (grpc.secure_channel(target, creds, options) if creds is not None
                       else grpc.insecure_channel(target, options))
        self._channel = channel
        self._stub = pb_grpc.RateLimitServiceStub(channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "RateLimitClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, fn: Callable[..., T], request: Any, timeout: Optional[float],
              metadata: Optional[List[Tuple[str, str]]] = None) -> T:
        try:
            return fn(request, timeout=self._timeout if timeout is None else timeout,
                      metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from e

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
        DEADLINE_EXCEEDED (`check_retries` times, short backoff)."""
        request = c.to_request(c.limits_of(limits, key, count, config), None)
        attempt = 0
        while True:
            try:
                return c.to_decision(self._call("Check", self._stub.Check, request, timeout))
            except Exception as e:
                code = getattr(e, "code", None)
                if code not in UNREACHABLE_CODES or attempt >= self._check_retries:
                    raise
                attempt += 1
                time.sleep(c.check_backoff(attempt))

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
        wrong one."""
        request = c.to_reset_request(name, key, all_keys, source, envoy_path, envoy_override)
        metadata = ([("authorization", "Bearer " + self._admin_token)]
                    if self._admin_token else None)
        self._call("Reset", self._stub.Reset, request, timeout, metadata)

    def reserve_and_wait(self, limits: c.LimitsArg, key: Optional[str] = None,
                         count: Optional[float] = None, *, config: Optional[LimitConfig] = None,
                         request_id: Optional[str] = None, timeout: Optional[float] = None,
                         cancel: Optional[threading.Event] = None) -> Decision:
        """Reserves, then blocks until the reservation's retry_at (never earlier on this
        machine's clock, nor before retry_after has passed since the answer), so the caller may run its pre-paid work when it returns. A denied
        reservation returns at once (allowed=False). When `cancel` is set before retry_at, the
        reservation is settled with used=0 (its tokens given back) and ReservationCancelled is
        raised."""
        decision = self.reserve(limits, key, count, config=config, request_id=request_id,
                                timeout=timeout)
        received = time.monotonic()
        if not decision.allowed or decision.retry_at is None:
            return decision
        while True:
            remaining = c.wait_remaining(decision, received)
            if remaining <= 0:
                return decision
            if cancel is None:
                time.sleep(remaining)
            elif cancel.wait(remaining):
                settled, error = self._give_back(decision, timeout)
                raise ReservationCancelled(settled, error)

    def _give_back(self, decision: Decision, timeout: Optional[float]
                   ) -> Tuple[bool, Optional[BaseException]]:
        receipts = decision.receipts
        if not receipts:
            return False, None
        try:
            self.settle([Settlement(r, 0.0) for r in receipts], timeout=timeout)
            return True, None
        except Exception as e:  # the cancellation is reported either way
            _log.warning("could not give back a cancelled reservation: %s", e)
            return False, e
