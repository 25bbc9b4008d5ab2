package ratelimit_test

import (
	"context"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// The gRPC interceptors' max in flight (GRPCOptions.InFlight): a slot held while a unary call is
// handled or a stream is open.

// slowHealth is a health service whose Check and Watch count the calls running at once (and the
// most ever) and block each until release is closed (a Watch sends one answer first). A call
// for the service "panic" panics instead.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	running, most atomic.Int64
	started       chan struct{}
	release       chan struct{}
}

func newSlowHealth() *slowHealth {
	return &slowHealth{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (h *slowHealth) run(service string) {
	if service == "panic" {
		panic("handler failed")
	}
	n := h.running.Add(1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	h.started <- struct{}{}
	<-h.release
	h.running.Add(-1)
}

func (h *slowHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (
	*healthpb.HealthCheckResponse, error) {
	h.run(req.Service)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *slowHealth) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	if err := ss.Send(&healthpb.HealthCheckResponse{}); err != nil {
		return err
	}
	h.run(req.Service)
	return nil
}

// recoverUnary and recoverStream answer a handler's panic INTERNAL, as a recovery interceptor
// does; they run outside the rate-limit interceptors.
func recoverUnary(ctx context.Context, req interface{}, _ *grpc.UnaryServerInfo,
	handler grpc.UnaryHandler) (resp interface{}, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(ctx, req)
}

func recoverStream(srv interface{}, ss grpc.ServerStream, _ *grpc.StreamServerInfo,
	handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(srv, ss)
}

// serveSlowHealth serves h behind the recovery and rate-limit interceptors on a free port, and
// returns a client of it.
func serveSlowHealth(t *testing.T, c *ratelimit.Client, opts ratelimit.GRPCOptions,
	h *slowHealth) healthpb.HealthClient {
	t.Helper()
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(recoverUnary, c.UnaryServerInterceptor(opts)),
		grpc.ChainStreamInterceptor(recoverStream, c.StreamServerInterceptor(opts)))
	healthpb.RegisterHealthServer(srv, h)
	return serveAndDialHealth(t, srv)
}

// onFakeLeases is a client of a fake of the lease calls with `slots` slots per key, and a
// slowHealth whose calls return at once.
func onFakeLeases(t *testing.T, slots uint64) (*fakeLeases, *ratelimit.Client, *slowHealth) {
	t.Helper()
	f := newFakeLeases(slots)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	h := newSlowHealth()
	close(h.release)
	return f, c, h
}

// retryDelay is the RetryInfo detail of a status error (ok false without one).
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok {
			return info.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

// heldOn is the slots the server holds on the inline concurrency limit "inflight", key
// 127.0.0.1 (the interceptor's default key for a local client).
func heldOn(t *testing.T, c *ratelimit.Client, cfg *ratelimit.Config) *ratelimit.LeaseList {
	t.Helper()
	list, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "inflight",
		Key: "127.0.0.1", Source: ratelimit.Inline, Config: cfg})
	must(t, err)
	return list
}

// Twelve concurrent calls on three slots: three run, nine are refused with retry info; at no
// instant do more than three handlers run, and the slots are free once they return.
func TestGRPCMaxInFlightRunsAtMostNAndRefusesTheRest(t *testing.T) {
	const calls, slots = 12, 3
	s := startServer(t)
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile))
	cfg := concurrency(slots)
	h := newSlowHealth()
	hc := serveSlowHealth(t, c, ratelimit.GRPCOptions{InFlight: "inflight", InFlightConfig: cfg}, h)
	type answer struct {
		err error
		md  metadata.MD
	}
	answers := make(chan answer, calls)
	var wg sync.WaitGroup
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var md metadata.MD
			_, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			answers <- answer{err, md}
		}()
	}
	started, refused := 0, 0
	for started < slots || refused < calls-slots {
		select {
		case <-h.started:
			started++
		case a := <-answers:
			delay, ok := retryDelay(a.err)
			retryAfter, perr := strconv.Atoi(firstOf(a.md.Get("retry-after")))
			if status.Code(a.err) != codes.ResourceExhausted || !ok || delay <= 0 ||
				delay > 30*time.Second || perr != nil || retryAfter <= 0 ||
				firstOf(a.md.Get("ratelimit-remaining")) != "0" {
				close(h.release)
				t.Fatalf("a call beyond the slots: %v (retry info %v %v), headers %v", a.err,
					delay, ok, a.md)
			}
			refused++
		case <-time.After(10 * time.Second):
			close(h.release)
			t.Fatalf("%d calls started, %d refused", started, refused)
		}
	}
	if running, held := h.running.Load(), heldOn(t, c, cfg).Held; running != slots ||
		held != slots {
		close(h.release)
		t.Fatalf("running %d, held %d; want %d and %d", running, held, slots, slots)
	}
	close(h.release)
	wg.Wait()
	for i := 0; i < slots; i++ {
		if a := <-answers; a.err != nil {
			t.Fatalf("a call holding a slot: %v", a.err)
		}
	}
	if most, held := h.most.Load(), heldOn(t, c, cfg).Held; most != slots || held != 0 {
		t.Fatalf("most in flight %d, held after %d; want %d and 0", most, held, slots)
	}
}

// A stream open longer than its lease's TTL keeps its slot: the lease's heartbeat extends it.
func TestGRPCMaxInFlightKeepsALongStreamHeld(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile))
	cfg := &ratelimit.Config{Kind: ratelimit.Concurrency, Capacity: ratelimit.Ptr(1.0),
		LeaseTTL: 300 * time.Millisecond}
	h := newSlowHealth()
	hc := serveSlowHealth(t, c, ratelimit.GRPCOptions{InFlight: "inflight", InFlightConfig: cfg}, h)
	defer func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	}()
	stream, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
	must(t, err)
	_, err = stream.Recv()
	must(t, err)
	<-h.started
	first := heldOn(t, c, cfg)
	if first.Held != 1 || len(first.Leases) != 1 {
		t.Fatalf("an open stream's slot: %+v", first)
	}
	// The server judges expiry by its own clock: let the first expiry pass for real.
	time.Sleep(time.Until(first.Leases[0].ExpiresAt) + 100*time.Millisecond)
	later := heldOn(t, c, cfg)
	if later.Held != 1 || len(later.Leases) != 1 || later.Leases[0].ID != first.Leases[0].ID ||
		!later.Leases[0].ExpiresAt.After(first.Leases[0].ExpiresAt) {
		t.Fatalf("past its first expiry: %+v, was %+v", later, first)
	}
	other, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
	must(t, err)
	if _, err := other.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second stream on the one slot: %v", err)
	}
	close(h.release)
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("the stream's end: %v", err)
	}
	if held := heldOn(t, c, cfg).Held; held != 0 {
		t.Fatalf("held after the stream ended: %d", held)
	}
}

func TestGRPCMaxInFlightReleasesTheSlotWhenTheHandlerPanics(t *testing.T) {
	f, c, h := onFakeLeases(t, 1)
	hc := serveSlowHealth(t, c, ratelimit.GRPCOptions{InFlight: "inflight"}, h)
	panicking := &healthpb.HealthCheckRequest{Service: "panic"}
	if _, err := hc.Check(ctx(t), panicking); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking call: %v", err)
	}
	if held := f.held("inflight", "127.0.0.1"); held != 0 {
		t.Fatalf("a panicking call kept its slot: held %d", held)
	}
	if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	stream, err := hc.Watch(ctx(t), panicking)
	must(t, err)
	_, err = stream.Recv()
	must(t, err)
	if _, err := stream.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking stream: %v", err)
	}
	if held := f.held("inflight", "127.0.0.1"); held != 0 {
		t.Fatalf("a panicking stream kept its slot: held %d", held)
	}
}

func TestGRPCMaxInFlightWithARateLimitSendsBothInOneAcquire(t *testing.T) {
	f, c, h := onFakeLeases(t, 2)
	cfg := &ratelimit.Config{Kind: ratelimit.Concurrency, Capacity: ratelimit.Ptr(2.0)}
	hc := serveSlowHealth(t, c, ratelimit.GRPCOptions{Limit: "api", InFlight: "inflight",
		InFlightConfig: cfg}, h)
	var md metadata.MD
	if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil ||
		firstOf(md.Get("ratelimit-limit")) != "2" || firstOf(md.Get("ratelimit-remaining")) != "1" {
		t.Fatalf("allowed: %v %v", err, md)
	}
	sent := f.acquires[0]
	if len(sent.Limits) != 2 || sent.Limits[0].Name != "inflight" || sent.Limits[1].Name != "api" ||
		sent.Limits[0].Config.GetKind().String() != "CONCURRENCY" || sent.Limits[1].Key != "127.0.0.1" {
		t.Fatalf("the Acquire: %v", sent)
	}
	if f.held("inflight", "127.0.0.1") != 0 {
		t.Fatal("the slot was not released after the call")
	}
}

func TestGRPCMaxInFlightFollowsTheFailurePolicy(t *testing.T) {
	f, c, h := onFakeLeases(t, 2)
	f.mu.Lock()
	f.acquireErr = status.Error(codes.Unavailable, "store unavailable")
	f.mu.Unlock()
	open := serveSlowHealth(t, c, ratelimit.GRPCOptions{InFlight: "inflight",
		OnUnavailable: ratelimit.FailOpen, Logger: discardLogger()}, h)
	closed := serveSlowHealth(t, c, ratelimit.GRPCOptions{InFlight: "inflight",
		Logger: discardLogger()}, h)
	req := &healthpb.HealthCheckRequest{}
	if _, err := open.Check(ctx(t), req); err != nil || len(h.started) != 1 {
		t.Fatalf("FailOpen: %v", err)
	}
	if _, err := closed.Check(ctx(t), req); status.Code(err) != codes.Unavailable ||
		len(h.started) != 1 {
		t.Fatalf("FailClosed: %v", err)
	}
	f.mu.Lock()
	f.acquireErr = status.Error(codes.NotFound, "limits[0].name: no limit named inflight")
	f.mu.Unlock()
	if _, err := open.Check(ctx(t), req); status.Code(err) != codes.Internal ||
		len(h.started) != 1 {
		t.Fatalf("a configuration error with FailOpen: %v", err)
	}
}
