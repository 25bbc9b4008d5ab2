"""What the sync and asyncio lease streams share (`lease_stream=True`, docs/leases.md "Lease
streams"): the ops of Acquire, Release and Extend, how queued ops are packed into one
LeaseStreamRequest, and how an op's result, or the stream's end, becomes the answer or the
exception the unary call would have given."""
from __future__ import annotations

import logging
from typing import Any, Callable, Deque, List, Optional, Protocol, Tuple, TypeVar

import grpc

from ._pb import ratelimit_pb2 as pb
from .errors import RateLimitError, client_closed, from_status

_log = logging.getLogger("ratelimit_client")

MAX_OPS = 1000
"""The most ops a LeaseStreamRequest may carry."""

MAX_MESSAGE_BYTES = 64 * 1024
"""The largest message the server reads (a stream's message too); an op that does not fit in one
alone is sent as a unary call, which the server refuses exactly as it refuses that call."""

KINDS = {"Acquire": "acquire", "Release": "release", "Extend": "extend"}
"""The LeaseOp field of each method's request."""

DEADLINE_DETAILS = "Deadline Exceeded"
"""gRPC's message for a call whose deadline passed on the client."""

UNIMPLEMENTED_CODE = grpc.StatusCode.UNIMPLEMENTED

T_co = TypeVar("T_co", covariant=True)


class Pending(Protocol[T_co]):
    """A call started without waiting for its answer (a unary call's PendingCall, or an op on
    the lease stream): result() waits for it and returns the converted answer or raises the
    RateLimitError of its failure (grpc.FutureCancelledError once cancelled); cancel()
    abandons it, from any thread."""

    def result(self) -> T_co: ...

    def cancel(self) -> None: ...


class Ended:
    """The outcome of the ops a stream left unanswered when it ended: each raises what the
    unary call raises for UNAVAILABLE with the stream's message (CANCELLED "the client is
    closed" when close() ended it)."""

    __slots__ = ("details", "closed")

    def __init__(self, details: str, closed: bool):
        self.details = details
        self.closed = closed

    def error(self, method: str) -> RateLimitError:
        if self.closed:
            return client_closed(method)
        return from_status(grpc.StatusCode.UNAVAILABLE.value[0], self.details, method)


FALLBACK = object()
"""The outcome of the ops of a stream the server answered UNIMPLEMENTED (a server without
LeaseStream): each is sent again as a unary call."""


def _varint_size(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def framed_size(op: pb.LeaseOp) -> int:
    """The bytes `op` adds to a LeaseStreamRequest (its tag, length and body)."""
    n: int = op.ByteSize()
    return 1 + _varint_size(n) + n


def fits_alone(size: int) -> bool:
    """Whether an op of framed `size` fits in a message of its own."""
    return size <= MAX_MESSAGE_BYTES


class Queued:
    """An op waiting to be sent: its message, its framed size, and whether its caller still
    waits for it (one that timed out or was cancelled is not sent)."""

    __slots__ = ("op", "size", "wanted")

    def __init__(self, op: pb.LeaseOp, size: int, wanted: Callable[[], bool]):
        self.op = op
        self.size = size
        self.wanted = wanted


def take_batch(queue: "Deque[Queued]") -> List[pb.LeaseOp]:
    """Takes from the head of `queue` the ops of one message: at most MAX_OPS, at most
    MAX_MESSAGE_BYTES in all; ops no longer wanted are dropped. Every queued op fits alone
    (fits_alone), so a non-empty queue of wanted ops always gives at least one."""
    ops: List[pb.LeaseOp] = []
    size = 0
    while queue and len(ops) < MAX_OPS:
        head = queue[0]
        if not head.wanted():
            queue.popleft()
            continue
        if size + head.size > MAX_MESSAGE_BYTES:
            break
        queue.popleft()
        ops.append(head.op)
        size += head.size
    return ops


def make_op(op_id: int, method: str, request: Any) -> Tuple[pb.LeaseOp, int]:
    """The LeaseOp of `request` (an Acquire, Release or Extend request) and its framed size."""
    op = pb.LeaseOp(id=op_id)
    getattr(op, KINDS[method]).CopyFrom(request)
    return op, framed_size(op)


def answer(result: pb.LeaseOpResult, method: str) -> Any:
    """The response an op's result carries (AcquireResponse, ReleaseResponse or
    ExtendResponse, converted by the caller as the unary answer is), or raises the
    RateLimitError the unary call raises for the result's code and message."""
    if result.code != 0:
        raise from_status(result.code, result.message, method)
    return getattr(result, KINDS[method])


def deadline_error(method: str) -> RateLimitError:
    """What the unary call raises when its deadline passes without an answer."""
    return from_status(grpc.StatusCode.DEADLINE_EXCEEDED.value[0], DEADLINE_DETAILS, method)


def ended_details(code: Optional[grpc.StatusCode], details: Optional[str]) -> str:
    """The message the ops of an ended stream raise UNAVAILABLE with: the stream's own."""
    if details:
        return details
    name = code.name if code is not None else "UNKNOWN"
    return "the lease stream ended (%s)" % name


def log_fallback(details: str) -> None:
    """Logged once per client, when its server answers LeaseStream with UNIMPLEMENTED."""
    _log.warning("the server does not serve LeaseStream (UNIMPLEMENTED: %s); this client "
                 "sends acquire, release and extend as unary calls from now on", details)
