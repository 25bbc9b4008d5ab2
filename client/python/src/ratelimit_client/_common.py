"""Conversions between the typed API and the generated messages, and what the sync and
asyncio clients share (options, credentials, the admin token)."""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from ._pb import ratelimit_pb2 as pb
from .clock import SYSTEM_CLOCK, Clock
from .errors import RateLimitError, from_status
from .types import (AcquireResult, BatchEntry, Decision, DenyReason, EnvoyPathEntry,
                    ExtendResult, Kind, LeaseInfo, LeaseList, LeaseState, Limit, LimitConfig,
                    LimitResult, LimitSource, ReleaseResult, Override, OverrideAuditEntry, OverrideAuditPage,
                    OverrideLimit, OverridePage, OverrideTarget, SetOverrideResult, SettleResult,
                    Settlement, TlsOptions)

DEFAULT_TIMEOUT = 1.0
MAX_TIMEOUT = 1e8
"""The longest deadline a call takes, in seconds (about three years): gRPC reports a longer one
as exceeded at once."""


def check_timeout(timeout: float, field: str = "timeout") -> float:
    """`timeout` when it is a positive number of seconds up to MAX_TIMEOUT; else ValueError
    naming `field` (NaN, infinity, 0 or a negative number would fail every call, at once)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            0 < timeout <= MAX_TIMEOUT):
        raise ValueError("%s: must be a positive, finite number of seconds, at most 1e8 (about "
                         "three years), got %r" % (field, timeout))
    return float(timeout)
"""Deadline of each call, in seconds, unless the client or the call says otherwise."""

DEFAULT_CHECK_RETRIES = 2
"""Check is retried this many times on UNAVAILABLE / DEADLINE_EXCEEDED (Check writes nothing);
Consume, Reserve, Settle, Reset and the override calls are never retried."""

ADMIN_TOKEN_ENV = "RATELIMIT_ADMIN_TOKEN"

LimitsArg = Union[str, Limit, Sequence[Limit]]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_DATETIME = datetime.max.replace(tzinfo=timezone.utc)


def limits_of(limits: LimitsArg, key: Optional[str], count: Optional[float],
              config: Optional[LimitConfig]) -> List[Limit]:
    """The limits of a call: `consume("api", "user-1", count=2)` or `consume(Limit(...))` or
    `consume([Limit(...), ...])`."""
    if isinstance(limits, str):
        if key is None:
            raise TypeError("a limit given by name needs a key")
        return [Limit(limits, key, count, config)]
    if key is not None or count is not None or config is not None:
        raise TypeError("key, count and config go with a limit given by name; put them in the "
                        "Limit objects otherwise")
    if isinstance(limits, Limit):
        return [limits]
    return list(limits)


def _duration(d: timedelta) -> duration_pb2.Duration:
    out = duration_pb2.Duration()
    out.FromTimedelta(d)
    return out


def to_request(limits: Sequence[Limit], request_id: Optional[str],
               omit_receipts: bool = False) -> pb.RateLimitRequest:
    request = pb.RateLimitRequest(request_id=request_id or "", omit_receipts=omit_receipts)
    for limit in limits:
        entry = request.limits.add(name=limit.name, key=limit.key)
        if limit.count is not None:
            entry.count = float(limit.count)
        c = limit.config
        if c is not None:
            config_to_proto(c, entry.config)
    return request


def config_to_proto(c: LimitConfig, out: Any) -> None:
    """Fills the LimitConfig message `out`. A concurrency limit's period is sent only when set
    (the kind uses none); every other kind's always is."""
    out.kind = int(c.kind)
    out.rate = float(c.rate)
    if c.kind != Kind.CONCURRENCY or c.period:
        out.period.CopyFrom(_duration(c.period))
    if c.capacity is not None:
        out.capacity = float(c.capacity)
    if c.max_reserved is not None:
        out.max_reserved = float(c.max_reserved)
    if c.start is not None:
        out.start.CopyFrom(_duration(c.start))
    out.jitter = float(c.jitter)
    if c.lease_ttl is not None:
        out.lease_ttl.CopyFrom(_duration(c.lease_ttl))
    if c.max_lease_ttl is not None:
        out.max_lease_ttl.CopyFrom(_duration(c.max_lease_ttl))


def to_datetime(ts: timestamp_pb2.Timestamp) -> datetime:
    """A Timestamp as an aware UTC datetime (microseconds; the server's "never in practice"
    maximum, year 9999, becomes datetime.max)."""
    try:
        return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)
    except OverflowError:
        return _MAX_DATETIME


def to_timedelta(d: duration_pb2.Duration) -> timedelta:
    try:
        return timedelta(seconds=d.seconds, microseconds=d.nanos // 1000)
    except OverflowError:
        return timedelta.max


def _opt_time(msg: Any, name: str) -> Optional[datetime]:
    return to_datetime(getattr(msg, name)) if msg.HasField(name) else None


def _opt_duration(msg: Any, name: str) -> Optional[timedelta]:
    return to_timedelta(getattr(msg, name)) if msg.HasField(name) else None


def _limit_results(results: Any) -> Tuple[LimitResult, ...]:
    return tuple(
        LimitResult(name=r.name, key=r.key, allowed=r.allowed, value=r.value,
                    capacity=r.capacity, retry_at=_opt_time(r, "retry_at"),
                    retry_after=_opt_duration(r, "retry_after"), reason=DenyReason(r.reason),
                    receipt=bytes(r.receipt), override=r.override)
        for r in results)


def to_decision(response: pb.RateLimitResponse) -> Decision:
    results = _limit_results(response.results)
    return Decision(allowed=response.allowed, results=results,
                    retry_at=_opt_time(response, "retry_at"),
                    retry_after=_opt_duration(response, "retry_after"),
                    reason=DenyReason(response.reason),
                    denied_by=None if response.denied_by < 0 or response.allowed
                    else response.denied_by,
                    failed_open=response.failed_open, replayed=response.replayed)


def to_settle_request(settlements: Sequence[Settlement]) -> pb.SettleRequest:
    request = pb.SettleRequest()
    for s in settlements:
        request.settlements.add(receipt=bytes(s.receipt), used=float(s.used))
    return request


def to_settle_results(response: pb.SettleResponse) -> Tuple[SettleResult, ...]:
    return tuple(
        SettleResult(name=r.name, key=r.key, returned=r.returned, charged=r.charged,
                     uncharged=r.uncharged, value=r.value, paid_at=_opt_time(r, "paid_at"),
                     paid_after=_opt_duration(r, "paid_after"))
        for r in response.results)


def to_reset_request(name: str, key: str, all_keys: bool, source: LimitSource,
                     envoy_path: Sequence[EnvoyPathEntry],
                     envoy_override: bool) -> pb.ResetRequest:
    request = pb.ResetRequest(name=name, key=key, all_keys=all_keys, source=source.name,
                              envoy_override=envoy_override)
    for entry in envoy_path:
        request.envoy_path.add(key=entry.key, value=entry.value)
    return request


def admin_metadata(token: str) -> Optional[List[Tuple[str, str]]]:
    """The metadata of an administrative call: the admin token as a bearer token, when there
    is one."""
    return [("authorization", "Bearer " + token)] if token else None


def _target_to_proto(t: OverrideTarget, out: Any) -> None:
    out.source = int(t.source)
    out.name = t.name
    out.key = t.key
    out.key_pattern = t.key_pattern
    for entry in t.envoy_path:
        out.envoy_path.add(key=entry.key, value=entry.value)


def to_target(t: OverrideTarget) -> pb.OverrideTarget:
    out = pb.OverrideTarget()
    _target_to_proto(t, out)
    return out


def to_set_override_request(target: OverrideTarget, limit: Optional[OverrideLimit],
                            unlimited: bool, blocked: bool, expires_at: Optional[datetime],
                            expires_in: Optional[timedelta], reason: str, actor: str,
                            clock: Clock) -> pb.SetOverrideRequest:
    """The request of set_override. Giving more than one effect, or both expiry forms, is a
    TypeError; giving none is sent as is, for the server to refuse (override.effect)."""
    if sum((limit is not None, bool(unlimited), bool(blocked))) > 1:
        raise TypeError("an override is one of: limit fields (rate, period, capacity, "
                        "max_reserved), unlimited=True or blocked=True")
    if expires_at is not None and expires_in is not None:
        raise TypeError("give expires_at or expires_in, not both")
    request = pb.SetOverrideRequest(actor=actor)
    o = request.override
    _target_to_proto(target, o.target)
    if limit is not None:
        o.limit.SetInParent()
        if limit.rate is not None:
            o.limit.rate = float(limit.rate)
        if limit.period is not None:
            o.limit.period.CopyFrom(_duration(limit.period))
        if limit.capacity is not None:
            o.limit.capacity = float(limit.capacity)
        if limit.max_reserved is not None:
            o.limit.max_reserved = float(limit.max_reserved)
    elif unlimited:
        o.unlimited = True
    elif blocked:
        o.blocked = True
    if expires_in is not None:
        expires_at = clock.now() + expires_in
    if expires_at is not None:
        if expires_at.tzinfo is None:
            raise ValueError("expires_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
        o.expires_at.FromDatetime(expires_at.astimezone(timezone.utc))
    o.reason = reason
    return request


def _from_target(t: pb.OverrideTarget) -> OverrideTarget:
    return OverrideTarget(name=t.name, key=t.key, key_pattern=t.key_pattern,
                          source=LimitSource(t.source),
                          envoy_path=tuple(EnvoyPathEntry(e.key, e.value) for e in t.envoy_path))


def to_override(o: pb.Override) -> Override:
    limit = None
    if o.HasField("limit"):
        lim = o.limit
        limit = OverrideLimit(
            rate=lim.rate if lim.HasField("rate") else None,
            period=_opt_duration(lim, "period"),
            capacity=lim.capacity if lim.HasField("capacity") else None,
            max_reserved=lim.max_reserved if lim.HasField("max_reserved") else None)
    return Override(target=_from_target(o.target), limit=limit, unlimited=o.unlimited,
                    blocked=o.blocked, expires_at=_opt_time(o, "expires_at"), reason=o.reason,
                    set_by=o.set_by, set_at=_opt_time(o, "set_at"), expired=o.expired,
                    inert=o.inert)


def _opt_override(msg: Any, name: str) -> Optional[Override]:
    return to_override(getattr(msg, name)) if msg.HasField(name) else None


def to_set_override_result(response: pb.SetOverrideResponse) -> SetOverrideResult:
    return SetOverrideResult(override=to_override(response.override),
                             replaced=_opt_override(response, "replaced"))


def to_get_override_request(target: OverrideTarget) -> pb.GetOverrideRequest:
    return pb.GetOverrideRequest(target=to_target(target))


def to_delete_override_request(target: OverrideTarget, reason: str,
                               actor: str) -> pb.DeleteOverrideRequest:
    return pb.DeleteOverrideRequest(target=to_target(target), reason=reason, actor=actor)


def to_list_overrides_request(name: str, source: LimitSource, page_size: int,
                              page_token: str) -> pb.ListOverridesRequest:
    return pb.ListOverridesRequest(source=source.name, name=name, page_size=page_size,
                                   page_token=page_token)


def to_override_page(response: pb.ListOverridesResponse) -> OverridePage:
    return OverridePage(overrides=tuple(to_override(o) for o in response.overrides),
                        next_page_token=response.next_page_token)


def to_list_audit_request(name: str, page_size: int,
                          page_token: str) -> pb.ListOverrideAuditRequest:
    return pb.ListOverrideAuditRequest(name=name, page_size=page_size, page_token=page_token)


def to_audit_page(response: pb.ListOverrideAuditResponse) -> OverrideAuditPage:
    return OverrideAuditPage(
        entries=tuple(
            OverrideAuditEntry(sequence=e.sequence, at=_opt_time(e, "at"), action=e.action,
                               authorized_by=e.authorized_by, actor=e.actor, peer=e.peer,
                               reason=e.reason, before=_opt_override(e, "before"),
                               after=_opt_override(e, "after"))
            for e in response.entries),
        next_page_token=response.next_page_token)


def override_limit_of(rate: Optional[float], period: Optional[timedelta],
                      capacity: Optional[float],
                      max_reserved: Optional[float]) -> Optional[OverrideLimit]:
    """The OverrideLimit of set_override's limit fields; None when none is given."""
    if rate is None and period is None and capacity is None and max_reserved is None:
        return None
    return OverrideLimit(rate=rate, period=period, capacity=capacity, max_reserved=max_reserved)


def resolve_admin_token(admin_token: Optional[str], admin_token_file: Optional[str]) -> str:
    """The admin token: `admin_token`, else the first line of `admin_token_file`, else
    $RATELIMIT_ADMIN_TOKEN, else "" (Reset and the override calls will be refused)."""
    if admin_token:
        return admin_token
    if admin_token_file:
        with open(admin_token_file, encoding="utf-8") as f:
            token = f.readline().strip()
        if not token:
            raise ValueError("admin_token_file %s: the first line is empty" % admin_token_file)
        return token
    return os.environ.get(ADMIN_TOKEN_ENV, "").strip()


def _read(path: Optional[str], what: str) -> Optional[bytes]:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError("%s %s: %s" % (what, path, e.strerror)) from e


def channel_credentials(tls: Union[bool, TlsOptions, None]
                        ) -> Tuple[Optional[grpc.ChannelCredentials], List[Tuple[str, str]]]:
    """(credentials, channel options) for `tls`; (None, []) for plaintext."""
    if not tls:
        return None, []
    options = tls if isinstance(tls, TlsOptions) else TlsOptions()
    if (options.cert_file is None) != (options.key_file is None):
        raise ValueError("tls: cert_file and key_file go together")
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(options.ca_file, "tls.ca_file"),
        private_key=_read(options.key_file, "tls.key_file"),
        certificate_chain=_read(options.cert_file, "tls.cert_file"))
    channel_options = []
    if options.server_name:
        channel_options.append(("grpc.ssl_target_name_override", options.server_name))
    return creds, channel_options


def wait_remaining(decision: Decision, received: float, clock: Clock = SYSTEM_CLOCK) -> float:
    """Seconds reserve_and_wait must still wait: until retry_at by this machine's wall clock
    and until `retry_after` has passed since the answer arrived (`received`, a reading of
    clock.monotonic()), whichever is later, so that a clock running ahead of the server's does
    not end the wait early. Each sleep is at most a day (a far retry_at is slept in steps)."""
    remaining = 0.0
    if decision.retry_at is not None:
        remaining = (decision.retry_at - clock.now()).total_seconds()
    if decision.retry_after is not None:
        remaining = max(remaining, received + decision.retry_after.total_seconds()
                        - clock.monotonic())
    return min(remaining, 86400.0)


def reserve_deadline(client_timeout: float, bound: Optional[float]) -> float:
    """The deadline of reserve_and_wait's Reserve: the client's timeout, and no more than the
    whole call's bound."""
    return client_timeout if bound is None else min(client_timeout, bound)


def check_backoff(attempt: int) -> float:
    """Seconds to wait before retry number `attempt` (1-based) of a Check."""
    return min(0.05 * 2.0 ** (attempt - 1), 1.0)


# The least time a retried Check is sent with: a retry that would have less is not made.
MIN_ATTEMPT_SECONDS = 0.01


def check_retry_pause(attempt: int, deadline: float, now: float) -> Optional[float]:
    """The pause before retry number `attempt` (1-based) of a Check whose attempts share one
    deadline (`deadline` and `now` in monotonic seconds), or None when the pause and
    MIN_ATTEMPT_SECONDS of call after it do not fit before the deadline."""
    pause = check_backoff(attempt)
    return pause if now + pause + MIN_ATTEMPT_SECONDS <= deadline else None


def attempt_timeout(deadline: float, now: float) -> float:
    """What is left of a Check's deadline for its next attempt (at least MIN_ATTEMPT_SECONDS: a
    pause that overslept does not leave a call without a deadline)."""
    return max(deadline - now, MIN_ATTEMPT_SECONDS)


BatchResult = Union[Decision, RateLimitError]
"""The answer to one entry of a batch: its Decision, or its own error (not raised)."""


def to_batch_request(entries: Sequence[BatchEntry]) -> pb.BatchRequest:
    request = pb.BatchRequest()
    for e in entries:
        entry = request.entries.add(method=int(e.method))
        entry.request.CopyFrom(to_request(e.limits, None, e.omit_receipts))
    return request


def to_batch_results(response: pb.BatchResponse) -> Tuple[BatchResult, ...]:
    return tuple(
        from_status(r.error.code, r.error.message, "Batch") if r.HasField("error")
        else to_decision(r.response)
        for r in response.results)


# Concurrency leases.

def to_acquire_request(limits: Sequence[Limit], ttl: Optional[timedelta],
                       request_id: Optional[str], holder: str) -> pb.AcquireRequest:
    request = pb.AcquireRequest(request_id=request_id or "", holder=holder)
    request.limits.extend(to_request(limits, None).limits)
    if ttl is not None:
        request.ttl.CopyFrom(_duration(ttl))
    return request


def to_lease(lease: pb.Lease) -> LeaseInfo:
    return LeaseInfo(id=lease.id, name=lease.name, key=lease.key,
                     source=LimitSource(lease.source), count=lease.count,
                     acquired_at=_opt_time(lease, "acquired_at"),
                     expires_at=_opt_time(lease, "expires_at"), holder=lease.holder)


def _opt_lease(msg: Any) -> Optional[LeaseInfo]:
    return to_lease(msg.lease) if msg.HasField("lease") else None


def to_acquire_result(response: pb.AcquireResponse) -> AcquireResult:
    return AcquireResult(allowed=response.allowed, lease=_opt_lease(response),
                         results=_limit_results(response.results),
                         retry_at=_opt_time(response, "retry_at"),
                         retry_after=_opt_duration(response, "retry_after"),
                         reason=DenyReason(response.reason),
                         denied_by=None if response.denied_by < 0 or response.allowed
                         else response.denied_by,
                         replayed=response.replayed)


def to_release_request(name: str, key: str, lease_id: str,
                       config: Optional[LimitConfig]) -> pb.ReleaseRequest:
    request = pb.ReleaseRequest(name=name, key=key, lease_id=lease_id)
    if config is not None:
        config_to_proto(config, request.config)
    return request


def to_extend_request(name: str, key: str, lease_id: str, ttl: Optional[timedelta],
                      config: Optional[LimitConfig]) -> pb.ExtendRequest:
    request = pb.ExtendRequest(name=name, key=key, lease_id=lease_id)
    if config is not None:
        config_to_proto(config, request.config)
    if ttl is not None:
        request.ttl.CopyFrom(_duration(ttl))
    return request


def to_list_leases_request(name: str, key: str, source: LimitSource,
                           config: Optional[LimitConfig], page_size: int = 0,
                           page_token: str = "") -> pb.ListLeasesRequest:
    """A config names an inline limit, as in Acquire, Release and Extend (which have no
    source): the default source (LIMITS_FILE) is then sent as INLINE."""
    if config is not None and source == LimitSource.LIMITS_FILE:
        source = LimitSource.INLINE
    request = pb.ListLeasesRequest(name=name, key=key, source=source.name, page_size=page_size,
                                   page_token=page_token)
    if config is not None:
        config_to_proto(config, request.config)
    return request


def to_release_result(response: pb.ReleaseResponse) -> ReleaseResult:
    return ReleaseResult(state=LeaseState(response.state), held=response.held)


def to_extend_result(response: pb.ExtendResponse) -> ExtendResult:
    return ExtendResult(state=LeaseState(response.state), lease=_opt_lease(response))


def to_lease_list(response: pb.ListLeasesResponse) -> LeaseList:
    return LeaseList(leases=tuple(to_lease(lease) for lease in response.leases),
                     held=response.held, capacity=response.capacity,
                     next_page_token=response.next_page_token)
