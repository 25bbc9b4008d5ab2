"""Exceptions: every failed call raises a RateLimitError carrying the gRPC status code, the
server's message and, when the server refused a field of the request, the field it named."""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional, Type

import grpc

from ._pb import ratelimit_pb2 as _pb
from .types import AcquireResult, Decision

# The server's messages name the field first: "limits[0].key: must not be empty".
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?)*): ")

# The codes the server answers a bad field of the request with.
_FIELD_CODES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                          grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
                          grpc.StatusCode.PERMISSION_DENIED})

# The fields of each method's request (Consume: RateLimitRequest's), by method name: a field
# path the server names starts with one of them.
_REQUEST_FIELDS: Dict[str, FrozenSet[str]] = {
    method.name: frozenset(method.input_type.fields_by_name)
    for service in _pb.DESCRIPTOR.services_by_name.values() for method in service.methods}


def field_of(method: str, code: grpc.StatusCode, details: str) -> Optional[str]:
    """The request field a status of `method` names, as the server writes it at the start of
    its message ("limits[0].key: must not be empty"); None when it names none. gRPC's own
    messages (and a proxy's) can start the same way ("grpc: error while marshaling: ..."), but
    with other codes, or with a word that is no field of the method's request."""
    if code not in _FIELD_CODES:
        return None
    m = _FIELD.match(details or "")
    if m is None:
        return None
    first = re.split(r"[.\[]", m.group(1), 1)[0]
    return m.group(1) if first in _REQUEST_FIELDS.get(method, ()) else None


class RateLimitError(Exception):
    """A call failed. `code` is the grpc.StatusCode, `details` the server's message, `method`
    the RPC (e.g. "Consume"), `field` the field of its request the server refused (None when
    it names none; see field_of)."""

    def __init__(self, code: grpc.StatusCode, details: str, method: str = ""):
        self.code = code
        self.details = details
        self.method = method
        self.field: Optional[str] = field_of(method, code, details)
        prefix = (method + ": ") if method else ""
        super().__init__("%s%s: %s" % (prefix, code.name, details))


class InvalidArgumentError(RateLimitError, ValueError):
    """INVALID_ARGUMENT: the request broke a bound; `field` names it. Nothing was changed."""


class AlreadyExistsError(RateLimitError):
    """ALREADY_EXISTS: e.g. a receipt that was already settled (nothing was settled)."""


class NotFoundError(RateLimitError, LookupError):
    """NOT_FOUND: a limit name the server does not define, without an inline config; or, for
    get_override and delete_override, a target that has no override."""


class FailedPreconditionError(RateLimitError):
    """FAILED_PRECONDITION: e.g. an override call to a server whose store keeps no overrides."""


class PermissionDeniedError(RateLimitError, PermissionError):
    """PERMISSION_DENIED: a wrong admin token, a Reset or override call on a server whose
    administrative calls are disabled (started without an admin credential: "Reset is disabled
    ..."), or inline configs refused by the server."""


class UnauthenticatedError(RateLimitError, PermissionError):
    """UNAUTHENTICATED: Reset or an override call without an admin credential on a server that
    has one."""


class UnavailableError(RateLimitError, ConnectionError):
    """UNAVAILABLE: the server cannot be reached, or its store failed (failure policy closed)."""


class DeadlineExceededError(RateLimitError, TimeoutError):
    """DEADLINE_EXCEEDED: no answer within the call's timeout."""


class ResourceExhaustedError(RateLimitError):
    """RESOURCE_EXHAUSTED: e.g. a request over the server's 64 KiB message limit."""


class UnimplementedError(RateLimitError, NotImplementedError):
    """UNIMPLEMENTED: the server does not serve this RPC."""


class ReservationCancelled(Exception):
    """reserve_and_wait (sync) was cancelled through its `cancel` event before retry_at; the
    reservation was settled with used=0 when `settled` is True. `reserved` is False when the
    event was set before the call: nothing was sent."""

    def __init__(self, settled: bool, settle_error: Optional[BaseException] = None, *,
                 reserved: bool = True):
        self.settled = settled
        self.settle_error = settle_error
        self.reserved = reserved
        if not reserved:
            super().__init__("cancelled before reserving; nothing was reserved")
            return
        if settled:
            outcome = "its tokens were given back"
        elif settle_error is None:
            outcome = "the server sent no receipt to give its tokens back with"
        else:
            outcome = "its tokens could not be given back: %s" % settle_error
        super().__init__("reservation cancelled before its retry_at; " + outcome)


class ReservationTimeout(TimeoutError):
    """reserve_and_wait could not return within its `timeout`: the reservation's work may only
    run after that (`decision.retry_at`). The reservation was given back at once (settled with
    used=0) when `settled` is True; `settle_error` is why it was not, when it was not."""

    def __init__(self, decision: Decision, settled: bool,
                 settle_error: Optional[BaseException] = None):
        self.decision = decision
        self.settled = settled
        self.settle_error = settle_error
        if settled:
            outcome = "its tokens were given back"
        elif settle_error is None:
            outcome = "the server sent no receipt to give its tokens back with"
        else:
            outcome = "its tokens could not be given back: %s" % settle_error
        super().__init__("the reservation's work may only run at %s, after the timeout; %s"
                         % (decision.retry_at, outcome))


_BY_CODE: Dict[grpc.StatusCode, Type[RateLimitError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}

def from_status(code: int, details: str, method: str = "") -> RateLimitError:
    """The RateLimitError for a status given as its numeric code (a batch entry's error)."""
    status = next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(status, RateLimitError)(status, details, method)


# Codes under which the service counts as unreachable: the only ones a middleware's failure
# mode applies to (every other code is a configuration or programming error).
UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

# A call that failed with one of these may still have been decided by the server (its answer was
# lost): a Reserve's reservation may exist.
OUTCOME_UNKNOWN_CODES = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                                   grpc.StatusCode.UNAVAILABLE})


def from_rpc_error(error: grpc.RpcError, method: str = "") -> RateLimitError:
    """The RateLimitError (subclass by code) for a grpc.RpcError / grpc.aio.AioRpcError."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, RateLimitError)
    return cls(code, details or "", method)


def client_closed(method: str = "") -> RateLimitError:
    """The error of a call on a closed client: CANCELLED, the code gRPC ends the calls in flight
    with when the channel closes."""
    return RateLimitError(grpc.StatusCode.CANCELLED, "the client is closed", method)


class LeaseDenied(Exception):
    """lease() could not acquire: no free slot (or a rate limit of the same acquire denied)
    within its `wait`. `result` is the last AcquireResult; retry_after / retry_at / reason are
    its (retry_after is None when no retry can succeed, e.g. a count over the capacity)."""

    def __init__(self, result: AcquireResult):
        self.result = result
        self.retry_after = result.retry_after
        self.retry_at = result.retry_at
        self.reason = result.reason
        when = ("no retry can succeed" if result.retry_after is None
                else "retry after %.3f s" % result.retry_after.total_seconds())
        super().__init__("acquire denied (%s): %s" % (result.reason.name, when))


class LeaseLost(Exception):
    """A held lease was lost: an extend answered NOT_HELD (it expired, was reset or released
    elsewhere), every extend failed until it would have expired, it expired before the next
    extend, or the client was closed. Raised by Lease.raise_if_lost(); `reason` says which."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__("lease lost: " + reason)
