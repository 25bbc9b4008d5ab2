package ratelimit_test

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

func TestErrorFieldIsOnlyARequestFieldTheServerNamed(t *testing.T) {
	for _, tc := range []struct {
		code    codes.Code
		message string
		field   string
	}{
		// gRPC's own messages: a word and a colon, but no field of ours.
		{codes.Internal, "grpc: error while marshaling: string field contains invalid UTF-8", ""},
		{codes.InvalidArgument, "grpc: error while marshaling: something else", ""},
		{codes.Unavailable, "transport: Error while dialing: dial tcp: connection refused", ""},
		{codes.FailedPrecondition, "transport: the stream is done", ""},
		// A field path under a code the server never names fields with.
		{codes.Internal, "limits[0].key: must not be empty", ""},
		{codes.Unavailable, "limits[0].key: must not be empty", ""},
		// A path that starts with no field of the request (RateLimitRequest).
		{codes.InvalidArgument, "override.limit.rate: must be finite", ""},
		{codes.InvalidArgument, "ttl: must be between 1ms and max_lease_ttl", ""},
		// The server's field errors.
		{codes.InvalidArgument, "limits[0].key: must not be empty", "limits[0].key"},
		{codes.InvalidArgument, "limits[1].config.rate: must be finite", "limits[1].config.rate"},
		{codes.InvalidArgument, "request_id: must be at most 128 bytes, got 129", "request_id"},
		{codes.NotFound, "limits[0].name: limit \"x\" is not defined and has no inline config",
			"limits[0].name"},
		{codes.PermissionDenied, "limits[0].config: inline limits are disabled on this server",
			"limits[0].config"},
	} {
		f := &fakeService{err: status.Error(tc.code, tc.message)}
		c, err := ratelimit.Dial(serveFake(t, f))
		must(t, err)
		_, err = c.Consume(ctx(t), one("api", "k", 1))
		c.Close()
		var e *ratelimit.Error
		if !errors.As(err, &e) {
			t.Fatalf("%v %q: %v is no *ratelimit.Error", tc.code, tc.message, err)
		}
		if e.Code != tc.code || e.Message != tc.message || e.Field != tc.field {
			t.Errorf("%v %q: %v, field %q; want field %q", tc.code, tc.message, err, e.Field,
				tc.field)
		}
	}
}
