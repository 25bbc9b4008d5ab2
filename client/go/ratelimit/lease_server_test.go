package ratelimit_test

import (
	"context"
	"errors"
	"math/rand"
	"net/http"
	"sync"
	"sync/atomic"
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

// 1,000 goroutines share one concurrency limit of capacity 10, each acquiring, holding 1-4 ms
// and releasing. A refused one retries after the answer's RetryAfter, bounded by a jittered
// backoff of 5 ms doubling up to 200 ms (a release frees a slot long before a lease expires).
// Each counts itself in a shared counter after its Acquire succeeds and out before its Release,
// and checks the count: the server must never have let an 11th holder in.
func TestAThousandCallersNeverHoldMoreThanTenSlots(t *testing.T) {
	const callers, capacity = 1000, 10
	s := startServer(t)
	// A long deadline per call: 1,000 callers queue on one key of a small machine.
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile), ratelimit.WithTimeout(30*time.Second))
	cfg := concurrency(capacity)
	req := ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{Name: "pool", Key: "k",
		Config: cfg}}, TTL: 10 * time.Second}
	deadline, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var holders, peak, overCapacity, refusals atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(seed))
			backoff := 5 * time.Millisecond
			for {
				lease, err := c.Acquire(deadline, req)
				var denied *ratelimit.AcquireDeniedError
				if errors.As(err, &denied) {
					refusals.Add(1)
					wait := backoff
					if r := denied.Result.RetryAfter; r < wait {
						wait = r
					}
					time.Sleep(time.Duration(rnd.Int63n(int64(wait) + 1)))
					if backoff < 200*time.Millisecond {
						backoff *= 2
					}
					continue
				}
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				n := holders.Add(1)
				if n > capacity {
					overCapacity.Add(1)
					t.Errorf("%d holders at once on capacity %d", n, capacity)
				}
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond + time.Duration(rnd.Int63n(int64(3*time.Millisecond))))
				holders.Add(-1)
				if err := lease.Release(deadline); err != nil {
					t.Errorf("release: %v", err)
				}
				return
			}
		}(int64(i))
	}
	wg.Wait()
	list, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "pool", Key: "k",
		Source: ratelimit.Inline, Config: cfg})
	must(t, err)
	t.Logf("peak %d holders, %d refusals", peak.Load(), refusals.Load())
	if overCapacity.Load() != 0 || peak.Load() < 2 || list.Held != 0 || len(list.Leases) != 0 {
		t.Fatalf("over capacity %d times, peak %d, left held %d", overCapacity.Load(),
			peak.Load(), list.Held)
	}
}
