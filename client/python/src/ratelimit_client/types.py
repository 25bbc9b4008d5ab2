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


class DenyReason(enum.IntEnum):
    """Why a limit denied (ratelimit.v1.DenyReason); UNSPECIFIED when it allows."""

    UNSPECIFIED = 0
    INSUFFICIENT_TOKENS = 1
    COUNT_EXCEEDS_CAPACITY = 2
    MAX_RESERVED_EXCEEDED = 3


class LimitSource(enum.IntEnum):
    """The namespace a Reset applies to (ratelimit.v1.LimitSource)."""

    LIMITS_FILE = 0
    INLINE = 1
    ENVOY = 2


@dataclass(frozen=True)
class LimitConfig:
    """An inline limit definition, for a name the server's limits file does not define.

    None leaves a field to the server's default: capacity = rate, max_reserved unbounded,
    start derived from the key (fixed windows)."""

    kind: Kind
    rate: float
    period: timedelta
    capacity: Optional[float] = None
    max_reserved: Optional[float] = None
    start: Optional[timedelta] = None
    jitter: float = 0.0


@dataclass(frozen=True)
class Limit:
    """One limit of a request: `count` tokens (server default 1 when None) of (name, key)."""

    name: str
    key: str
    count: Optional[float] = None
    config: Optional[LimitConfig] = None


@dataclass(frozen=True)
class LimitResult:
    """The verdict on one limit. retry_at is a timezone-aware UTC datetime (None when unset)."""

    name: str
    key: str
    allowed: bool
    value: float
    capacity: float
    retry_at: Optional[datetime] = None
    retry_after: Optional[timedelta] = None
    reason: DenyReason = DenyReason.UNSPECIFIED
    receipt: bytes = b""


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
    """One level of an Envoy rule's descriptor path (Reset of source ENVOY)."""

    key: str
    value: str = ""


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
