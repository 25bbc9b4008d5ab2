package ratelimit_test

// What the middleware and the interceptors do when the service fails: only an unavailable
// service (UNAVAILABLE, DEADLINE_EXCEEDED) follows the Policy; any other error is a
// configuration error, answered 500 / INTERNAL whatever the Policy. Also what they require at
// construction (a limit name, a known Policy) and do with an empty key or one not valid UTF-8.

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// serviceErrors are the statuses a call to the service can fail with, and whether each is the
// service being unavailable (which follows the Policy) rather than a configuration error.
var serviceErrors = []struct {
	code        codes.Code
	unavailable bool
}{
	{codes.Unavailable, true},
	{codes.DeadlineExceeded, true},
	{codes.NotFound, false},
	{codes.InvalidArgument, false},
	{codes.PermissionDenied, false},
	{codes.Unauthenticated, false},
	{codes.FailedPrecondition, false},
	{codes.ResourceExhausted, false},
	{codes.Internal, false},
	{codes.Unknown, false},
	{codes.Canceled, false},
	{codes.Unimplemented, false},
}

func TestHTTPMiddlewareOnlyAvailabilityErrorsFollowThePolicy(t *testing.T) {
	for _, e := range serviceErrors {
		t.Run(e.code.String(), func(t *testing.T) {
			f := &fakeService{err: status.Error(e.code, "the service says no")}
			c, err := ratelimit.Dial(serveFake(t, f), ratelimit.WithCheckAttempts(1))
			must(t, err)
			defer c.Close()
			for _, policy := range []ratelimit.Policy{ratelimit.FailOpen, ratelimit.FailClosed} {
				next := &handler{}
				h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api", OnUnavailable: policy,
					Logger: discardLogger()})(next)
				rec := get(h, "192.0.2.1:1")
				want, wantCalls := http.StatusInternalServerError, 0
				if e.unavailable && policy == ratelimit.FailOpen {
					want, wantCalls = http.StatusOK, 1
				} else if e.unavailable {
					want = http.StatusServiceUnavailable
				}
				if rec.Code != want || next.calls != wantCalls {
					t.Errorf("%v with %v: answered %d (handler ran %d times), want %d (%d)",
						e.code, policy, rec.Code, next.calls, want, wantCalls)
				}
			}
		})
	}
}

func TestGRPCInterceptorOnlyAvailabilityErrorsFollowThePolicy(t *testing.T) {
	for _, e := range serviceErrors {
		t.Run(e.code.String(), func(t *testing.T) {
			f := &fakeService{err: status.Error(e.code, "the service says no")}
			c, err := ratelimit.Dial(serveFake(t, f), ratelimit.WithCheckAttempts(1))
			must(t, err)
			defer c.Close()
			for _, policy := range []ratelimit.Policy{ratelimit.FailOpen, ratelimit.FailClosed} {
				hc := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "api", OnUnavailable: policy,
					Logger: discardLogger()})
				_, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{})
				want := codes.Internal
				if e.unavailable && policy == ratelimit.FailOpen {
					want = codes.OK
				} else if e.unavailable {
					want = codes.Unavailable
				}
				if status.Code(err) != want {
					t.Errorf("%v with %v: answered %v, want %v", e.code, policy, err, want)
				}
			}
		})
	}
}

// A misspelt limit name against the real server (NOT_FOUND) is answered 500 / INTERNAL, never
// let through, even with FailOpen.
func TestMisspeltLimitNameIs500EvenWhenFailingOpen(t *testing.T) {
	s := startServer(t)
	c := s.client()
	for _, policy := range []ratelimit.Policy{ratelimit.FailOpen, ratelimit.FailClosed} {
		next := &handler{}
		h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "apii", OnUnavailable: policy,
			Logger: discardLogger()})(next)
		if rec := get(h, "192.0.2.1:1"); rec.Code != http.StatusInternalServerError ||
			next.calls != 0 {
			t.Fatalf("%v, misspelt limit: %d, handler ran %d times", policy, rec.Code, next.calls)
		}
		hc := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "apii", OnUnavailable: policy,
			Logger: discardLogger()})
		if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}); status.Code(err) !=
			codes.Internal {
			t.Fatalf("%v, misspelt limit through the interceptor: %v", policy, err)
		}
	}
}

// recoverPanic runs f and returns what it panicked with ("" when it did not).
func recoverPanic(f func()) (message string) {
	defer func() {
		if r := recover(); r != nil {
			message = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// No default limit name: two routes or services share a counter only when they name the same
// limit. A middleware without one is refused when it is built, naming the option.
func TestMiddlewareAndInterceptorsRequireALimitName(t *testing.T) {
	c, err := ratelimit.Dial("127.0.0.1:1")
	must(t, err)
	defer c.Close()
	if msg := recoverPanic(func() { c.HTTPMiddleware(ratelimit.HTTPOptions{}) }); !strings.Contains(
		msg, "HTTPOptions.Limit is required") {
		t.Fatalf("HTTPMiddleware without a limit name: panic %q", msg)
	}
	if msg := recoverPanic(func() { c.UnaryServerInterceptor(ratelimit.GRPCOptions{}) }); !strings.Contains(
		msg, "GRPCOptions.Limit is required") {
		t.Fatalf("UnaryServerInterceptor without a limit name: panic %q", msg)
	}
	if msg := recoverPanic(func() { c.StreamServerInterceptor(ratelimit.GRPCOptions{}) }); !strings.Contains(
		msg, "GRPCOptions.Limit is required") {
		t.Fatalf("StreamServerInterceptor without a limit name: panic %q", msg)
	}
}

// The failure mode is a Policy, FailClosed unless set; a value that is neither constant is
// refused when the middleware is built.
func TestFailurePolicyIsTypedAndClosedByDefault(t *testing.T) {
	if (ratelimit.HTTPOptions{}).OnUnavailable != ratelimit.FailClosed ||
		(ratelimit.GRPCOptions{}).OnUnavailable != ratelimit.FailClosed {
		t.Fatal("the default Policy is not FailClosed")
	}
	if ratelimit.FailClosed.String() != "FailClosed" || ratelimit.FailOpen.String() != "FailOpen" {
		t.Fatalf("Policy names: %v %v", ratelimit.FailClosed, ratelimit.FailOpen)
	}
	c, err := ratelimit.Dial("127.0.0.1:1")
	must(t, err)
	defer c.Close()
	msg := recoverPanic(func() {
		c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api", OnUnavailable: ratelimit.Policy(7)})
	})
	if !strings.Contains(msg, "HTTPOptions.OnUnavailable: Policy(7)") {
		t.Fatalf("an unknown Policy: panic %q", msg)
	}
	msg = recoverPanic(func() {
		c.UnaryServerInterceptor(ratelimit.GRPCOptions{Limit: "api", OnUnavailable: -1})
	})
	if !strings.Contains(msg, "GRPCOptions.OnUnavailable: Policy(-1)") {
		t.Fatalf("an unknown Policy: panic %q", msg)
	}
}

// A request whose key is empty has no counter to take from: 400 / INVALID_ARGUMENT, without a
// call to the service and without reaching the handler.
func TestMiddlewareAnswersAnEmptyKeyWithoutAskingTheService(t *testing.T) {
	f := &fakeService{}
	c, err := ratelimit.Dial(serveFake(t, f))
	must(t, err)
	defer c.Close()
	next := &handler{}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api",
		Key: func(r *http.Request) string { return r.Header.Get("X-Api-Key") }})(next)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusBadRequest || next.calls != 0 || f.consumes.Load() != 0 {
		t.Fatalf("request without a key: %d, handler ran %d times, %d Consume calls", rec.Code,
			next.calls, f.consumes.Load())
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Api-Key", "k")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || next.calls != 1 || f.consumes.Load() != 1 {
		t.Fatalf("request with a key: %d, handler ran %d times", rec.Code, next.calls)
	}

	hc := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "api",
		Key: func(context.Context, string) string { return "" }})
	if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}); status.Code(err) !=
		codes.InvalidArgument || f.consumes.Load() != 1 {
		t.Fatalf("call without a key: %v, %d Consume calls", err, f.consumes.Load())
	}
}

// keyNotUTF8 is a key header's value that is not valid UTF-8: net/http takes such bytes
// (obs-text) in a header value, and gRPC any bytes in binary ("-bin") metadata.
const keyNotUTF8 = "\xff"

// Clients, on fakes, for the middlewares' bad-key tests: one for a rate limit, one for a
// concurrency limit (InFlight, sent as an Acquire).
func badKeyClients(t *testing.T) (*fakeService, *fakeLeases, []struct {
	c    *ratelimit.Client
	name string
	http ratelimit.HTTPOptions
	grpc ratelimit.GRPCOptions
}) {
	t.Helper()
	f, leases := &fakeService{}, newFakeLeases(2)
	onRate, err := ratelimit.Dial(serveFake(t, f))
	must(t, err)
	t.Cleanup(func() { _ = onRate.Close() })
	onLeases, err := ratelimit.Dial(serveLeases(t, leases))
	must(t, err)
	t.Cleanup(func() { _ = onLeases.Close() })
	return f, leases, []struct {
		c    *ratelimit.Client
		name string
		http ratelimit.HTTPOptions
		grpc ratelimit.GRPCOptions
	}{
		{onRate, "Limit", ratelimit.HTTPOptions{Limit: "api"}, ratelimit.GRPCOptions{Limit: "api"}},
		{onLeases, "InFlight", ratelimit.HTTPOptions{InFlight: "inflight"},
			ratelimit.GRPCOptions{InFlight: "inflight"}},
	}
}

// A key that is not valid UTF-8, or longer than the service takes, comes from the request, as an
// empty one does: 400 naming it,
// whatever the Policy, without reaching the handler and without a call to the service (the
// client refuses to send a string that is not UTF-8) — not 500 as a configuration error, and
// never let through by FailOpen. It is no error of the service: OnError is not told, nothing
// is logged.
func TestHTTPMiddlewareAnswersAKeyItCannotSend400WithoutAskingTheService(t *testing.T) {
	f, leases, clients := badKeyClients(t)
	var logs lockedBuffer
	var told atomic.Int64
	for _, cl := range clients {
		for _, policy := range []ratelimit.Policy{ratelimit.FailOpen, ratelimit.FailClosed} {
			next := &handler{}
			opts := cl.http
			opts.Key = func(r *http.Request) string { return r.Header.Get("X-Api-Key") }
			opts.OnUnavailable, opts.Logger = policy, log.New(&logs, "", 0)
			opts.OnError = func(*http.Request, error) { told.Add(1) }
			h := cl.c.HTTPMiddleware(opts)(next)
			for key, why := range map[string]string{
				keyNotUTF8:   "rate limit key is not valid UTF-8",
				"k\xc3":      "rate limit key is not valid UTF-8",
				"ok-\xff-ok": "rate limit key is not valid UTF-8",
				// Longer than the service takes: refused as it would refuse it, not a 500.
				strings.Repeat("k", ratelimit.MaxKeyBytes+1): "rate limit key is longer than 1024 bytes",
			} {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.Header.Set("X-Api-Key", key)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusBadRequest || next.calls != 0 ||
					!strings.Contains(rec.Body.String(), why) {
					t.Errorf("%s, %v, key %q: %d %q, handler ran %d times", cl.name, policy, key,
						rec.Code, rec.Body.String(), next.calls)
				}
			}
		}
	}
	acquires, _, _ := leases.counts()
	if consumes := f.consumes.Load(); consumes != 0 || acquires != 0 || told.Load() != 0 ||
		logs.lines()[0] != "" {
		t.Fatalf("%d Consume and %d Acquire calls, OnError told %d times, logged %q", consumes,
			acquires, told.Load(), logs.lines())
	}
}

// The same through the gRPC interceptors, unary and streaming: INVALID_ARGUMENT naming the key,
// for a key from binary metadata.
func TestGRPCInterceptorAnswersAKeyNotUTF8InvalidArgumentWithoutAskingTheService(t *testing.T) {
	f, leases, clients := badKeyClients(t)
	var logs lockedBuffer
	var told atomic.Int64
	h := newSlowHealth()
	close(h.release)
	call := metadata.AppendToOutgoingContext(ctx(t), "x-api-key-bin", keyNotUTF8)
	for _, cl := range clients {
		for _, policy := range []ratelimit.Policy{ratelimit.FailOpen, ratelimit.FailClosed} {
			opts := cl.grpc
			opts.Key = func(ctx context.Context, _ string) string {
				md, _ := metadata.FromIncomingContext(ctx)
				return firstOf(md.Get("x-api-key-bin"))
			}
			opts.OnUnavailable, opts.Logger = policy, log.New(&logs, "", 0)
			opts.OnError = func(context.Context, string, error) { told.Add(1) }
			hc := serveSlowHealth(t, cl.c, opts, h)
			_, unary := hc.Check(call, &healthpb.HealthCheckRequest{})
			var streamed error
			if stream, err := hc.Watch(call, &healthpb.HealthCheckRequest{}); err != nil {
				streamed = err
			} else {
				_, streamed = stream.Recv()
			}
			for what, err := range map[string]error{"unary": unary, "stream": streamed} {
				if status.Code(err) != codes.InvalidArgument ||
					status.Convert(err).Message() != "rate limit key is not valid UTF-8" {
					t.Errorf("%s, %v, %s call: %v", cl.name, policy, what, err)
				}
			}
		}
	}
	acquires, _, _ := leases.counts()
	if consumes := f.consumes.Load(); consumes != 0 || acquires != 0 || len(h.started) != 0 ||
		told.Load() != 0 || logs.lines()[0] != "" {
		t.Fatalf("%d Consume and %d Acquire calls, %d handlers ran, OnError told %d times, "+
			"logged %q", consumes, acquires, len(h.started), told.Load(), logs.lines())
	}
	// A valid key in the same metadata is limited as usual.
	ok := metadata.AppendToOutgoingContext(ctx(t), "x-api-key-bin", "k\xc3\xa9")
	hc := serveSlowHealth(t, clients[0].c, ratelimit.GRPCOptions{Limit: "api",
		Key: func(ctx context.Context, _ string) string {
			md, _ := metadata.FromIncomingContext(ctx)
			return firstOf(md.Get("x-api-key-bin"))
		}}, h)
	if _, err := hc.Check(ok, &healthpb.HealthCheckRequest{}); err != nil ||
		f.consumes.Load() != 1 || len(h.started) != 1 {
		t.Fatalf("a valid key: %v, %d Consume calls", err, f.consumes.Load())
	}
}

// A limit name that is not valid UTF-8 comes from the options, not the request: a configuration
// error, 500 / INTERNAL even with FailOpen, never let through (the client refuses to send it).
func TestALimitNameNotUTF8Is500EvenWhenFailingOpen(t *testing.T) {
	f, _, clients := badKeyClients(t)
	next := &handler{}
	h := clients[0].c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api\xff",
		OnUnavailable: ratelimit.FailOpen, Logger: discardLogger()})(next)
	if rec := get(h, "192.0.2.1:1"); rec.Code != http.StatusInternalServerError ||
		next.calls != 0 {
		t.Fatalf("a limit name not UTF-8: %d, handler ran %d times", rec.Code, next.calls)
	}
	hc := serveHealth(t, clients[0].c, ratelimit.GRPCOptions{Limit: "api\xff",
		OnUnavailable: ratelimit.FailOpen, Logger: discardLogger()})
	if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}); status.Code(err) !=
		codes.Internal || f.consumes.Load() != 0 {
		t.Fatalf("a limit name not UTF-8 through the interceptor: %v, %d Consume calls", err,
			f.consumes.Load())
	}
}
