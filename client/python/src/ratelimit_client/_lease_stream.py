"""The lease stream of the blocking client (RateLimitClient(lease_stream=True)): its acquire,
release and extend calls are sent as ops on one LeaseStream, opened at the first op and shared
by every thread.

Each op gets the next id of the client's counter, goes into the stream's queue and waits for its
result on a future. gRPC's request thread takes the queue through the stream's request iterator:
the ops queued while the previous message was being sent go out together in the next one (at
most 1000 ops, at most 64 KiB). A reader thread takes the results, in whatever order they come,
and hands each to the future of its op's id. An op that times out is dropped from the stream's
bookkeeping (not sent, if it was still queued) and its late result discarded.

When the stream ends, every op waiting on it raises what the unary call raises for UNAVAILABLE,
with the stream's message, and the next op opens a new stream. A stream the server answers with
UNIMPLEMENTED (a server without LeaseStream) turns the client to unary calls for its life: the
ops that found it out are sent again as unary calls, and this is logged once."""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from concurrent import futures
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple, TypeVar

import grpc

from ._lease_ops import (FALLBACK, UNIMPLEMENTED_CODE, Ended, Pending, Queued, answer,
                         deadline_error, ended_details, fits_alone, log_fallback, make_op,
                         take_batch)
from ._pb import ratelimit_pb2 as pb
from .errors import client_closed

T = TypeVar("T")


class _Session:
    """One LeaseStream call: its ops waiting for a result (by id), the ops not sent yet, and
    whether it has ended."""

    def __init__(self) -> None:
        self.pending: Dict[int, "futures.Future[Any]"] = {}
        self.queue: Deque[Queued] = deque()
        self.ended = False
        self.answered = False  # a result came: the server serves LeaseStream
        self.call: Any = None
        self.reader: Optional[threading.Thread] = None


def _settle(future: "futures.Future[Any]", value: Any) -> None:
    try:
        future.set_result(value)
    except futures.InvalidStateError:  # abandoned (timed out, cancelled) meanwhile
        pass


class LeaseStream:
    """The lease stream of one RateLimitClient. Thread safety: thread-safe."""

    def __init__(self, stub: Any):
        self._stub = stub
        self._cond = threading.Condition()
        self._session: Optional[_Session] = None
        self._readers: List[threading.Thread] = []
        self._ids = itertools.count(1)  # the client's op ids
        self._closed = False
        self.unary = False
        """True once the server answered UNIMPLEMENTED: every op is a unary call since."""
        self.opened = 0
        """How many streams were opened."""

    def start(self, method: str, request: Any, timeout: float,
              unary: Callable[[float], Pending[T]], convert: Callable[[Any], T]) -> Pending[T]:
        """Sends `request` (of `method`: "Acquire", "Release" or "Extend") as an op, or, when
        the client sends unary calls (or the op is too large for a stream message), starts
        `unary(timeout)`. `convert` turns the op's response into the call's answer."""
        deadline = time.monotonic() + timeout
        entry = self._submit(method, request)
        if entry is None:
            return unary(timeout)
        return _StreamCall(self, method, entry, deadline, unary, convert)

    def _submit(self, method: str,
                request: Any) -> Optional[Tuple[_Session, int, "futures.Future[Any]"]]:
        if self._closed:
            raise client_closed(method)
        if self.unary:
            return None
        op_id = next(self._ids)  # itertools.count: atomic
        op, size = make_op(op_id, method, request)  # serialized outside the lock
        if not fits_alone(size):
            return None
        with self._cond:
            if self._closed:
                raise client_closed(method)
            if self.unary:
                return None
            session = self._session if self._session is not None else self._open()
            future: "futures.Future[Any]" = futures.Future()
            session.pending[op_id] = future
            session.queue.append(Queued(op, size, lambda: not future.done()))
            self._cond.notify_all()
            return session, op_id, future

    def _open(self) -> _Session:
        """Opens a stream (with the lock held)."""
        session = _Session()
        session.call = self._stub.LeaseStream(self._requests(session))
        session.reader = threading.Thread(target=self._read, args=(session,),
                                          name="ratelimit-lease-stream", daemon=True)
        self._readers = [t for t in self._readers if t.is_alive()]
        self._readers.append(session.reader)
        session.reader.start()
        self._session = session
        self.opened += 1
        return session

    def _requests(self, session: _Session) -> Iterator[pb.LeaseStreamRequest]:
        """The stream's request iterator, which gRPC's request thread runs: each message takes
        the ops queued since the previous one was sent. It ends with the stream or the
        client."""
        while True:
            with self._cond:
                while not session.queue and not session.ended and not self._closed:
                    self._cond.wait()
                if session.ended or self._closed:
                    return
                ops = take_batch(session.queue)
            if ops:
                yield pb.LeaseStreamRequest(ops=ops)

    def _read(self, session: _Session) -> None:
        """The reader thread: hands each result to its op's future, until the stream ends."""
        code: Optional[grpc.StatusCode] = grpc.StatusCode.OK
        details = ""
        try:
            for response in session.call:
                with self._cond:
                    session.answered = True
                    for result in response.results:
                        future = session.pending.pop(result.id, None)
                        if future is not None:  # else its op timed out: discarded
                            _settle(future, result)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
            details = (e.details() if hasattr(e, "details") else str(e)) or ""
        except Exception as e:  # not gRPC's: the stream is gone all the same
            code, details = grpc.StatusCode.UNKNOWN, str(e)
        self._end(session, code, details)

    def _end(self, session: _Session, code: Optional[grpc.StatusCode], details: str) -> None:
        """The stream ended: its waiting ops fail (or go unary, after UNIMPLEMENTED), and the
        next op opens another."""
        with self._cond:
            session.ended = True
            if self._session is session:
                self._session = None
            waiting = list(session.pending.values())
            session.pending.clear()
            session.queue.clear()
            closed = self._closed
            fallback = code == UNIMPLEMENTED_CODE and not session.answered and not closed
            first = fallback and not self.unary
            if fallback:
                self.unary = True
            self._cond.notify_all()
        if first:
            log_fallback(details)
        outcome = FALLBACK if fallback else Ended(ended_details(code, details), closed)
        for future in waiting:
            _settle(future, outcome)

    def _abandon(self, session: _Session, op_id: int, future: "futures.Future[Any]") -> bool:
        """Drops an op its caller no longer waits for (timed out, cancelled): it is not sent if
        still queued, and its result is discarded. False when its outcome came first."""
        with self._cond:
            if session.pending.pop(op_id, None) is None:
                return False
            future.cancel()
            return True

    def close(self) -> None:
        """Ends the stream (its waiting ops raise CANCELLED "the client is closed") and waits
        for its reader thread; later ops raise the same."""
        with self._cond:
            self._closed = True
            session, self._session = self._session, None
            readers, self._readers = self._readers, []
            self._cond.notify_all()
        if session is not None:
            session.call.cancel()
        for reader in readers:
            if reader is not threading.current_thread():
                reader.join()


class _StreamCall(Pending[T]):
    """An op sent on the stream: result() waits for it until the call's deadline."""

    def __init__(self, stream: LeaseStream, method: str,
                 entry: Tuple[_Session, int, "futures.Future[Any]"], deadline: float,
                 unary: Callable[[float], Pending[T]], convert: Callable[[Any], T]):
        self._stream = stream
        self._method = method
        self._entry = entry
        self._deadline = deadline
        self._unary = unary
        self._convert = convert
        self._lock = threading.Lock()
        self._cancelled = False
        self._fallback: Optional[Pending[T]] = None

    def result(self) -> T:
        value = self._wait()
        if value is not FALLBACK:
            return self._convert(answer(value, self._method))
        # The server has no LeaseStream: this op goes again as a unary call, within what is
        # left of its deadline.
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise deadline_error(self._method)
        with self._lock:
            if self._cancelled:
                raise grpc.FutureCancelledError()
            self._fallback = call = self._unary(remaining)
        return call.result()

    def _wait(self) -> Any:
        session, op_id, future = self._entry
        try:
            value = future.result(max(0.0, self._deadline - time.monotonic()))
        except futures.TimeoutError:
            if self._stream._abandon(session, op_id, future):
                raise deadline_error(self._method) from None
            value = self._outcome(future)  # its outcome came as the deadline passed
        except futures.CancelledError:
            raise grpc.FutureCancelledError() from None
        except BaseException:  # interrupted (KeyboardInterrupt): nobody waits for it now
            self._stream._abandon(session, op_id, future)
            raise
        if isinstance(value, Ended):
            raise value.error(self._method)
        return value

    @staticmethod
    def _outcome(future: "futures.Future[Any]") -> Any:
        try:
            return future.result()
        except futures.CancelledError:
            raise grpc.FutureCancelledError() from None

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            fallback = self._fallback
        if fallback is not None:
            fallback.cancel()
        self._stream._abandon(*self._entry)
