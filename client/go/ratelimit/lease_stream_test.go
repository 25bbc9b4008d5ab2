package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// The lease stream (WithLeaseStream) against in-process fakes whose LeaseStream the tests
// control (lease_stream_fake_test.go).

// recvWithin waits for ch, failing the test after 10 s (a hang, not a timing).
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitQueued reads the queue lengths a client reports (SetLeaseOpQueued) until one is n.
func waitQueued(t *testing.T, queued <-chan int, n int) {
	t.Helper()
	for recvWithin(t, queued, fmt.Sprintf("%d ops queued", n)) != n {
	}
}

// Results answered in another order than the ops were sent, several in a message, each reach
// the op with their id.
func TestLeaseStreamMatchesResultsAnsweredOutOfOrder(t *testing.T) {
	f := newStreamLeases(10)
	f.handle = func(_ int64, ss pb.RateLimitService_LeaseStreamServer) error {
		ops, err := f.recvOps(ss, 3)
		if err != nil {
			return err
		}
		// The last two ops' results in one message, last first; then the first op's.
		both := &pb.LeaseStreamResponse{Results: []*pb.LeaseOpResult{
			f.decide(ss.Context(), ops[2]), f.decide(ss.Context(), ops[1])}}
		if err := ss.Send(both); err != nil {
			return err
		}
		first := &pb.LeaseStreamResponse{Results: []*pb.LeaseOpResult{
			f.decide(ss.Context(), ops[0])}}
		if err := ss.Send(first); err != nil {
			return err
		}
		return f.serve(ss)
	}
	c := streamClient(t, serveStreamLeases(t, f))
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func(holder string) {
			req := ratelimit.Slots("jobs", holder, 1)
			req.Holder = holder
			r, err := c.TryAcquire(ctx(t), req)
			if err == nil && (!r.Allowed || r.Lease == nil || r.Lease.Holder != holder ||
				r.Lease.Key != holder || r.Limits[0].Key != holder) {
				err = fmt.Errorf("%s got another op's result: %+v", holder, r)
			}
			errs <- err
		}("holder-" + strconv.Itoa(i))
	}
	for i := 0; i < 3; i++ {
		must(t, recvWithin(t, errs, "an op's result"))
	}
	if onStream, asCalls, _ := f.seen("acquire"); onStream != 3 || asCalls != 0 ||
		f.streams.Load() != 1 {
		t.Fatalf("%d acquires on %d streams, %d as calls", onStream, f.streams.Load(), asCalls)
	}
}

// The ops queued while a Send is in progress go out together in the next message.
func TestLeaseStreamPacksTheOpsQueuedDuringASendInOneMessage(t *testing.T) {
	f := newStreamLeases(10)
	g := newGate()
	c := streamClient(t, serveStreamLeases(t, f), g.option())
	queued := make(chan int, 100)
	ratelimit.SetLeaseOpQueued(c, func(n int) { queued <- n })
	errs := make(chan error, 6)
	release := func(id string) {
		go func() {
			_, err := c.Release(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: id})
			errs <- err
		}()
	}
	release("first")
	recvWithin(t, g.entered, "the first Send")
	for i := 0; i < 5; i++ {
		release("queued-" + strconv.Itoa(i))
	}
	waitQueued(t, queued, 5) // while the first Send waits
	close(g.open)
	for i := 0; i < 6; i++ {
		must(t, recvWithin(t, errs, "a Release's result"))
	}
	if _, _, messages := f.seen("release"); !reflect.DeepEqual(messages, []int{1, 5}) {
		t.Fatalf("ops per message: %v, want [1 5]", messages)
	}
}

// A message packs at most 1000 ops and at most 64 KiB: the ops queued past either bound go in
// the next.
func TestLeaseStreamMessagesHoldAtMost1000OpsAnd64KiB(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      int
		key      string
		messages int
	}{
		{"1001 small ops", 1001, "k", 3},
		{"100 ops of 1 KiB", 100, strings.Repeat("k", 1000), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStreamLeases(10)
			g := newGate()
			c := streamClient(t, serveStreamLeases(t, f), g.option(),
				ratelimit.WithTimeout(30*time.Second))
			queued := make(chan int, 2*tc.ops)
			ratelimit.SetLeaseOpQueued(c, func(n int) { queued <- n })
			errs := make(chan error, tc.ops+1)
			release := func(id string) {
				go func() {
					_, err := c.Release(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: tc.key, ID: id})
					errs <- err
				}()
			}
			release("first")
			recvWithin(t, g.entered, "the first Send")
			for i := 0; i < tc.ops; i++ {
				release(strconv.Itoa(i))
			}
			waitQueued(t, queued, tc.ops)
			close(g.open)
			for i := 0; i <= tc.ops; i++ {
				must(t, recvWithin(t, errs, "a Release's result"))
			}
			f.mu.Lock()
			messages, sizes := append([]int(nil), f.messages...), append([]int(nil), f.sizes...)
			f.mu.Unlock()
			total := 0
			for i, n := range messages {
				total += n
				if n > 1000 || sizes[i] > 64<<10 {
					t.Fatalf("message %d: %d ops, %d bytes", i, n, sizes[i])
				}
			}
			// The first message after the Send is as full as a bound allows.
			if total != tc.ops+1 || len(messages) != tc.messages ||
				(messages[1] != 1000 && sizes[1] < 64<<10-1100) {
				t.Fatalf("ops per message %v, bytes %v", messages, sizes)
			}
		})
	}
}

// A stream that ends fails the ops waiting on it with the error a call gets for UNAVAILABLE
// carrying the stream's message (as a server shutting down ends it: the very error of a call
// answered so), and the next op opens another stream.
func TestAnEndedLeaseStreamFailsItsOpsAsUnavailableAndTheNextOpReopens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     error  // the first stream's end, after it has read two ops
		message string // the ops' UNAVAILABLE message
	}{
		{"UNAVAILABLE", status.Error(codes.Unavailable, "server shutting down"),
			"server shutting down"},
		{"INVALID_ARGUMENT", status.Error(codes.InvalidArgument, "ops: at most 1000 a message"),
			"lease stream ended: INVALID_ARGUMENT: ops: at most 1000 a message"},
		{"OK with ops unanswered", nil,
			"lease stream ended by the server before answering every op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStreamLeases(10)
			f.handle = func(n int64, ss pb.RateLimitService_LeaseStreamServer) error {
				if n > 1 {
					return f.serve(ss)
				}
				if _, err := f.recvOps(ss, 2); err != nil {
					return err
				}
				return tc.end
			}
			c := streamClient(t, serveStreamLeases(t, f))
			errs := make(chan error, 2)
			for i := 0; i < 2; i++ {
				go func() {
					_, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
					errs <- err
				}()
			}
			// The error of a call answered UNAVAILABLE with that message.
			u := newFakeLeases(10)
			u.acquireErr = status.Error(codes.Unavailable, tc.message)
			uc, err := ratelimit.Dial(serveLeases(t, u))
			must(t, err)
			defer uc.Close()
			_, want := uc.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
			for i := 0; i < 2; i++ {
				sameError(t, "an op waiting when its stream ended",
					recvWithin(t, errs, "the ops' errors"), want)
			}
			r, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
			must(t, err)
			if onStream, asCalls, _ := f.seen("acquire"); !r.Allowed || f.streams.Load() != 2 ||
				onStream != 3 || asCalls != 0 {
				t.Fatalf("the next op: %+v, %d streams, %d ops on them, %d calls", r,
					f.streams.Load(), onStream, asCalls)
			}
		})
	}
}

// A server without LeaseStream (UNIMPLEMENTED): the ops that found out are sent as calls, and
// every later one; logged once.
func TestLeaseStreamFallsBackToCallsOnAServerWithoutIt(t *testing.T) {
	var logs lockedBuffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&logs)
	f := newFakeLeases(10) // no LeaseStream
	c := streamClient(t, serveLeases(t, f))
	leases := make(chan *ratelimit.AcquireResult, 5)
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		go func() {
			r, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
			leases <- r
			errs <- err
		}()
	}
	var r *ratelimit.AcquireResult
	for i := 0; i < 5; i++ {
		must(t, recvWithin(t, errs, "an acquire"))
		r = <-leases
	}
	e, err := c.Extend(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: r.Lease.ID}, 0)
	must(t, err)
	rel, err := c.Release(ctx(t), ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: r.Lease.ID})
	must(t, err)
	acquires, extends, releases := f.counts()
	if !r.Allowed || e.State != ratelimit.LeaseHeld || rel.State != ratelimit.LeaseReleased ||
		acquires != 5 || extends != 1 || releases != 1 || f.held("jobs", "k") != 4 {
		t.Fatalf("as calls: %+v %+v %+v; %d acquires, %d extends, %d releases", r, e, rel,
			acquires, extends, releases)
	}
	var lines []string
	for _, l := range logs.lines() {
		if strings.Contains(l, "LeaseStream") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "UNIMPLEMENTED") {
		t.Fatalf("the fallback's log: %q", logs.lines())
	}
}

// An op whose context is cancelled returns the call's error for it at once, while its result is
// withheld; the result, when it comes, is dropped, and the stream goes on.
func TestACancelledLeaseOpReturnsAtOnceAndItsLateResultIsDropped(t *testing.T) {
	f := newStreamLeases(10)
	got, answer := make(chan struct{}), make(chan struct{})
	f.handle = func(_ int64, ss pb.RateLimitService_LeaseStreamServer) error {
		ops, err := f.recvOps(ss, 1)
		if err != nil {
			return err
		}
		close(got)
		select {
		case <-answer:
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
		late := &pb.LeaseStreamResponse{Results: []*pb.LeaseOpResult{
			f.decide(ss.Context(), ops[0])}}
		if err := ss.Send(late); err != nil {
			return err
		}
		return f.serve(ss)
	}
	c := streamClient(t, serveStreamLeases(t, f))
	opCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req := ratelimit.Slots("jobs", "k", 1)
		req.Holder = "first"
		_, err := c.TryAcquire(opCtx, req)
		done <- err
	}()
	recvWithin(t, got, "the op at the server")
	cancel()
	var e *ratelimit.Error
	if err := recvWithin(t, done, "the cancelled op"); !errors.As(err, &e) ||
		e.Method != "Acquire" || e.Code != codes.Canceled || e.Message != "context canceled" ||
		status.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled op: %v, want the call's CANCELLED", err)
	}
	close(answer)
	req := ratelimit.Slots("jobs", "k", 1)
	req.Holder = "second"
	r, err := c.TryAcquire(ctx(t), req)
	must(t, err)
	if r.Lease == nil || r.Lease.Holder != "second" || f.streams.Load() != 1 {
		t.Fatalf("the next op: %+v (lease %+v), %d streams", r, r.Lease, f.streams.Load())
	}
}

// hungExtend answers no Extend until release is closed.
type hungExtend struct {
	pb.UnimplementedRateLimitServiceServer
	release chan struct{}
}

func (h *hungExtend) Extend(context.Context, *pb.ExtendRequest) (*pb.ExtendResponse, error) {
	<-h.release
	return nil, status.Error(codes.Internal, "released")
}

// An op past the client's timeout is the call's DEADLINE_EXCEEDED.
func TestALeaseOpPastItsDeadlineIsTheCallsDeadlineExceeded(t *testing.T) {
	f := newStreamLeases(10)
	f.handle = func(_ int64, ss pb.RateLimitService_LeaseStreamServer) error {
		for { // never answers
			if _, err := f.recv(ss); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	ref := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: "lease-1"}
	c := streamClient(t, serveStreamLeases(t, f), ratelimit.WithTimeout(100*time.Millisecond))
	_, got := c.Extend(ctx(t), ref, time.Second)
	// A call to a server that never answers (nor gives up at the deadline it was sent).
	hung := &hungExtend{release: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, hung)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	defer close(hung.release)
	uc, err := ratelimit.Dial(lis.Addr().String(), ratelimit.WithTimeout(100*time.Millisecond))
	must(t, err)
	defer uc.Close()
	_, want := uc.Extend(ctx(t), ref, time.Second)
	sameError(t, "an op past its deadline", got, want)
	if onStream, _, _ := f.seen("extend"); onStream != 1 {
		t.Fatalf("%d extends on the stream", onStream)
	}
}
