"""The lease stream of the asyncio client (AsyncRateLimitClient(lease_stream=True)): the blocking
client's lease stream (_lease_stream.py) with asyncio primitives. One LeaseStream per client,
opened at the first op and shared by every task; a writer task sends the queued ops (those
queued while the previous message was being written go out together, at most 1000 ops and
64 KiB a message) and a reader task hands each result to the future of its op's id. Each op
waits for its result within its call's timeout; a late result is discarded.

When the stream ends, every op waiting on it raises what the unary call raises for UNAVAILABLE,
with the stream's message, and the next op opens a new stream. UNIMPLEMENTED (a server without
LeaseStream) turns the client to unary calls for its life, logged once; the ops that found it
out are sent again as unary calls."""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Dict, Optional, Set, Tuple

import grpc
import grpc.aio

from ._lease_ops import (FALLBACK, UNIMPLEMENTED_CODE, Ended, Queued, answer, deadline_error,
                         ended_details, fits_alone, log_fallback, make_op, take_batch)
from ._pb import ratelimit_pb2 as pb
from .errors import client_closed


class _Session:
    """One LeaseStream call: its ops waiting for a result (by id), the ops not written yet,
    the event that wakes its writer, and whether it has ended."""

    def __init__(self) -> None:
        self.pending: Dict[int, "asyncio.Future[Any]"] = {}
        self.queue: Deque[Queued] = deque()
        self.wake = asyncio.Event()
        self.ended = False
        self.answered = False  # a result came: the server serves LeaseStream
        self.call: Any = None


class AsyncLeaseStream:
    """The lease stream of one AsyncRateLimitClient, used from its event loop only."""

    def __init__(self, stub: Any):
        self._stub = stub
        self._session: Optional[_Session] = None
        self._tasks: Set["asyncio.Task[None]"] = set()
        self._next_id = 0
        self._closed = False
        self.unary = False
        """True once the server answered UNIMPLEMENTED: every op is a unary call since."""
        self.opened = 0
        """How many streams were opened."""

    async def call(self, method: str, request: Any, timeout: float,
                   unary: Callable[[float], Awaitable[Any]]) -> Any:
        """Sends `request` (of `method`: "Acquire", "Release" or "Extend") as an op and returns
        its response (the unary call's response message), or raises what the unary call raises.
        When the client sends unary calls (or the op is too large for a stream message),
        returns `unary(timeout)` instead."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        entry = self._submit(method, request)
        if entry is None:
            return await unary(timeout)
        session, op_id, future = entry
        try:
            await asyncio.wait({future}, timeout=timeout)
        finally:  # timed out, or the task was cancelled: nobody waits for it now
            if not future.done():
                self._abandon(session, op_id, future)
        if future.cancelled():
            raise deadline_error(method)
        value = future.result()
        if value is FALLBACK:
            # The server has no LeaseStream: this op goes again as a unary call, within what
            # is left of its deadline.
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise deadline_error(method)
            return await unary(remaining)
        if isinstance(value, Ended):
            raise value.error(method)
        return answer(value, method)

    def _submit(self, method: str,
                request: Any) -> Optional[Tuple[_Session, int, "asyncio.Future[Any]"]]:
        if self._closed:
            raise client_closed(method)
        if self.unary:
            return None
        self._next_id += 1
        op_id = self._next_id
        op, size = make_op(op_id, method, request)
        if not fits_alone(size):
            return None
        session = self._session if self._session is not None else self._open()
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        session.pending[op_id] = future
        session.queue.append(Queued(op, size, lambda: not future.done()))
        session.wake.set()
        return session, op_id, future

    def _open(self) -> _Session:
        session = _Session()
        session.call = self._stub.LeaseStream()
        for work in (self._read(session), self._write(session)):
            task = asyncio.ensure_future(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._session = session
        self.opened += 1
        return session

    async def _write(self, session: _Session) -> None:
        """The writer task: writes the queued ops, those queued while a message was being
        written together in the next one, until the stream or the client ends."""
        try:
            while True:
                await session.wake.wait()
                session.wake.clear()
                while not session.ended and not self._closed:
                    ops = take_batch(session.queue)
                    if not ops:
                        break
                    await session.call.write(pb.LeaseStreamRequest(ops=ops))
                if session.ended or self._closed:
                    return
        except asyncio.CancelledError:
            session.call.cancel()
            raise
        except Exception:  # the stream has ended (the reader reports how), or cannot go on
            session.call.cancel()

    async def _read(self, session: _Session) -> None:
        """The reader task: hands each result to its op's future, until the stream ends."""
        call = session.call
        code: Optional[grpc.StatusCode] = grpc.StatusCode.OK
        details = ""
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    code, details = await call.code(), await call.details()
                    break
                session.answered = True
                for result in response.results:
                    future = session.pending.pop(result.id, None)
                    if future is not None and not future.done():  # else discarded
                        future.set_result(result)
        except grpc.aio.AioRpcError as e:
            code, details = e.code(), e.details() or ""
        except asyncio.CancelledError:  # the call was cancelled (close), or this task
            code, details = grpc.StatusCode.CANCELLED, "the lease stream was cancelled"
        except Exception as e:  # not gRPC's: the stream is gone all the same
            code, details = grpc.StatusCode.UNKNOWN, str(e)
        self._end(session, code, details)

    def _end(self, session: _Session, code: Optional[grpc.StatusCode], details: str) -> None:
        session.ended = True
        session.wake.set()
        if self._session is session:
            self._session = None
        waiting = list(session.pending.values())
        session.pending.clear()
        session.queue.clear()
        fallback = code == UNIMPLEMENTED_CODE and not session.answered and not self._closed
        if fallback and not self.unary:
            self.unary = True
            log_fallback(details or "")
        outcome = FALLBACK if fallback else Ended(ended_details(code, details), self._closed)
        for future in waiting:
            if not future.done():
                future.set_result(outcome)

    @staticmethod
    def _abandon(session: _Session, op_id: int, future: "asyncio.Future[Any]") -> None:
        """Drops an op nobody waits for: not written if still queued, its result discarded."""
        session.pending.pop(op_id, None)
        future.cancel()

    async def close(self) -> None:
        """Ends the stream (its waiting ops raise CANCELLED "the client is closed") and waits
        for its tasks; later ops raise the same."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            session.call.cancel()
            session.wake.set()
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
