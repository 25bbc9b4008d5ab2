"""Client interceptors that count the calls a client sends, by method name (for the tests that
assert a call was never sent), or record how each call ended."""
from __future__ import annotations

import grpc
import grpc.aio


def _method(details) -> str:
    method = details.method
    return (method.decode() if isinstance(method, bytes) else method).rsplit("/", 1)[-1]


class CountCalls(grpc.UnaryUnaryClientInterceptor):
    """Counts the calls of a RateLimitClient (sync)."""

    def __init__(self):
        self.calls = {}

    def intercept_unary_unary(self, continuation, details, request):
        self.calls[_method(details)] = self.calls.get(_method(details), 0) + 1
        return continuation(details, request)


class CallOutcomes(grpc.UnaryUnaryClientInterceptor):
    """Records, by method name, the status code each call of a RateLimitClient (sync) ended
    with: CANCELLED for a call the client abandoned, DEADLINE_EXCEEDED for one it waited out."""

    def __init__(self):
        self.codes = {}

    def intercept_unary_unary(self, continuation, details, request):
        call = continuation(details, request)
        codes = self.codes.setdefault(_method(details), [])
        call.add_done_callback(lambda done: codes.append(done.code()))
        return call


class CountAsyncCalls(grpc.aio.UnaryUnaryClientInterceptor):
    """Counts the calls of an AsyncRateLimitClient."""

    def __init__(self):
        self.calls = {}

    async def intercept_unary_unary(self, continuation, details, request):
        self.calls[_method(details)] = self.calls.get(_method(details), 0) + 1
        return await continuation(details, request)
