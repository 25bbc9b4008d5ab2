package ratelimit_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// A refusal of the middlewares' concurrency limit (InFlight) for want of a free slot says to
// retry after 1 s, not the server's retry time (when a lease expires if no holder releases it:
// the fake's leases live 30 s), since the middlewares release each slot as its request ends;
// the gRPC status says it is the concurrency limit's. A rate limit's refusal keeps the server's
// retry time and its wording.

func TestMaxInFlightRefusalRetriesAfterOneSecond(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	slow := newSlowHandler()
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight"})(slow)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		get(h, "192.0.2.9:1")
	}()
	defer wg.Wait()
	defer close(slow.release)
	<-slow.started
	rec := get(h, "192.0.2.9:2")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		rec.Header().Get("RateLimit-Reset") != "1" ||
		rec.Header().Get("RateLimit-Remaining") != "0" || rec.Header().Get("RateLimit-Limit") != "1" {
		t.Fatalf("a request finding no free slot: %d %v", rec.Code, rec.Header())
	}
}

func TestGRPCMaxInFlightRefusalRetriesAfterOneSecondAndNamesTheLimit(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	h := newSlowHealth()
	hc := serveSlowHealth(t, c, ratelimit.GRPCOptions{InFlight: "grpcstream"}, h)
	defer close(h.release)
	holder, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
	must(t, err)
	_, err = holder.Recv()
	must(t, err)
	<-h.started
	const want = "max in flight reached for grpcstream: NO_FREE_SLOTS"
	var md metadata.MD
	_, err = hc.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	delay, ok := retryDelay(err)
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != want ||
		!ok || delay <= 0 || delay > time.Second || firstOf(md.Get("retry-after")) != "1" ||
		firstOf(md.Get("ratelimit-reset")) != "1" {
		t.Fatalf("a call finding no free slot: %v (retry info %v %v), headers %v", err, delay,
			ok, md)
	}
	stream, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
	must(t, err)
	_, err = stream.Recv()
	if delay, ok := retryDelay(err); status.Code(err) != codes.ResourceExhausted ||
		status.Convert(err).Message() != want || !ok || delay <= 0 || delay > time.Second {
		t.Fatalf("a stream finding no free slot: %v (retry info %v %v)", err, delay, ok)
	}
}

// cannedAcquire answers every Acquire with response.
type cannedAcquire struct {
	pb.UnimplementedRateLimitServiceServer
	response *pb.AcquireResponse
}

func (f *cannedAcquire) Acquire(context.Context, *pb.AcquireRequest) (*pb.AcquireResponse,
	error) {
	return f.response, nil
}

// verdict is one limit's answer in a canned Acquire: allowed (reason DENY_REASON_UNSPECIFIED),
// or denied with a retry in `retry` (none when 0).
type verdict struct {
	reason pb.DenyReason
	retry  time.Duration
}

// deniedAcquire is the server's refusal of an Acquire of a slot of "inflight" (2 slots) and a
// token of "api" (capacity 5), each limit answering its verdict: the top-level retry time is
// the latest of the denying limits' (none when one gives none), and the deciding limit the one
// giving none, else the one with the latest retry time.
func deniedAcquire(inflight, api verdict) *pb.AcquireResponse {
	now := time.Now()
	out := &pb.AcquireResponse{DeniedBy: -1}
	never := false
	var latest time.Duration
	for i, v := range []verdict{inflight, api} {
		r := &pb.LimitResult{Name: "inflight", Key: "k", Capacity: 2, Value: 1, Allowed: true}
		if i == 1 {
			r = &pb.LimitResult{Name: "api", Key: "k", Capacity: 5, Value: 3, Allowed: true}
		}
		out.Results = append(out.Results, r)
		if v.reason == pb.DenyReason_DENY_REASON_UNSPECIFIED {
			continue
		}
		r.Allowed, r.Reason, r.Value = false, v.reason, 0
		switch {
		case never:
		case v.retry == 0:
			never, out.DeniedBy, out.Reason = true, int32(i), v.reason
		case v.retry > latest:
			latest, out.DeniedBy, out.Reason = v.retry, int32(i), v.reason
		}
		if v.retry > 0 {
			r.RetryAt, r.RetryAfter = timestamppb.New(now.Add(v.retry)), durationpb.New(v.retry)
		}
	}
	if !never {
		out.RetryAt, out.RetryAfter = timestamppb.New(now.Add(latest)), durationpb.New(latest)
	}
	return out
}

// The retry time and wording of each kind of refusal, through both middlewares, with InFlight
// and Limit.
func TestMaxInFlightRefusalsOfTheSlotAndOfTheRateLimit(t *testing.T) {
	const noSlot, noToken = pb.DenyReason_NO_FREE_SLOTS, pb.DenyReason_INSUFFICIENT_TOKENS
	cases := []struct {
		name           string
		inflight, api  verdict
		retryAfter     string        // Retry-After and RateLimit-Reset ("": none)
		delay          time.Duration // RetryInfo (0: none)
		limit, message string        // RateLimit-Limit, gRPC status message
	}{
		{"no free slot", verdict{noSlot, 30 * time.Second}, verdict{}, "1", time.Second, "2",
			"max in flight reached for inflight: NO_FREE_SLOTS"},
		{"no free slot soon", verdict{noSlot, 300 * time.Millisecond}, verdict{}, "1",
			300 * time.Millisecond, "2", "max in flight reached for inflight: NO_FREE_SLOTS"},
		{"no token", verdict{}, verdict{noToken, 40 * time.Second}, "40", 40 * time.Second, "5",
			"rate limit api exceeded: INSUFFICIENT_TOKENS"},
		{"neither, the token later", verdict{noSlot, 30 * time.Second},
			verdict{noToken, 5 * time.Second}, "5", 5 * time.Second, "5",
			"rate limit api exceeded: INSUFFICIENT_TOKENS"},
		{"neither, the token sooner", verdict{noSlot, 30 * time.Second},
			verdict{noToken, 400 * time.Millisecond}, "1", time.Second, "2",
			"max in flight reached for inflight: NO_FREE_SLOTS"},
		{"the slot blocked", verdict{pb.DenyReason_BLOCKED, 0}, verdict{}, "", 0, "2",
			"max in flight inflight refused: BLOCKED"},
		{"the token blocked", verdict{noSlot, 30 * time.Second}, verdict{pb.DenyReason_BLOCKED, 0},
			"", 0, "5", "rate limit api exceeded: BLOCKED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			srv := grpc.NewServer()
			pb.RegisterRateLimitServiceServer(srv,
				&cannedAcquire{response: deniedAcquire(tc.inflight, tc.api)})
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)
			c, err := ratelimit.Dial(lis.Addr().String())
			must(t, err)
			defer c.Close()

			next := &handler{}
			rec := get(c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api",
				InFlight: "inflight"})(next), "192.0.2.9:1")
			if rec.Code != http.StatusTooManyRequests || next.calls != 0 ||
				rec.Header().Get("Retry-After") != tc.retryAfter ||
				rec.Header().Get("RateLimit-Reset") != tc.retryAfter ||
				rec.Header().Get("RateLimit-Limit") != tc.limit ||
				rec.Header().Get("RateLimit-Remaining") != "0" {
				t.Fatalf("HTTP: %d %v", rec.Code, rec.Header())
			}

			h := newSlowHealth()
			close(h.release)
			hc := serveSlowHealth(t, c, ratelimit.GRPCOptions{Limit: "api",
				InFlight: "inflight"}, h)
			var md metadata.MD
			_, err = hc.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			delay, _ := retryDelay(err)
			if status.Code(err) != codes.ResourceExhausted ||
				status.Convert(err).Message() != tc.message || delay != tc.delay ||
				firstOf(md.Get("retry-after")) != tc.retryAfter ||
				firstOf(md.Get("ratelimit-reset")) != tc.retryAfter ||
				firstOf(md.Get("ratelimit-limit")) != tc.limit || len(h.started) != 0 {
				t.Fatalf("gRPC: %v (retry info %v), headers %v", err, delay, md)
			}
		})
	}
}
