"""Python client of the ratelimit service (ratelimit.v1.RateLimitService).

    from ratelimit_client import RateLimitClient
    with RateLimitClient("127.0.0.1:8081") as client:
        if not client.consume("api", "user-1"):
            ...

Concurrency limits: `with client.lease("jobs", tenant) as lease:` holds slots (extended in
the background, released on exit); acquire, release, extend and list_leases are the calls.
The same clients administer overrides (set_override, get_override, delete_override,
list_overrides, list_override_audit) with the admin token. AsyncRateLimitClient is the asyncio
twin; ratelimit_client.asgi has the ASGI middleware,
ratelimit_client.fastapi the FastAPI dependency.
"""
from ._common import ADMIN_TOKEN_ENV, DEFAULT_CHECK_RETRIES, DEFAULT_TIMEOUT, BatchResult
from .aio import AsyncRateLimitClient
from .client import RateLimitClient
from .clock import Clock
from .errors import (AlreadyExistsError, DeadlineExceededError, FailedPreconditionError,
                     InvalidArgumentError, LeaseDenied, LeaseLost, NotFoundError, PermissionDeniedError, RateLimitError, ReservationCancelled,
                     ReservationTimeout, ResourceExhaustedError, UnauthenticatedError,
                     UnavailableError, UnimplementedError)
from .leases import HEARTBEAT_FRACTION, AsyncLease, Lease
from .types import (AcquireResult, BatchEntry, ExtendResult, LeaseInfo, LeaseList, LeaseState,
                    ReleaseResult, Decision, DenyReason, EnvoyPathEntry, Kind, Limit, LimitConfig,
                    LimitResult, LimitSource, Method, Override, OverrideAuditEntry,
                    OverrideAuditPage, OverrideLimit, OverridePage, OverrideTarget,
                    SetOverrideResult, SettleResult, Settlement, TlsOptions)

__all__ = [
    "ADMIN_TOKEN_ENV", "DEFAULT_CHECK_RETRIES", "DEFAULT_TIMEOUT", "AsyncRateLimitClient",
    "RateLimitClient", "Clock", "AlreadyExistsError", "DeadlineExceededError",
    "InvalidArgumentError", "NotFoundError", "PermissionDeniedError", "RateLimitError",
    "ReservationCancelled", "ReservationTimeout", "ResourceExhaustedError",
    "UnauthenticatedError", "UnavailableError", "UnimplementedError", "Decision", "DenyReason",
    "EnvoyPathEntry", "Kind", "Limit", "LimitConfig", "LimitResult", "LimitSource",
    "SettleResult", "Settlement", "TlsOptions", "BatchEntry", "BatchResult", "Method",
    "FailedPreconditionError", "Override", "OverrideAuditEntry", "OverrideAuditPage",
    "OverrideLimit", "OverridePage", "OverrideTarget", "SetOverrideResult",
    "AcquireResult", "AsyncLease", "ExtendResult", "HEARTBEAT_FRACTION", "Lease", "LeaseDenied",
    "LeaseInfo", "LeaseList", "LeaseLost", "LeaseState", "ReleaseResult",
]
