package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"ratelimit.dev/client/go/ratelimit"
)

// The lease calls and max in flight against a real server, with inline concurrency limits.

func concurrency(capacity float64) *ratelimit.Config {
	return &ratelimit.Config{Kind: ratelimit.Concurrency, Capacity: ratelimit.Ptr(capacity),
		LeaseTTL: 30 * time.Second}
}

func TestLeasesAgainstTheServer(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile))
	cfg := concurrency(1)
	req := ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{Name: "jobs", Key: "k",
		Config: cfg}}, TTL: 900 * time.Millisecond, Holder: "pod-a"}
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	denied, err := c.TryAcquire(ctx(t), req)
	must(t, err)
	if denied.Allowed || denied.Reason != ratelimit.NoFreeSlots || denied.RetryAfter <= 0 {
		t.Fatalf("a second acquire on capacity 1: %+v", denied)
	}
	// Held past its TTL by the heartbeat (every 300 ms).
	time.Sleep(1200 * time.Millisecond)
	list, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "jobs", Key: "k",
		Source: ratelimit.Inline, Config: cfg})
	must(t, err)
	if lease.Err() != nil || list.Held != 1 || len(list.Leases) != 1 ||
		list.Leases[0].ID != lease.ID() || list.Leases[0].Holder != "pod-a" {
		t.Fatalf("after the heartbeats: err %v, list %+v", lease.Err(), list)
	}
	must(t, lease.Release(ctx(t)))
	r, err := c.Release(ctx(t), lease.Ref())
	must(t, err)
	if r.State != ratelimit.LeaseNotHeld || r.Held != 0 {
		t.Fatalf("a second release: %+v", r)
	}
}

func TestMaxInFlightAgainstTheServer(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile))
	cfg := concurrency(2)
	slow := newSlowHandler()
	var h http.Handler = c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight",
		InFlightConfig: cfg})(slow)
	maxInFlightExactlyTwo(t, h, slow, func() uint64 {
		list, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "inflight",
			Key: "192.0.2.9", Source: ratelimit.Inline, Config: cfg})
		must(t, err)
		return list.Held
	})
}
