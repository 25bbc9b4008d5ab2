"""RateLimitError.field names a field of the request only when the server refused one: for the
codes it answers a bad field with, and when the message starts with a field of the method's
request. gRPC's own messages (or a proxy's) never pass for one."""
from __future__ import annotations

import grpc
import pytest

from ratelimit_client import RateLimitClient
from ratelimit_client.errors import from_rpc_error, from_status


class _Status(grpc.RpcError):
    """A failed call's status, as grpc raises it."""

    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize("method,code,details", [
    # gRPC's (or a Go proxy's) own messages, whatever the code.
    ("Consume", grpc.StatusCode.INTERNAL, "grpc: error while marshaling: string field "
                                          "contains invalid UTF-8"),
    ("Consume", grpc.StatusCode.UNAVAILABLE, "transport: Error while dialing: connection refused"),
    ("Consume", grpc.StatusCode.UNKNOWN, "limits: an application's exception"),
    ("Settle", grpc.StatusCode.RESOURCE_EXHAUSTED, "settlements: message larger than max"),
    # A field code, but a word that is no field of the method's request.
    ("Consume", grpc.StatusCode.INVALID_ARGUMENT, "grpc: error unmarshalling request: EOF"),
    ("Consume", grpc.StatusCode.PERMISSION_DENIED, "transport: authentication handshake failed"),
    ("Consume", grpc.StatusCode.INVALID_ARGUMENT, "ttl: a field of another method's request"),
    ("", grpc.StatusCode.INVALID_ARGUMENT, "limits[0].key: no method, no request to name"),
])
def test_a_message_that_is_not_the_servers_field_error_names_no_field(method, code, details):
    assert from_rpc_error(_Status(code, details), method).field is None


@pytest.mark.parametrize("method,code,details,field", [
    ("Consume", grpc.StatusCode.INVALID_ARGUMENT, "limits[1].key: must not be empty",
     "limits[1].key"),
    ("Consume", grpc.StatusCode.NOT_FOUND, "limits[0].name: no limit \"x\"", "limits[0].name"),
    ("Acquire", grpc.StatusCode.INVALID_ARGUMENT, "ttl: must not be negative", "ttl"),
    ("Settle", grpc.StatusCode.ALREADY_EXISTS, "settlements[0].receipt: already settled",
     "settlements[0].receipt"),
    ("SetOverride", grpc.StatusCode.FAILED_PRECONDITION, "override.target: no store",
     "override.target"),
    ("Consume", grpc.StatusCode.PERMISSION_DENIED, "limits[1].config: inline limits are "
                                                   "disabled", "limits[1].config"),
])
def test_the_servers_field_error_names_its_field(method, code, details, field):
    assert from_rpc_error(_Status(code, details), method).field == field


def test_a_batch_entrys_error_names_the_field_of_the_batch_request():
    e = from_status(grpc.StatusCode.INVALID_ARGUMENT.value[0],
                    "entries[2].limits[0].count: must be positive", "Batch")
    assert e.field == "entries[2].limits[0].count"
    e = from_status(grpc.StatusCode.INTERNAL.value[0], "entries: internal", "Batch")
    assert e.field is None


def test_grpcs_own_serialization_error_names_no_field(unused_target):
    # A request grpc itself cannot serialize: the call fails in the client, before sending.
    channel = grpc.insecure_channel(unused_target)
    call = channel.unary_unary("/ratelimit.v1.RateLimitService/Consume",
                               request_serializer=lambda request: request.encode("ascii"))
    with RateLimitClient(channel=channel):
        with pytest.raises(grpc.RpcError) as info:
            call("limits: \u00e9", timeout=1)
    e = from_rpc_error(info.value, "Consume")
    assert e.code == grpc.StatusCode.INTERNAL and e.field is None
