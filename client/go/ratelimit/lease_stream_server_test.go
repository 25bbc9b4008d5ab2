package ratelimit_test

import (
	"context"
	"errors"
	"math/rand"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"ratelimit.dev/client/go/ratelimit"
)

// The lease stream (WithLeaseStream) against a real server, next to the calls.

// wire counts what a client sends: its unary calls by method, and the streams it opens.
type wire struct {
	mu      sync.Mutex
	calls   map[string]int
	streams atomic.Int64
}

func (w *wire) option() ratelimit.Option {
	w.calls = map[string]int{}
	return ratelimit.WithDialOptions(
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req,
			reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
			opts ...grpc.CallOption) error {
			w.mu.Lock()
			w.calls[method[strings.LastIndex(method, "/")+1:]]++
			w.mu.Unlock()
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
			cc *grpc.ClientConn, method string, streamer grpc.Streamer,
			opts ...grpc.CallOption) (grpc.ClientStream, error) {
			w.streams.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}))
}

// leaseCalls is the Acquire, Release and Extend calls sent.
func (w *wire) leaseCalls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls["Acquire"] + w.calls["Release"] + w.calls["Extend"]
}

// comparable is a lease call's answer without what differs between two leases (ids, times).
func comparable(v interface{}) interface{} {
	switch r := v.(type) {
	case *ratelimit.AcquireResult:
		out := *r
		out.Limits = append([]ratelimit.LimitResult(nil), r.Limits...)
		for i := range out.Limits {
			out.Limits[i].Key, out.Limits[i].RetryAt, out.Limits[i].RetryAfter = "", time.Time{}, 0
		}
		out.RetryAt, out.RetryAfter = time.Time{}, 0
		if r.Lease != nil {
			l := *r.Lease
			l.ID, l.Key, l.AcquiredAt, l.ExpiresAt = "", "", time.Time{}, time.Time{}
			l.AcquiredAt = time.Time{}.Add(r.Lease.ExpiresAt.Sub(r.Lease.AcquiredAt)) // the TTL
			out.Lease = &l
		}
		return out
	case *ratelimit.ExtendResult:
		out := *r
		if r.Lease != nil {
			l := *r.Lease
			l.ID, l.Key, l.AcquiredAt, l.ExpiresAt = "", "", time.Time{}, time.Time{}
			out.Lease = &l
		}
		return out
	}
	return v
}

// The same sequence of Acquire, Extend and Release, on two keys, as calls and as ops of a
// stream: the same answers (but for ids and times), and no call from the stream's client.
func TestLeaseStreamAnswersAsTheCallsDoAgainstTheServer(t *testing.T) {
	s := startServer(t)
	var calls, ops wire
	u := s.client(calls.option())
	c := s.client(ratelimit.WithLeaseStream(true), ops.option())
	cfg := concurrency(2)
	run := func(c *ratelimit.Client, key string) []interface{} {
		req := ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{Name: "jobs", Key: key,
			Config: cfg}}, TTL: 10 * time.Second, Holder: "pod-a"}
		var out []interface{}
		step := func(v interface{}, err error) {
			t.Helper()
			must(t, err)
			out = append(out, comparable(v))
		}
		first, err := c.TryAcquire(ctx(t), req)
		step(first, err)
		ref := ratelimit.LeaseRef{Name: "jobs", Key: key, ID: first.Lease.ID, Config: cfg}
		step(c.TryAcquire(ctx(t), req))
		denied, err := c.TryAcquire(ctx(t), req) // capacity 2: no free slot
		step(denied, err)
		if denied.Allowed || denied.RetryAfter <= 0 {
			t.Fatalf("a third acquire: %+v", denied)
		}
		extended, err := c.Extend(ctx(t), ref, 20*time.Second)
		step(extended, err)
		if extended.Lease == nil || extended.Lease.ID != ref.ID ||
			!extended.Lease.ExpiresAt.After(first.Lease.ExpiresAt) {
			t.Fatalf("Extend: %+v", extended)
		}
		step(c.Release(ctx(t), ref))
		step(c.Release(ctx(t), ref))   // not held any more
		step(c.Extend(ctx(t), ref, 0)) // nor extended
		req.RequestID = "job-" + key
		again, err := c.TryAcquire(ctx(t), req)
		step(again, err)
		replayed, err := c.TryAcquire(ctx(t), req)
		step(replayed, err)
		if !replayed.Replayed || replayed.Lease.ID != again.Lease.ID {
			t.Fatalf("a retried RequestID: %+v", replayed)
		}
		return out
	}
	want, got := run(u, "as-calls"), run(c, "as-ops")
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("step %d: as an op %+v, as a call %+v", i, got[i], want[i])
		}
	}
	if ops.leaseCalls() != 0 || ops.streams.Load() != 1 || calls.leaseCalls() != 9 ||
		calls.streams.Load() != 0 {
		t.Fatalf("stream client: %d calls, %d streams; unary client: %d calls, %d streams",
			ops.leaseCalls(), ops.streams.Load(), calls.leaseCalls(), calls.streams.Load())
	}
}

// 200 goroutines share one concurrency limit of capacity 10 through one stream, each acquiring,
// holding 1-4 ms and releasing (retrying a refusal after a jittered backoff, as the calls' test
// of a thousand callers does): never more than 10 held at once, and all finish.
func TestTwoHundredCallersOnOneLeaseStreamNeverHoldMoreThanTenSlots(t *testing.T) {
	const callers, capacity = 200, 10
	s := startServer(t)
	var ops wire
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile), ratelimit.WithTimeout(30*time.Second),
		ratelimit.WithLeaseStream(true), ops.option())
	cfg := concurrency(capacity)
	req := ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{Name: "pool", Key: "k",
		Config: cfg}}, TTL: 10 * time.Second}
	deadline, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var holders, peak, refusals, finished atomic.Int64
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
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond + time.Duration(rnd.Int63n(int64(3*time.Millisecond))))
				holders.Add(-1)
				if err := lease.Release(deadline); err != nil {
					t.Errorf("release: %v", err)
				}
				finished.Add(1)
				return
			}
		}(int64(i))
	}
	wg.Wait()
	list, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "pool", Key: "k",
		Source: ratelimit.Inline, Config: cfg})
	must(t, err)
	t.Logf("peak %d holders, %d refusals", peak.Load(), refusals.Load())
	if peak.Load() > capacity || peak.Load() < 2 || finished.Load() != callers ||
		list.Held != 0 || len(list.Leases) != 0 {
		t.Fatalf("peak %d holders on capacity %d, %d of %d finished, left held %d", peak.Load(),
			capacity, finished.Load(), callers, list.Held)
	}
	if ops.leaseCalls() != 0 || ops.streams.Load() != 1 {
		t.Fatalf("%d lease calls, %d streams: the ops must all go on one stream",
			ops.leaseCalls(), ops.streams.Load())
	}
}

// An op the server refuses is the error its call gets (the code, the message naming the field),
// and the stream goes on.
func TestAnInvalidLeaseOpIsTheCallsErrorAgainstTheServer(t *testing.T) {
	s := startServer(t)
	var ops wire
	u := s.client()
	c := s.client(ratelimit.WithLeaseStream(true), ops.option())
	bad := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: "zz", Config: concurrency(1)}
	_, got := c.Release(ctx(t), bad)
	_, want := u.Release(ctx(t), bad)
	sameError(t, "a Release of lease id zz", got, want)
	var e *ratelimit.Error
	if !errors.As(got, &e) || e.Field != "lease_id" || !strings.HasPrefix(e.Message, "lease_id: ") {
		t.Fatalf("a Release of lease id zz: %v, want INVALID_ARGUMENT naming lease_id", got)
	}
	_, got = c.Extend(ctx(t), bad, time.Second)
	_, want = u.Extend(ctx(t), bad, time.Second)
	sameError(t, "an Extend of lease id zz", got, want)
	whole := ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{Name: "jobs", Key: "k",
		Count: 1.5, Config: concurrency(2)}}}
	_, got = c.TryAcquire(ctx(t), whole)
	_, want = u.TryAcquire(ctx(t), whole)
	sameError(t, "an Acquire of 1.5 slots", got, want)
	if !errors.As(got, &e) || !strings.HasPrefix(e.Field, "limits[0]") {
		t.Fatalf("an Acquire of 1.5 slots: %v, want a field of limits[0]", got)
	}
	r, err := c.TryAcquire(ctx(t), ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{
		Name: "jobs", Key: "k", Config: concurrency(1)}}})
	must(t, err)
	if !r.Allowed || ops.streams.Load() != 1 || ops.leaseCalls() != 0 {
		t.Fatalf("after the refusals: %+v, %d streams, %d calls", r, ops.streams.Load(),
			ops.leaseCalls())
	}
}
