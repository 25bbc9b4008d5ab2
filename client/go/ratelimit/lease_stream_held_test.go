package ratelimit_test

import (
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// The lease stream (WithLeaseStream) against fakes: the errors and refusals of the calls, a
// held lease and the middlewares' slots over it, and Close.

// An op the server refuses is the call's *Error for the same status, and the stream goes on.
func TestALeaseOpsErrorIsTheCallsErrorAndTheStreamGoesOn(t *testing.T) {
	f := newStreamLeases(10)
	c := streamClient(t, serveStreamLeases(t, f))
	u, err := ratelimit.Dial(serveLeases(t, f.fakeLeases)) // the same fake, as calls
	must(t, err)
	defer u.Close()
	ref := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: "lease-1"}

	f.mu.Lock()
	f.acquireErr = status.Error(codes.InvalidArgument, "limits[0].count: must be whole")
	f.extendErr = status.Error(codes.Unavailable, "store unavailable")
	f.mu.Unlock()
	_, got := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	_, want := u.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	sameError(t, "a refused Acquire op", got, want)
	var e *ratelimit.Error
	if !errors.As(got, &e) || e.Field != "limits[0].count" {
		t.Fatalf("a refused Acquire op: %v", got)
	}
	_, got = c.Extend(ctx(t), ref, 0)
	_, want = u.Extend(ctx(t), ref, 0)
	sameError(t, "an Extend op answered UNAVAILABLE", got, want)
	for _, rel := range []*ratelimit.Client{c, u} {
		f.mu.Lock()
		f.releaseErr = status.Error(codes.NotFound, "name: no limit named \"jobs\"")
		f.mu.Unlock()
		_, err := rel.Release(ctx(t), ref)
		if rel == c {
			got = err
		} else {
			want = err
		}
	}
	sameError(t, "a Release op answered NOT_FOUND", got, want)

	f.mu.Lock()
	f.acquireErr, f.extendErr = nil, nil
	f.mu.Unlock()
	r, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	must(t, err)
	acquires, _, _ := f.seen("acquire")
	if !r.Allowed || f.streams.Load() != 1 || acquires != 2 {
		t.Fatalf("after the errors: %+v, %d streams, %d acquire ops", r, f.streams.Load(),
			acquires)
	}
}

// What the calls refuse before sending (a sub-millisecond TTL, a string not valid UTF-8), ops
// refuse with the same error, sending nothing.
func TestLeaseOpsRefuseWhatTheCallsRefuseWithoutSending(t *testing.T) {
	f := newStreamLeases(10)
	c := streamClient(t, serveStreamLeases(t, f))
	u, err := ratelimit.Dial(serveLeases(t, f.fakeLeases))
	must(t, err)
	defer u.Close()
	shortTTL := ratelimit.Slots("jobs", "k", 1)
	shortTTL.TTL = 500 * time.Nanosecond
	badHolder := ratelimit.Slots("jobs", "k", 1)
	badHolder.Holder = "pod-\xff"
	ref := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: "lease-1"}
	badID := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: "\xfe"}
	badKey := ratelimit.LeaseRef{Name: "jobs", Key: "k\xff", ID: "lease-1"}
	for _, tc := range []struct {
		what string
		call func(*ratelimit.Client) error
	}{
		{"an Acquire with a TTL of 500ns", func(c *ratelimit.Client) error {
			_, err := c.TryAcquire(ctx(t), shortTTL)
			return err
		}},
		{"an Extend by 500ns", func(c *ratelimit.Client) error {
			_, err := c.Extend(ctx(t), ref, 500*time.Nanosecond)
			return err
		}},
		{"an Acquire with a key not UTF-8", func(c *ratelimit.Client) error {
			_, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "\xff", 1))
			return err
		}},
		{"an Acquire with a holder not UTF-8", func(c *ratelimit.Client) error {
			_, err := c.TryAcquire(ctx(t), badHolder)
			return err
		}},
		{"a Release of a lease id not UTF-8", func(c *ratelimit.Client) error {
			_, err := c.Release(ctx(t), badID)
			return err
		}},
		{"an Extend of a key not UTF-8", func(c *ratelimit.Client) error {
			_, err := c.Extend(ctx(t), badKey, 0)
			return err
		}},
	} {
		got, want := tc.call(c), tc.call(u)
		sameError(t, tc.what, got, want)
		if status.Code(got) != codes.InvalidArgument {
			t.Fatalf("%s: %v", tc.what, got)
		}
	}
	acquires, extends, releases := f.counts()
	if f.streams.Load() != 0 || acquires+extends+releases != 0 {
		t.Fatalf("refused ops were sent: %d streams, %d calls", f.streams.Load(),
			acquires+extends+releases)
	}
}

// An op too large for a stream message (64 KiB) goes as a call, which the server then judges as
// it judges any call.
func TestALeaseOpTooLargeForAStreamMessageGoesAsACall(t *testing.T) {
	f := newStreamLeases(10)
	c := streamClient(t, serveStreamLeases(t, f))
	ref := ratelimit.LeaseRef{Name: "jobs", Key: strings.Repeat("k", 70000), ID: "lease-1"}
	r, err := c.Release(ctx(t), ref)
	must(t, err)
	if onStream, asCalls, _ := f.seen("release"); r.State != ratelimit.LeaseNotHeld ||
		onStream != 0 || asCalls != 1 || f.streams.Load() != 0 {
		t.Fatalf("a 70 kB Release: %+v, %d ops on %d streams, %d calls", r, onStream,
			f.streams.Load(), asCalls)
	}
}

// Client.Acquire's held lease goes over the stream: its Acquire, every heartbeat's Extend and
// its Release; so do the slots of a middleware's max in flight.
func TestAHeldLeaseHeartbeatsOverTheLeaseStream(t *testing.T) {
	f := newStreamLeases(1)
	c := streamClient(t, serveStreamLeases(t, f))
	req := ratelimit.Slots("jobs", "k", 1)
	req.TTL = 150 * time.Millisecond // a heartbeat every 50 ms
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	for i := 0; i < 3; i++ {
		recvWithin(t, f.extended, "a heartbeat's Extend op")
	}
	if lease.Err() != nil || f.held("jobs", "k") != 1 {
		t.Fatalf("after three heartbeats: err %v, held %d", lease.Err(), f.held("jobs", "k"))
	}
	must(t, lease.Release(ctx(t)))
	if !errors.Is(lease.Err(), ratelimit.ErrLeaseReleased) || f.held("jobs", "k") != 0 {
		t.Fatalf("after Release: err %v, held %d", lease.Err(), f.held("jobs", "k"))
	}

	next := &handler{}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight"})(next)
	if rec := get(h, "192.0.2.9:1"); rec.Code != http.StatusOK || next.calls != 1 {
		t.Fatalf("a request with a slot: %d", rec.Code)
	}
	for kind, least := range map[string]int{"acquire": 2, "extend": 3, "release": 2} {
		if onStream, asCalls, _ := f.seen(kind); onStream < least || asCalls != 0 {
			t.Fatalf("%s: %d ops on the stream (want at least %d), %d calls", kind, onStream,
				least, asCalls)
		}
	}
	if f.streams.Load() != 1 || f.held("inflight", "192.0.2.9") != 0 {
		t.Fatalf("%d streams, the request's slot held %d", f.streams.Load(),
			f.held("inflight", "192.0.2.9"))
	}
}

// A heartbeat's Extend waits for the connection, as an op as it does as a call (the stream is
// opened waiting for it), while other ops still fail at once when the server is down.
func TestAHeartbeatsExtendWaitsForTheServerAsAnOpAsAsACall(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "as a call", true: "as an op"}[stream], func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			addr := lis.Addr().String()
			must(t, lis.Close()) // down
			c, err := ratelimit.Dial(addr, ratelimit.WithLeaseStream(stream),
				ratelimit.WithTimeout(20*time.Second))
			must(t, err)
			defer c.Close()
			ref := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: "lease-1"}
			if _, err := c.Extend(ctx(t), ref, 0); status.Code(err) != codes.Unavailable {
				t.Fatalf("an Extend with the server down: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := ratelimit.ExtendAsHeartbeat(ctx(t), c, ref, 0)
				done <- err
			}()
			if _, err := c.Release(ctx(t), ref); status.Code(err) != codes.Unavailable {
				t.Fatalf("a Release while a heartbeat waits: %v", err)
			}
			select {
			case err := <-done:
				t.Fatalf("the heartbeat's Extend did not wait for the server: %v", err)
			default:
			}
			f := newStreamLeases(1)
			lis, err = net.Listen("tcp", addr) // up
			must(t, err)
			srv := grpc.NewServer()
			pb.RegisterRateLimitServiceServer(srv, f)
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			must(t, recvWithin(t, done, "the heartbeat's Extend"))
			onStream, asCalls, _ := f.seen("extend")
			if stream && (onStream != 1 || asCalls != 0) || !stream && (onStream != 0 || asCalls != 1) {
				t.Fatalf("the Extend: %d on a stream, %d as a call", onStream, asCalls)
			}
		})
	}
}

// leaseStreamGoroutines is the stacks of the goroutines running the client's lease stream code.
func leaseStreamGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "/ratelimit.(*leaseStream") {
			out = append(out, g)
		}
	}
	return out
}

// Close half-closes the stream (the server's Recv ends) and returns once the stream's
// goroutines have; lease calls go as calls after it.
func TestCloseEndsTheLeaseStreamAndItsGoroutines(t *testing.T) {
	f := newStreamLeases(10)
	conn, err := grpc.Dial(serveStreamLeases(t, f), grpc.WithInsecure())
	must(t, err)
	defer conn.Close()
	c, err := ratelimit.NewClient(conn, ratelimit.WithLeaseStream(true))
	must(t, err)
	_, err = c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	must(t, err)
	if g := leaseStreamGoroutines(); len(g) != 2 {
		t.Fatalf("%d goroutines serve the open stream, want a sender and a receiver:\n%s",
			len(g), strings.Join(g, "\n\n"))
	}
	must(t, c.Close())
	recvWithin(t, f.halfClosed, "the client's CloseSend")
	if g := leaseStreamGoroutines(); len(g) != 0 {
		t.Fatalf("%d goroutines of the lease stream after Close:\n%s", len(g),
			strings.Join(g, "\n\n"))
	}
	_, err = c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	must(t, err)
	if onStream, asCalls, _ := f.seen("acquire"); onStream != 1 || asCalls != 1 ||
		f.streams.Load() != 1 {
		t.Fatalf("after Close: %d ops on %d streams, %d calls", onStream, f.streams.Load(),
			asCalls)
	}
	must(t, c.Close()) // again: nothing to do
}
