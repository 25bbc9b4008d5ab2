"""Typed requests and results of ratelimit.v1 (plain dataclasses; no protobuf in the API)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Optional, Sequence, Tuple


class Kind(enum.IntEnum):
    """How a limit refills (ratelimit.v1.Kind)."""

    TOKEN_BUCKET = 1
    FIXED_WINDOW = 2
    CONCURRENCY = 3
    """At most `capacity` slots held at once, taken by acquire for a lease (see lease())."""


class DenyReason(enum.IntEnum):
    """Why a limit denied (ratelimit.v1.DenyReason); UNSPECIFIED when it allows."""

    UNSPECIFIED = 0
    INSUFFICIENT_TOKENS = 1
    COUNT_EXCEEDS_CAPACITY = 2
    MAX_RESERVED_EXCEEDED = 3
    BLOCKED = 4
    """An override blocks the key: no retry will succeed, so no retry_at is given."""
    NO_FREE_SLOTS = 5
    """A concurrency limit has fewer free slots than the count: retry_at is when enough leases
    expire if none is released or extended meanwhile (a release frees slots sooner)."""

    @classmethod
    def _missing_(cls, value: object) -> "DenyReason":
        # A reason added to the protocol after this client was written is read as UNSPECIFIED
        # rather than raising: `allowed` still says whether the limit denied.
        return cls.UNSPECIFIED


class LimitSource(enum.IntEnum):
    """The namespace a Reset or an override applies to (ratelimit.v1.LimitSource)."""

    LIMITS_FILE = 0
    INLINE = 1
    ENVOY = 2


@dataclass(frozen=True)
class LimitConfig:
    """An inline limit definition, for a name the server's limits file does not define.

    None leaves a field to the server's default: capacity = rate, max_reserved unbounded,
    start derived from the key (fixed windows).

    A concurrency limit (Kind.CONCURRENCY, or LimitConfig.concurrency(...)) uses capacity
    (whole slots), lease_ttl (the TTL of a lease whose acquire gives none; server default 30 s)
    and max_lease_ttl (the longest TTL an acquire or extend may ask for; server default
    max(lease_ttl, 1 hour)); rate and period stay unset."""

    kind: Kind
    rate: float = 0.0
    period: timedelta = timedelta(0)
    capacity: Optional[float] = None
    max_reserved: Optional[float] = None
    start: Optional[timedelta] = None
    jitter: float = 0.0
    lease_ttl: Optional[timedelta] = None
    max_lease_ttl: Optional[timedelta] = None

    @classmethod
    def concurrency(cls, capacity: int, lease_ttl: Optional[timedelta] = None,
                    max_lease_ttl: Optional[timedelta] = None) -> "LimitConfig":
        """An inline concurrency limit: at most `capacity` slots held at once."""
        return cls(Kind.CONCURRENCY, capacity=capacity, lease_ttl=lease_ttl,
                   max_lease_ttl=max_lease_ttl)


@dataclass(frozen=True)
class Limit:
    """One limit of a request: `count` tokens (server default 1 when None) of (name, key)."""

    name: str
    key: str
    count: Optional[float] = None
    config: Optional[LimitConfig] = None


@dataclass(frozen=True)
class LimitResult:
    """The verdict on one limit. retry_at is a timezone-aware UTC datetime (None when unset).
    override is the key or key pattern of the override that set this limit for the key, empty
    when the configured limit decided."""

    name: str
    key: str
    allowed: bool
    value: float
    capacity: float
    retry_at: Optional[datetime] = None
    retry_after: Optional[timedelta] = None
    reason: DenyReason = DenyReason.UNSPECIFIED
    receipt: bytes = b""
    override: str = ""


@dataclass(frozen=True)
class Decision:
    """The answer to Consume, Check or Reserve.

    denied_by is the index into `results` of the limit that decided a denial, None when
    allowed. failed_open: the server's store failed and it allowed without evaluating.
    replayed: the remembered answer to an earlier call with the same request_id."""

    allowed: bool
    results: Tuple[LimitResult, ...] = field(default_factory=tuple)
    retry_at: Optional[datetime] = None
    retry_after: Optional[timedelta] = None
    reason: DenyReason = DenyReason.UNSPECIFIED
    denied_by: Optional[int] = None
    failed_open: bool = False
    replayed: bool = False

    def __bool__(self) -> bool:
        return self.allowed

    @property
    def receipts(self) -> Tuple[bytes, ...]:
        """The non-empty receipts of the results (what an allowed Consume/Reserve took)."""
        return tuple(r.receipt for r in self.results if r.receipt)


class Method(enum.IntEnum):
    """What an entry of a batch asks for (ratelimit.v1.BatchEntry.Method)."""

    CONSUME = 0
    CHECK = 1
    RESERVE = 2


@dataclass(frozen=True)
class BatchEntry:
    """One request of a batch: its limits, decided as `method` would decide them.

    omit_receipts: an allowed CONSUME or RESERVE entry answers without receipts (for callers
    that never settle; it spares the server the signing and the reply the bytes)."""

    limits: Sequence[Limit]
    method: Method = Method.CONSUME
    omit_receipts: bool = False


@dataclass(frozen=True)
class Settlement:
    """What one receipt's take really used (`used` = 0 cancels a reservation)."""

    receipt: bytes
    used: float


@dataclass(frozen=True)
class SettleResult:
    """The outcome of one settlement."""

    name: str
    key: str
    returned: float
    charged: float
    uncharged: float
    value: float
    paid_at: Optional[datetime] = None
    paid_after: Optional[timedelta] = None


@dataclass(frozen=True)
class EnvoyPathEntry:
    """One level of an Envoy rule's descriptor path (Reset or override of source ENVOY)."""

    key: str
    value: str = ""


@dataclass(frozen=True)
class OverrideTarget:
    """What an override applies to: a limit `name` and exactly one of `key` (one key, matched
    exactly) or `key_pattern` (the keys matching it: `*` matches any run of bytes).

    source: LIMITS_FILE (the default) or ENVOY, whose `name` is the domain and `envoy_path` the
    rule's descriptor path (one EnvoyPathEntry per level, values empty)."""

    name: str
    key: str = ""
    key_pattern: str = ""
    source: LimitSource = LimitSource.LIMITS_FILE
    envoy_path: Tuple[EnvoyPathEntry, ...] = ()


@dataclass(frozen=True)
class OverrideLimit:
    """The new limit of an override: a field left None keeps the configured value."""

    rate: Optional[float] = None
    period: Optional[timedelta] = None
    capacity: Optional[float] = None
    max_reserved: Optional[float] = None


@dataclass(frozen=True)
class Override:
    """A stored override: its target and exactly one effect, `limit` (set when the override
    adjusts the limit), `unlimited` (every request allowed, nothing taken) or `blocked` (every
    request denied with DenyReason.BLOCKED).

    expires_at: when it ends by itself (None: never). set_by is the caller's actor and the
    credential that authorised it ("alice (token)"), set_at when. expired: it has ended but was
    not deleted; inert: its limit is no longer in the limits file, so it changes no decision."""

    target: OverrideTarget
    limit: Optional[OverrideLimit] = None
    unlimited: bool = False
    blocked: bool = False
    expires_at: Optional[datetime] = None
    reason: str = ""
    set_by: str = ""
    set_at: Optional[datetime] = None
    expired: bool = False
    inert: bool = False


@dataclass(frozen=True)
class SetOverrideResult:
    """The answer to set_override: the override as stored, and the one it replaced (None when
    the target had none)."""

    override: Override
    replaced: Optional[Override] = None


@dataclass(frozen=True)
class OverridePage:
    """One page of list_overrides, in (name, target) order. next_page_token is the page_token of
    the next page, empty after the last."""

    overrides: Tuple[Override, ...]
    next_page_token: str = ""


@dataclass(frozen=True)
class OverrideAuditEntry:
    """One change of the overrides. action is "set" or "delete"; authorized_by the credential
    that authorised it ("token" or "identity <SAN>"); actor what the caller said it was, peer its
    address. before is None for a new override, after None for a deletion."""

    sequence: int
    at: Optional[datetime]
    action: str
    authorized_by: str = ""
    actor: str = ""
    peer: str = ""
    reason: str = ""
    before: Optional[Override] = None
    after: Optional[Override] = None


@dataclass(frozen=True)
class OverrideAuditPage:
    """One page of list_override_audit, newest first; next_page_token as in OverridePage."""

    entries: Tuple[OverrideAuditEntry, ...]
    next_page_token: str = ""


@dataclass(frozen=True)
class TlsOptions:
    """TLS towards the server. Files are read when the client is created.

    ca_file: PEM bundle verifying the server (None: gRPC's default roots). cert_file/key_file:
    the client certificate for mTLS, both or neither. server_name: the name the server's
    certificate must carry when it differs from the target's host."""

    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None


class LeaseState(enum.IntEnum):
    """Whether a lease is held (ratelimit.v1.LeaseState): the answer to release and extend."""

    UNSPECIFIED = 0
    HELD = 1
    """Held: extend pushed its expiry."""
    RELEASED = 2
    """Released by this call."""
    NOT_HELD = 3
    """Not held: released before, expired, reset, or never acquired. Nothing was changed."""


@dataclass(frozen=True)
class LeaseInfo:
    """A lease on `count` slots of the concurrency limit (name, key), as the server describes
    it. expires_at: when it ends by itself unless extended (aware UTC). holder: what the
    acquirer said about itself."""

    id: str
    name: str
    key: str
    source: LimitSource = LimitSource.LIMITS_FILE
    count: int = 1
    acquired_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    holder: str = ""


@dataclass(frozen=True)
class AcquireResult:
    """The answer to acquire. A denial is a value (allowed False, retry_after), not an
    exception. lease: set when allowed. results: one per requested limit, in request order (the
    concurrency limit's value is its free slots, capacity its slots). retry_at / retry_after /
    reason / denied_by as in Decision. replayed: the answer to a retry of an earlier acquire with
    the same request_id (its lease; nothing was taken for this call)."""

    allowed: bool
    lease: Optional[LeaseInfo] = None
    results: Tuple[LimitResult, ...] = field(default_factory=tuple)
    retry_at: Optional[datetime] = None
    retry_after: Optional[timedelta] = None
    reason: DenyReason = DenyReason.UNSPECIFIED
    denied_by: Optional[int] = None
    replayed: bool = False

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True)
class ReleaseResult:
    """The answer to release: RELEASED or NOT_HELD, and the slots held on the key after it."""

    state: LeaseState
    held: int = 0


@dataclass(frozen=True)
class ExtendResult:
    """The answer to extend: HELD (lease carries the new expiry) or NOT_HELD (the holder has
    lost its slots and should stop)."""

    state: LeaseState
    lease: Optional[LeaseInfo] = None


@dataclass(frozen=True)
class LeaseList:
    """The answer to list_leases: a page of the leases held now, soonest expiry first; the slots
    held and the limit's capacity (the whole key's); next_page_token, when more leases follow,
    the page_token of the next page."""

    leases: Tuple[LeaseInfo, ...]
    held: int = 0
    capacity: int = 0
    next_page_token: str = ""
