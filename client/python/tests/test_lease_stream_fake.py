"""lease_stream=True of the blocking client against in-process fakes (lease_stream_fake.py):
results out of order matched to their ops, a stream that ends (its waiting ops raise
UNAVAILABLE, the next op opens another stream), a server without LeaseStream (unary calls from
then on, logged once), a timed-out op (raised promptly, its late result discarded), close()
with ops in flight, the heartbeat of `with client.lease(...)` sent as stream ops, and how
queued ops are packed into messages."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

import grpc
import pytest

from call_count import CountCalls
from lease_fake import FakeLeases
from lease_stream_fake import FakeLeaseStream, OldServer
from ratelimit_client import (DeadlineExceededError, LeaseState, RateLimitClient,
                              RateLimitError, UnavailableError)
from ratelimit_client import _common, _lease_ops
from ratelimit_client._lease_stream import LeaseStream
from ratelimit_client._pb import ratelimit_pb2 as pb

STREAM_THREAD = "ratelimit-lease-stream"


@pytest.fixture
def fake():
    f = FakeLeaseStream(capacity=1)
    try:
        yield f
    finally:
        f.stop()


def in_threads(n, fn):
    """Runs fn(i) in n threads started together; returns their results (or exceptions) in
    order."""
    start = threading.Barrier(n)
    out = [None] * n

    def run(i):
        start.wait()
        try:
            out[i] = fn(i)
        except BaseException as e:  # returned to the test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_results_out_of_order_are_matched_to_their_ops(fake):
    fake.answer_after = 3  # the three ops are answered together, last first
    with RateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
        results = in_threads(3, lambda i: client.acquire("jobs", "k%d" % i, holder="h%d" % i))
        assert client._lease_stream.opened == 1
    for i, result in enumerate(results):
        assert result.allowed, result
        assert (result.lease.key, result.lease.holder) == ("k%d" % i, "h%d" % i)
    sent = [op_id for _, op_id in fake.ops]
    assert len(sent) == 3 and fake.answered == sent[::-1]


def test_a_stream_that_ends_fails_its_waiting_ops_and_the_next_op_opens_another(fake):
    fake.silent = True  # the first op waits, unanswered
    with RateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
        waiting = []
        first = threading.Thread(
            target=lambda: waiting.append(_raised(lambda: client.acquire("jobs", "a"))))
        first.start()
        assert fake.wait_ops("acquire", 1)
        fake.end_stream = (grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        ended = _raised(lambda: client.release("jobs", "a", "0" * 31 + "1"))
        first.join()
        for error, method in ((waiting[0], "Acquire"), (ended, "Release")):
            assert isinstance(error, UnavailableError), error
            assert error.code == grpc.StatusCode.UNAVAILABLE
            assert error.details == "the server is shutting down" and error.method == method
        fake.silent = False
        result = client.acquire("jobs", "b")
        assert result.allowed and result.lease.key == "b"
        assert client._lease_stream.opened == 2 and fake.streams == 2


def test_any_end_of_the_stream_is_unavailable_with_its_message(fake):
    fake.end_stream = (grpc.StatusCode.INVALID_ARGUMENT, "ops: at most 1000 a message")
    with RateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
        error = _raised(lambda: client.extend("jobs", "k", "0" * 31 + "1"))
        assert isinstance(error, UnavailableError) and error.method == "Extend"
        assert error.details == "ops: at most 1000 a message" and error.field is None
        assert client.extend("jobs", "k", "0" * 31 + "1").state == LeaseState.NOT_HELD


def _raised(call):
    try:
        call()
    except Exception as e:
        return e
    raise AssertionError("no exception")


def test_a_server_without_lease_stream_turns_the_client_to_unary_calls(caplog):
    fake = FakeLeases(capacity=10)
    old = OldServer(fake)
    try:
        with caplog.at_level(logging.WARNING, logger="ratelimit_client"):
            with RateLimitClient(old.target, lease_stream=True, timeout=10) as client:
                # Ten ops waiting when the UNIMPLEMENTED comes: each is sent again, unary.
                results = in_threads(10, lambda i: client.acquire("jobs", "k", holder=str(i)))
                assert all(r.allowed for r in results), results
                lease = results[0].lease
                assert client.extend("jobs", "k", lease.id).state == LeaseState.HELD
                assert client.release("jobs", "k", lease.id).state == LeaseState.RELEASED
                assert client._lease_stream.unary and client._lease_stream.opened == 1
        assert old.count("LeaseStream") == 1
        assert (old.count("Acquire"), old.count("Extend"), old.count("Release")) == (10, 1, 1)
        logged = [r for r in caplog.records if "LeaseStream" in r.getMessage()]
        assert len(logged) == 1 and logged[0].levelno == logging.WARNING
        assert "UNIMPLEMENTED" in logged[0].getMessage()
    finally:
        old.stop()
        fake.stop()


def test_a_heartbeat_after_the_fallback_is_a_unary_extend():
    fake = FakeLeases(capacity=1)
    old = OldServer(fake)
    try:
        with RateLimitClient(old.target, lease_stream=True) as client:
            with client.lease("jobs", "k", ttl=0.3) as lease:
                assert lease.id
            assert old.count("LeaseStream") == 1 and old.count("Release") == 1
    finally:
        old.stop()
        fake.stop()


def test_a_timed_out_op_raises_promptly_and_its_late_result_is_discarded(fake):
    fake.silent = True
    with RateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
        started = time.monotonic()
        error = _raised(lambda: client.acquire("jobs", "late", timeout=0.2))
        assert time.monotonic() - started < 2.0
        assert isinstance(error, DeadlineExceededError) and error.method == "Acquire"
        assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert error.details == "Deadline Exceeded"  # gRPC's, as for the unary call
        fake.silent = False  # the late result goes out with the next op's
        result = client.acquire("jobs", "next")
        assert result.allowed and result.lease.key == "next"
        assert fake.answered[-1] == fake.ops[0][1]  # the late one came, and was ignored
        assert client._lease_stream.opened == 1
        assert not client._lease_stream._session.pending  # nothing left behind


def test_close_fails_the_ops_in_flight_and_ends_the_reader_thread(fake):
    fake.silent = True
    fake.linger = True  # the stream goes on after the client half-closes it, unless cancelled
    client = RateLimitClient(fake.target, lease_stream=True, timeout=10)
    waiting = []
    t = threading.Thread(target=lambda: waiting.append(_raised(
        lambda: client.acquire("jobs", "k"))))
    t.start()
    assert fake.wait_ops("acquire", 1)
    started = time.monotonic()
    closing = threading.Thread(target=client.close)
    closing.start()
    closing.join(5)
    assert not closing.is_alive(), "close() did not end the stream"
    assert not any(th.name == STREAM_THREAD for th in threading.enumerate())
    t.join()
    assert time.monotonic() - started < 2.0
    error = waiting[0]
    assert isinstance(error, RateLimitError) and error.code == grpc.StatusCode.CANCELLED
    assert error.details == "the client is closed" and error.method == "Acquire"


def test_close_waits_for_the_reader_thread(fake, monkeypatch):
    """close() returns only once the reader thread has finished with the stream's end."""
    in_end, go, order = threading.Event(), threading.Event(), []
    end = LeaseStream._end

    def slow_end(self, *args):
        in_end.set()
        go.wait(10)
        end(self, *args)
        order.append("reader ended")

    monkeypatch.setattr(LeaseStream, "_end", slow_end)
    client = RateLimitClient(fake.target, lease_stream=True, timeout=10)
    assert client.acquire("jobs", "k").allowed

    def close():
        client.close()
        order.append("close returned")

    closing = threading.Thread(target=close)
    closing.start()
    assert in_end.wait(5)
    closing.join(0.3)  # close() is still waiting for the reader
    assert closing.is_alive()
    go.set()
    closing.join(5)
    assert order == ["reader ended", "close returned"]


def test_the_heartbeat_of_a_held_lease_goes_on_the_stream(fake):
    counter = CountCalls()
    channel = grpc.intercept_channel(grpc.insecure_channel(fake.target), counter)
    with RateLimitClient(channel=channel, lease_stream=True) as client:
        with client.lease("jobs", "k", ttl=0.6) as lease:  # extended every 0.2 s
            assert fake.wait_ops("extend", 2)
            assert not lease.lost.is_set()
        assert fake.count("acquire") == 1 and fake.count("release") == 1
        assert fake.held("jobs", "k") == 0
        assert client._lease_stream.opened == 1
    assert not {"Acquire", "Release", "Extend"} & set(counter.calls), counter.calls


def test_leaving_the_block_abandons_an_extend_in_flight_on_the_stream(fake):
    with RateLimitClient(fake.target, lease_stream=True, timeout=10) as client:
        with client.lease("jobs", "k", ttl=0.3) as lease:
            fake.hold_kinds = {"extend"}  # the next extend is never answered
            assert fake.wait_ops("extend", fake.count("extend") + 1)
            started = time.monotonic()
        assert time.monotonic() - started < 2.0  # did not wait for the extend's timeout
        assert lease.released and not lease.lost.is_set()
        assert fake.count("release") == 1


# Packing: the ops queued while a message was sent go out together, within the bounds.

def test_ops_queued_meanwhile_go_out_together_at_most_1000_a_message(fake):
    with RateLimitClient(fake.target, lease_stream=True, timeout=30) as client:
        stream = client._lease_stream
        # The stream's lock held, its request iterator cannot take any op: the 1500 queue up
        # as they would while a message is being sent.
        with stream._cond:
            calls = [stream.start("Release", pb.ReleaseRequest(name="jobs", key="k",
                                                               lease_id="%032x" % (i + 1)),
                                  30, _no_unary, _common.to_release_result)
                     for i in range(1500)]
        assert all(call.result().state == LeaseState.NOT_HELD for call in calls)
    assert fake.messages == [1000, 500]


def _no_unary(timeout):
    raise AssertionError("not a unary call")


def _queued(n, size_each=0, wanted=lambda: True):
    queue = deque()
    for i in range(n):
        op = pb.LeaseOp(id=i + 1)
        op.acquire.holder = "h" * size_each
        queue.append(_lease_ops.Queued(op, _lease_ops.framed_size(op), wanted))
    return queue


def _request_size(ops):
    return pb.LeaseStreamRequest(ops=ops).ByteSize()


def test_a_message_takes_at_most_1000_ops():
    queue = _queued(2500)
    sizes = []
    while queue:
        sizes.append(len(_lease_ops.take_batch(queue)))
    assert sizes == [1000, 1000, 500]


def test_a_message_stays_within_64_kib():
    queue = _queued(40, size_each=5000)  # about 200 KB in all
    messages = []
    while queue:
        messages.append(_lease_ops.take_batch(queue))
    assert sum(len(m) for m in messages) == 40
    assert all(0 < _request_size(m) <= 64 * 1024 for m in messages)
    assert _request_size(messages[0]) + _request_size(messages[1][:1]) > 64 * 1024
    # The framed sizes add up to the message's size exactly.
    assert _request_size(messages[0]) == sum(_lease_ops.framed_size(op) for op in messages[0])


def test_ops_nobody_waits_for_are_not_sent():
    queue = _queued(3)
    queue[1].wanted = lambda: False
    assert [op.id for op in _lease_ops.take_batch(queue)] == [1, 3]
