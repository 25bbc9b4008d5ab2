package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// Requests the client refuses before sending them, naming the field as the server would.

// serveNothing serves both services on a free loopback port, answering UNIMPLEMENTED to every
// call; calls counts the calls that reached it.
func serveNothing(t *testing.T, calls *atomic.Int64) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	count := func(ctx context.Context, req interface{}, _ *grpc.UnaryServerInfo,
		handler grpc.UnaryHandler) (interface{}, error) {
		calls.Add(1)
		return handler(ctx, req)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(count))
	pb.RegisterRateLimitServiceServer(srv, pb.UnimplementedRateLimitServiceServer{})
	pb.RegisterOverrideServiceServer(srv, pb.UnimplementedOverrideServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// notUTF8 is a string that is not valid UTF-8 (a lone continuation byte).
const notUTF8 = "user-\xff"

// leaseID is a well-formed lease id.
const leaseID = "0123456789abcdef0123456789abcdef"

func TestAStringThatIsNotUTF8IsRefusedNamingItsFieldWithoutACall(t *testing.T) {
	var calls atomic.Int64
	c, err := ratelimit.Dial(serveNothing(t, &calls), ratelimit.WithAdminToken("t"))
	must(t, err)
	defer c.Close()
	two := ratelimit.Request{Limits: []ratelimit.Limit{{Name: "api", Key: "k"},
		{Name: notUTF8, Key: "k"}}}
	withID := one("api", "k", 1)
	withID.RequestID = notUTF8
	target := ratelimit.OverrideTarget{Name: "api", Key: "k"}
	for _, tc := range []struct {
		method, field string
		call          func() error
	}{
		{"Consume", "limits[0].key", func() error {
			_, err := c.Consume(ctx(t), one("api", notUTF8, 1))
			return err
		}},
		{"Check", "limits[1].name", func() error { _, err := c.Check(ctx(t), two); return err }},
		{"Reserve", "request_id", func() error { _, err := c.Reserve(ctx(t), withID); return err }},
		{"Reserve", "limits[0].key", func() error { return c.Wait(ctx(t), "api", notUTF8) }},
		{"Consume", "limits[0].key", func() error {
			_, err := c.Limiter("api", notUTF8).Allow(ctx(t))
			return err
		}},
		{"Batch", "entries[1].limits[0].key", func() error {
			_, err := c.Batch(ctx(t), ratelimit.BatchEntry{Request: one("api", "k", 1)},
				ratelimit.BatchEntry{Request: one("api", notUTF8, 1)})
			return err
		}},
		{"Reset", "key", func() error { return c.Reset(ctx(t), "api", notUTF8) }},
		{"Reset", "envoy_path[0].value", func() error {
			return c.ResetTarget(ctx(t), ratelimit.ResetTarget{Name: "d", Key: "k",
				Source: ratelimit.Envoy, EnvoyPath: []ratelimit.EnvoyPathEntry{{Key: "path",
					Value: notUTF8}}})
		}},
		{"Acquire", "limits[0].name", func() error {
			_, err := c.Acquire(ctx(t), ratelimit.Slots(notUTF8, "k", 1))
			return err
		}},
		{"Acquire", "holder", func() error {
			req := ratelimit.Slots("jobs", "k", 1)
			req.Holder = notUTF8
			_, err := c.TryAcquire(ctx(t), req)
			return err
		}},
		{"Release", "lease_id", func() error {
			_, err := c.Release(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: notUTF8})
			return err
		}},
		{"Extend", "key", func() error {
			_, err := c.Extend(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: notUTF8, ID: leaseID},
				time.Second)
			return err
		}},
		{"ListLeases", "page_token", func() error {
			_, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "jobs", Key: "k",
				PageToken: notUTF8})
			return err
		}},
		{"SetOverride", "override.target.key_pattern", func() error {
			_, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Blocked: true,
				Target: ratelimit.OverrideTarget{Name: "api", KeyPattern: notUTF8 + "*"}})
			return err
		}},
		{"SetOverride", "actor", func() error {
			_, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target,
				Blocked: true, Actor: notUTF8})
			return err
		}},
		{"GetOverride", "target.name", func() error {
			_, err := c.GetOverride(ctx(t), ratelimit.OverrideTarget{Name: notUTF8, Key: "k"})
			return err
		}},
		{"DeleteOverride", "reason", func() error {
			_, err := c.DeleteOverride(ctx(t), ratelimit.DeleteOverrideRequest{Target: target,
				Reason: notUTF8})
			return err
		}},
		{"ListOverrides", "name", func() error {
			_, err := c.ListOverrides(ctx(t), ratelimit.ListOverridesRequest{Name: notUTF8})
			return err
		}},
		{"ListOverrideAudit", "page_token", func() error {
			_, err := c.ListOverrideAudit(ctx(t),
				ratelimit.ListOverrideAuditRequest{PageToken: notUTF8})
			return err
		}},
	} {
		err := tc.call()
		var e *ratelimit.Error
		if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Method != tc.method ||
			e.Field != tc.field || status.Code(err) != codes.InvalidArgument ||
			!strings.HasPrefix(e.Message, tc.field+": must be valid UTF-8") {
			t.Errorf("%s with %s not UTF-8: %v; want INVALID_ARGUMENT naming %s", tc.method,
				tc.field, err, tc.field)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the server; want none", n)
	}
	// The same calls with valid strings are sent (and answered UNIMPLEMENTED by this server).
	if _, err := c.Consume(ctx(t), one("api", "k", 1)); status.Code(err) != codes.Unimplemented ||
		calls.Load() != 1 {
		t.Fatalf("a valid Consume: %v after %d calls", err, calls.Load())
	}
}

func TestALeaseTTLUnderAMillisecondOrNegativeIsRefusedNamingItWithoutACall(t *testing.T) {
	f := newFakeLeases(5)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	ref := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: leaseID}
	for _, ttl := range []time.Duration{time.Nanosecond, 500 * time.Nanosecond,
		999*time.Microsecond + 999*time.Nanosecond, -time.Nanosecond, -time.Millisecond,
		-time.Hour} {
		req := ratelimit.Slots("jobs", "k", 1)
		req.TTL = ttl
		_, tryErr := c.TryAcquire(ctx(t), req)
		lease, acquireErr := c.Acquire(ctx(t), req)
		if lease != nil {
			_ = lease.Release(ctx(t))
		}
		_, extendErr := c.Extend(ctx(t), ref, ttl)
		for what, err := range map[string]error{"TryAcquire": tryErr, "Acquire": acquireErr,
			"Extend": extendErr} {
			var e *ratelimit.Error
			if !errors.As(err, &e) || e.Code != codes.InvalidArgument ||
				e.Method != strings.TrimPrefix(what, "Try") || e.Field != "ttl" ||
				!strings.Contains(e.Message, "got "+ttl.String()) {
				t.Errorf("%s with a TTL of %v: %v; want INVALID_ARGUMENT naming ttl and %v",
					what, ttl, err, ttl)
			}
		}
	}
	if acquires, extends, releases := f.counts(); acquires != 0 || extends != 0 || releases != 0 {
		t.Fatalf("%d Acquire, %d Extend and %d Release calls reached the server; want none",
			acquires, extends, releases)
	}
	// 0 (the limit's lease_ttl) and 1 ms are sent as they are.
	for _, ttl := range []time.Duration{0, time.Millisecond} {
		req := ratelimit.Slots("jobs", "k", 1)
		req.TTL = ttl
		r, err := c.TryAcquire(ctx(t), req)
		must(t, err)
		_, err = c.Extend(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: r.Lease.ID}, ttl)
		must(t, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acquires) != 2 || f.acquires[0].Ttl != nil || f.acquires[1].Ttl.AsDuration() !=
		time.Millisecond || len(f.extends) != 2 || f.extends[0].Ttl != nil ||
		f.extends[1].Ttl.AsDuration() != time.Millisecond {
		t.Fatalf("TTLs 0 and 1ms: sent %v and %v", f.acquires, f.extends)
	}
}
