"""A fake of the lease calls (Acquire, Release, Extend, ListLeases), served by an in-process gRPC
server on port 0: a concurrency limit of `capacity` slots (the inline config's capacity when
given) per (name, key), leases of the request's TTL (default 30 s) on the real clock; an Acquire
repeating a request_id whose lease is still held answers that lease again (replayed). Setting
`extend_state` (a LeaseState number) or `extend_error` (a grpc.StatusCode) answers every Extend
with it; `extend_hang` leaves every Extend unanswered until the call ends (its deadline, or
the client cancels it) or stop(), and `release_hang` every Release (recorded, changing nothing);
`acquire_error` answers every Acquire. The calls, and each Extend's deadline as the server sees
it (`extend_deadlines`, seconds left when it arrived), are recorded for the tests to assert on."""
from __future__ import annotations

import secrets
import threading
import time
from concurrent import futures
from typing import Dict, List, Optional

import grpc

from ratelimit_client._pb import ratelimit_pb2 as pb
from ratelimit_client._pb import ratelimit_pb2_grpc as pb_grpc


def _ttl(request) -> float:
    return request.ttl.ToTimedelta().total_seconds() if request.HasField("ttl") else 30.0


def _hang(context) -> None:
    """Leaves a call unanswered until it ends (its deadline, or the client cancels it)."""
    ended = threading.Event()
    if context.add_callback(ended.set):  # stop() ends every call too
        ended.wait()
    context.abort(grpc.StatusCode.UNAVAILABLE, "no answer")


class FakeLeases(pb_grpc.RateLimitServiceServicer):
    def __init__(self, capacity: int = 1):
        self.capacity = capacity
        self.extend_state: Optional[int] = None
        self.extend_error: Optional[grpc.StatusCode] = None
        self.extend_hang = False
        self.release_hang = False
        self.acquire_error: Optional[grpc.StatusCode] = None
        self.lock = threading.Lock()
        self.leases: Dict[str, pb.Lease] = {}
        self.acquires: List[pb.AcquireRequest] = []
        self.extends: List[pb.ExtendRequest] = []
        self.extend_deadlines: List[float] = []
        self.by_request: Dict[str, str] = {}
        self.releases: List[pb.ReleaseRequest] = []
        self.list_metadata: List[tuple] = []
        self.lists: List[pb.ListLeasesRequest] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb_grpc.add_RateLimitServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.target = "127.0.0.1:%d" % self.port
        self._server.start()

    def stop(self) -> None:
        self._server.stop(None).wait()

    def expire_in(self, lease_id: str, seconds: float) -> None:
        """Moves a held lease's expiry to `seconds` from now (what is left of an older lease)."""
        with self.lock:
            self.leases[lease_id].expires_at.FromNanoseconds(int((time.time() + seconds) * 1e9))

    def _held_locked(self, name: str, key: str) -> int:
        now = time.time()
        for lease_id in [i for i, l in self.leases.items() if l.expires_at.ToNanoseconds() / 1e9 <= now]:
            del self.leases[lease_id]
        return sum(l.count for l in self.leases.values() if (l.name, l.key) == (name, key))

    def held(self, name: str, key: str) -> int:
        with self.lock:
            return self._held_locked(name, key)

    def Acquire(self, request, context):
        with self.lock:
            self.acquires.append(request)
            if self.acquire_error is not None:
                context.abort(self.acquire_error, "store unavailable")
            self._held_locked("", "")  # drops the expired leases
            replayed = self.leases.get(self.by_request.get(request.request_id, ""))
            if request.request_id and replayed is not None:
                return pb.AcquireResponse(allowed=True, lease=replayed, replayed=True,
                                          denied_by=-1)
            limit = request.limits[0]
            capacity = (int(limit.config.capacity) if limit.HasField("config")
                        and limit.config.HasField("capacity") else self.capacity)
            count = int(limit.count) if limit.HasField("count") else 1
            held = self._held_locked(limit.name, limit.key)
            response = pb.AcquireResponse(denied_by=-1)
            result = response.results.add(name=limit.name, key=limit.key, capacity=capacity)
            now = time.time()
            if held + count > capacity:
                soonest = min([l.expires_at.ToNanoseconds() / 1e9 for l in self.leases.values()
                               if (l.name, l.key) == (limit.name, limit.key)] or [now + 3600])
                result.value = capacity - held
                result.reason = pb.NO_FREE_SLOTS
                response.reason = pb.NO_FREE_SLOTS
                response.denied_by = 0
                response.retry_at.FromNanoseconds(int(soonest * 1e9))
                response.retry_after.FromNanoseconds(int((soonest - now) * 1e9))
                return response
            lease = pb.Lease(id=secrets.token_hex(16), name=limit.name, key=limit.key,
                             count=count, holder=request.holder)
            lease.acquired_at.FromNanoseconds(int(now * 1e9))
            lease.expires_at.FromNanoseconds(int((now + _ttl(request)) * 1e9))
            self.leases[lease.id] = lease
            if request.request_id:
                self.by_request[request.request_id] = lease.id
            response.allowed = True
            response.lease.CopyFrom(lease)
            result.allowed = True
            result.value = capacity - held - count
            return response

    def Release(self, request, context):
        with self.lock:
            self.releases.append(request)
            hang = self.release_hang
        if hang:
            _hang(context)
        with self.lock:
            self._held_locked(request.name, request.key)  # drops the expired leases
            state = pb.NOT_HELD
            if self.leases.pop(request.lease_id, None) is not None:
                state = pb.RELEASED
            return pb.ReleaseResponse(state=state,
                                      held=self._held_locked(request.name, request.key))

    def Extend(self, request, context):
        with self.lock:
            self.extends.append(request)
            self.extend_deadlines.append(context.time_remaining())
            hang = self.extend_hang
        if hang:
            _hang(context)
        with self.lock:
            if self.extend_error is not None:
                context.abort(self.extend_error, "store unavailable")
            if self.extend_state is not None:
                return pb.ExtendResponse(state=self.extend_state)
            self._held_locked(request.name, request.key)
            lease = self.leases.get(request.lease_id)
            if lease is None:
                return pb.ExtendResponse(state=pb.NOT_HELD)
            lease.expires_at.FromNanoseconds(int((time.time() + _ttl(request)) * 1e9))
            return pb.ExtendResponse(state=pb.HELD, lease=lease)

    def ListLeases(self, request, context):
        with self.lock:
            self.list_metadata.append(tuple(context.invocation_metadata()))
            self.lists.append(request)
            response = pb.ListLeasesResponse(held=self._held_locked(request.name, request.key),
                                             capacity=self.capacity)
            # Pages of page_size (0: 100); this fake's token is the next page's first index.
            held = [l for l in self.leases.values() if (l.name, l.key) == (request.name, request.key)]
            start = int(request.page_token or 0)
            end = start + (request.page_size or 100)
            response.leases.extend(held[start:end])
            if end < len(held):
                response.next_page_token = str(end)
            return response
