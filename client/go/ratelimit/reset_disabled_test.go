package ratelimit_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"ratelimit.dev/client/go/ratelimit"
)

// A server started without an admin token has Reset disabled: it answers PERMISSION_DENIED
// "Reset is disabled ...", with or without a token, and the client passes that on unchanged.
func TestResetOnAServerWithResetDisabledIsPermissionDenied(t *testing.T) {
	s := startServerWithoutAdminToken(t)
	t.Setenv(ratelimit.AdminTokenEnv, "")
	for _, c := range []*ratelimit.Client{s.client(), s.client(ratelimit.WithAdminToken(testToken))} {
		err := c.Reset(ctx(t), "api", "k")
		var e *ratelimit.Error
		if !errors.As(err, &e) || e.Code != codes.PermissionDenied || e.Method != "Reset" ||
			!strings.HasPrefix(e.Message, "Reset is disabled") ||
			!strings.Contains(err.Error(), "PERMISSION_DENIED: Reset is disabled") {
			t.Fatalf("Reset on a server without an admin token: %v", err)
		}
	}
}
