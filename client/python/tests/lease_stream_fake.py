"""Fakes of LeaseStream, in-process gRPC servers on port 0.

FakeLeaseStream is the fake of the lease calls (lease_fake.FakeLeases) that also serves
LeaseStream: each op is decided by the fake's own Acquire, Release or Extend (an abort of those
becomes the op's code and message). Its knobs:
  answer_after  results are held until this many ops have arrived (across messages), then sent
                together in one message, in the reverse of the order the ops came (default 1:
                each message's ops answered at once, reversed);
  end_stream    (code, details): the next message ends its stream with that status, its ops
                unanswered (then it is cleared, so the next stream works);
  silent        ops are decided but not answered; once it is cleared, the held results go out
                with the next message's (late results);
  hold_kinds    ops of these kinds ("extend"...) are decided and never answered;
  linger        a stream the client half-closes stays open until the client cancels it (or
                stop()), as a server with answers still to send would.
It records the streams opened, each message's op count and each op's (kind, id) in arrival
order (`ops`); wait_ops(kind, n) waits (on a condition, no polling) until n ops of `kind` came.

OldServer serves the fake's unary lease calls only, as a server without LeaseStream: gRPC
answers LeaseStream UNIMPLEMENTED ("Method not found!"). A server interceptor counts the calls it
receives by method name, LeaseStream included (`calls`)."""
from __future__ import annotations

import threading
from concurrent import futures
from typing import Dict, List, Optional, Set, Tuple

import grpc

from lease_fake import FakeLeases
from ratelimit_client._pb import ratelimit_pb2 as pb


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code = code
        self.details = details


class _OpContext:
    """What the fake's unary handlers use of a context, for deciding an op."""

    def abort(self, code, details):
        raise _Abort(code, details)

    def time_remaining(self):
        return None

    def add_callback(self, callback):
        return False

    def invocation_metadata(self):
        return ()


class FakeLeaseStream(FakeLeases):
    def __init__(self, capacity: int = 1):
        self.answer_after = 1
        self.end_stream: Optional[Tuple[grpc.StatusCode, str]] = None
        self.silent = False
        self.hold_kinds: Set[str] = set()
        self.linger = False
        self.streams = 0
        self.messages: List[int] = []
        self.ops: List[Tuple[str, int]] = []
        self.answered: List[int] = []  # op ids in the order their results were sent
        self.cond = threading.Condition()
        super().__init__(capacity)

    def wait_ops(self, kind: str, n: int, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(
                lambda: sum(1 for k, _ in self.ops if k == kind) >= n, timeout)

    def count(self, kind: str) -> int:
        with self.cond:
            return sum(1 for k, _ in self.ops if k == kind)

    def _decide(self, op) -> pb.LeaseOpResult:
        kind = op.WhichOneof("op")
        handler = {"acquire": self.Acquire, "release": self.Release,
                   "extend": self.Extend}.get(kind)
        if handler is None:
            return pb.LeaseOpResult(id=op.id, code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                                    message="op: one of acquire, release, extend is required")
        try:
            response = handler(getattr(op, kind), _OpContext())
        except _Abort as e:
            return pb.LeaseOpResult(id=op.id, code=e.code.value[0], message=e.details)
        result = pb.LeaseOpResult(id=op.id)
        getattr(result, kind).CopyFrom(response)
        return result

    def LeaseStream(self, request_iterator, context):
        with self.cond:
            self.streams += 1
        held: List[pb.LeaseOpResult] = []
        for request in request_iterator:
            with self.cond:
                self.messages.append(len(request.ops))
                end, self.end_stream = self.end_stream, None
                if end is None:
                    self.ops.extend((op.WhichOneof("op"), op.id) for op in request.ops)
                self.cond.notify_all()
            if end is not None:
                context.abort(end[0], end[1])
            decided = [self._decide(op) for op in request.ops]
            held.extend(r for op, r in zip(request.ops, decided)
                        if op.WhichOneof("op") not in self.hold_kinds)
            with self.cond:
                if self.silent or len(held) < self.answer_after:
                    continue
                results, held = held[::-1], []
                self.answered.extend(r.id for r in results)
            yield pb.LeaseStreamResponse(results=results)
        if self.linger:
            cancelled = threading.Event()
            if context.add_callback(cancelled.set):
                cancelled.wait()


class OldServer:
    """The unary lease calls of `fake` (a FakeLeases), served without LeaseStream."""

    def __init__(self, fake: FakeLeases):
        self.calls: Dict[str, int] = {}
        self._lock = threading.Lock()
        handlers = {
            "Acquire": grpc.unary_unary_rpc_method_handler(
                fake.Acquire, pb.AcquireRequest.FromString,
                pb.AcquireResponse.SerializeToString),
            "Release": grpc.unary_unary_rpc_method_handler(
                fake.Release, pb.ReleaseRequest.FromString,
                pb.ReleaseResponse.SerializeToString),
            "Extend": grpc.unary_unary_rpc_method_handler(
                fake.Extend, pb.ExtendRequest.FromString, pb.ExtendResponse.SerializeToString),
        }
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                                   interceptors=[_Counter(self)])
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "ratelimit.v1.RateLimitService", handlers),))
        self.target = "127.0.0.1:%d" % self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def count(self, method: str) -> int:
        with self._lock:
            return self.calls.get(method, 0)

    def stop(self) -> None:
        self._server.stop(None).wait()


class _Counter(grpc.ServerInterceptor):
    def __init__(self, server: OldServer):
        self._server = server

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method.rsplit("/", 1)[-1]
        with self._server._lock:
            self._server.calls[method] = self._server.calls.get(method, 0) + 1
        return continuation(handler_call_details)
