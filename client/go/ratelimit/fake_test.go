package ratelimit_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// fakeService answers UNAVAILABLE to the first `failures` calls of each method, then allows;
// with `block`, it answers nothing until the call's context ends; with `err`, it answers every
// call with that error. Settle always succeeds, returning nothing; it records the settlements.
type fakeService struct {
	pb.UnimplementedRateLimitServiceServer
	failures int64
	block    bool
	err      error
	// response, when set, is the answer (else: allowed).
	response *pb.RateLimitResponse
	checks   atomic.Int64
	consumes atomic.Int64
	reserves atomic.Int64
	settles  atomic.Int64

	mu          sync.Mutex
	settlements []*pb.Settlement
}

func (f *fakeService) answer(ctx context.Context, calls *atomic.Int64) (
	*pb.RateLimitResponse, error) {
	n := calls.Add(1)
	if f.block {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	if n <= f.failures {
		return nil, status.Error(codes.Unavailable, "store unavailable")
	}
	if f.response != nil {
		return f.response, nil
	}
	return &pb.RateLimitResponse{Allowed: true, DeniedBy: -1}, nil
}

func (f *fakeService) Check(ctx context.Context, _ *pb.RateLimitRequest) (
	*pb.RateLimitResponse, error) {
	return f.answer(ctx, &f.checks)
}

func (f *fakeService) Consume(ctx context.Context, _ *pb.RateLimitRequest) (
	*pb.RateLimitResponse, error) {
	return f.answer(ctx, &f.consumes)
}

func (f *fakeService) Reserve(ctx context.Context, _ *pb.RateLimitRequest) (
	*pb.RateLimitResponse, error) {
	return f.answer(ctx, &f.reserves)
}

func (f *fakeService) Settle(_ context.Context, req *pb.SettleRequest) (*pb.SettleResponse,
	error) {
	f.settles.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settlements = append(f.settlements, req.Settlements...)
	return &pb.SettleResponse{}, nil
}

// settled is the settlements of every Settle so far.
func (f *fakeService) settled() []*pb.Settlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.Settlement(nil), f.settlements...)
}

// serveFake serves f on a free loopback port until the test ends.
func serveFake(t *testing.T, f *fakeService) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func TestOnlyCheckIsRetried(t *testing.T) {
	f := &fakeService{failures: 2}
	c, err := ratelimit.Dial(serveFake(t, f))
	must(t, err)
	defer c.Close()

	r, err := c.Check(ctx(t), one("api", "k", 1))
	if err != nil || !r.Allowed || f.checks.Load() != 3 {
		t.Fatalf("Check after two UNAVAILABLE: %v, %d calls", err, f.checks.Load())
	}
	if _, err := c.Consume(ctx(t), one("api", "k", 1)); status.Code(err) != codes.Unavailable ||
		f.consumes.Load() != 1 {
		t.Fatalf("Consume: %v after %d calls; want UNAVAILABLE after exactly one", err,
			f.consumes.Load())
	}
	if _, err := c.Reserve(ctx(t), one("api", "k", 1)); status.Code(err) != codes.Unavailable ||
		f.reserves.Load() != 1 {
		t.Fatalf("Reserve: %v after %d calls; want UNAVAILABLE after exactly one", err,
			f.reserves.Load())
	}

	f2 := &fakeService{failures: 5}
	c2, err := ratelimit.Dial(serveFake(t, f2), ratelimit.WithCheckAttempts(2))
	must(t, err)
	defer c2.Close()
	if _, err := c2.Check(ctx(t), one("api", "k", 1)); status.Code(err) != codes.Unavailable ||
		f2.checks.Load() != 2 {
		t.Fatalf("Check with 2 attempts: %v after %d calls", err, f2.checks.Load())
	}
}

func TestCallsHaveADeadlineByDefault(t *testing.T) {
	f := &fakeService{block: true}
	c, err := ratelimit.Dial(serveFake(t, f), ratelimit.WithTimeout(200*time.Millisecond),
		ratelimit.WithCheckAttempts(1))
	must(t, err)
	defer c.Close()
	// The caller's context allows 20 s: the client's own deadline ends the call before.
	caller, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.Consume(caller, one("api", "k", 1))
	if status.Code(err) != codes.DeadlineExceeded || caller.Err() != nil {
		t.Fatalf("Consume against a server that never answers: %v (caller's context: %v)", err,
			caller.Err())
	}
	if ratelimit.DefaultTimeout != time.Second {
		t.Fatalf("the documented default timeout is 1s, got %v", ratelimit.DefaultTimeout)
	}
	if _, err := ratelimit.Dial("127.0.0.1:1", ratelimit.WithTimeout(0)); err == nil {
		t.Fatal("Dial accepted a zero timeout")
	}
}

// A server started with --failure_policy=open allows without evaluating when its store fails:
// the result says so, and the middleware lets the request through without RateLimit headers
// (there are no values to report).
func TestFailedOpenAnswerIsReportedAndPassesTheMiddleware(t *testing.T) {
	f := &fakeService{response: &pb.RateLimitResponse{Allowed: true, DeniedBy: -1,
		FailedOpen: true, Results: []*pb.LimitResult{{Name: "api", Key: "192.0.2.1",
			Allowed: true}}}}
	c, err := ratelimit.Dial(serveFake(t, f))
	must(t, err)
	defer c.Close()
	r, err := c.Consume(ctx(t), one("api", "k", 1))
	must(t, err)
	if !r.Allowed || !r.FailedOpen {
		t.Fatalf("failed-open answer: %+v", r)
	}
	next := &handler{}
	rec := get(c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api"})(next), "192.0.2.1:1")
	if rec.Code != http.StatusOK || next.calls != 1 || rec.Header().Get("RateLimit-Limit") != "" ||
		rec.Header().Get("RateLimit-Remaining") != "" {
		t.Fatalf("failed-open answer through the middleware: %d %v", rec.Code, rec.Header())
	}
}
