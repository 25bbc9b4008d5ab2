package ratelimit_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// handler counts the requests that reach it.
type handler struct{ calls int }

func (h *handler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.calls++
	w.WriteHeader(http.StatusOK)
}

func get(h http.Handler, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/work", nil)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHTTPMiddlewareAnswers200Then429WithHeaders(t *testing.T) {
	s := startServer(t)
	c := s.client()
	next := &handler{}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api"})(next)

	for i := 1; i <= 5; i++ {
		rec := get(h, "192.0.2.7:40000")
		if rec.Code != http.StatusOK || rec.Header().Get("RateLimit-Limit") != "5" ||
			rec.Header().Get("RateLimit-Remaining") != strconv.Itoa(5-i) ||
			rec.Header().Get("Retry-After") != "" {
			t.Fatalf("request %d: %d %v", i, rec.Code, rec.Header())
		}
	}
	rec := get(h, "192.0.2.7:40001") // same client IP, another port
	retryAfter, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if rec.Code != http.StatusTooManyRequests || err != nil ||
		retryAfter < 3590 || retryAfter > 3600 ||
		rec.Header().Get("RateLimit-Reset") != rec.Header().Get("Retry-After") ||
		rec.Header().Get("RateLimit-Remaining") != "0" || rec.Header().Get("RateLimit-Limit") != "5" {
		t.Fatalf("denied request: %d %v", rec.Code, rec.Header())
	}
	if next.calls != 5 {
		t.Fatalf("the handler ran %d times, want 5", next.calls)
	}
	// Another client IP has a counter of its own.
	if rec := get(h, "192.0.2.8:40000"); rec.Code != http.StatusOK {
		t.Fatalf("another client: %d", rec.Code)
	}

	// Options: a key function, a cost and an inline limit.
	keyed := c.HTTPMiddleware(ratelimit.HTTPOptions{
		Limit:  "uploads",
		Config: &ratelimit.Config{Kind: ratelimit.TokenBucket, Rate: 1, Period: time.Hour, Capacity: ratelimit.Ptr(10.0)},
		Key:    func(r *http.Request) string { return r.Header.Get("X-Api-Key") },
		Cost:   func(*http.Request) float64 { return 4 },
		Skip:   func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})(next)
	codes := []int{}
	for i := 0; i < 3; i++ {
		req := httptest.NewRequest(http.MethodPost, "/upload", nil)
		req.Header.Set("X-Api-Key", "key-1")
		rec := httptest.NewRecorder()
		keyed.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("cost 4 of 10: %v", codes)
	}
	health := httptest.NewRecorder()
	keyed.ServeHTTP(health, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if health.Code != http.StatusOK || health.Header().Get("RateLimit-Limit") != "" {
		t.Fatalf("skipped request: %d %v", health.Code, health.Header())
	}

	// A cost of 0 takes nothing (it took the server's default, 1).
	free := c.HTTPMiddleware(ratelimit.HTTPOptions{
		Limit:  "free",
		Config: &ratelimit.Config{Kind: ratelimit.TokenBucket, Rate: 1, Period: time.Hour, Capacity: ratelimit.Ptr(1.0)},
		Cost:   func(*http.Request) float64 { return 0 },
	})(next)
	for i := 0; i < 3; i++ {
		if rec := get(free, "192.0.2.9:40000"); rec.Code != http.StatusOK {
			t.Fatalf("free request %d: %d", i, rec.Code)
		}
	}
	res, err := c.Check(ctx(t), ratelimit.Request{Limits: []ratelimit.Limit{{Name: "free",
		Key: "192.0.2.9", Count: 1, Config: &ratelimit.Config{Kind: ratelimit.TokenBucket, Rate: 1,
			Period: time.Hour, Capacity: ratelimit.Ptr(1.0)}}}})
	must(t, err)
	if !res.Allowed || res.Limits[0].Value != 1 {
		t.Fatalf("after free requests the bucket holds %v (allowed %v), want 1", res.Limits[0].Value,
			res.Limits[0].Allowed)
	}
}

func TestHTTPMiddlewareFailOpenAndFailClosed(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithTimeout(2 * time.Second))
	next := &handler{}
	open := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api", OnUnavailable: ratelimit.FailOpen})(next)
	var seen []error
	closed := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api",
		OnError: func(_ *http.Request, err error) { seen = append(seen, err) }})(next)
	if rec := get(closed, "192.0.2.1:1"); rec.Code != http.StatusOK {
		t.Fatalf("with the server up: %d", rec.Code)
	}
	s.stop()
	if rec := get(open, "192.0.2.1:1"); rec.Code != http.StatusOK || next.calls != 2 {
		t.Fatalf("fail-open with the server stopped: %d, handler ran %d times", rec.Code, next.calls)
	}
	if rec := get(closed, "192.0.2.1:1"); rec.Code != http.StatusServiceUnavailable ||
		next.calls != 2 {
		t.Fatalf("fail-closed with the server stopped: %d, handler ran %d times", rec.Code,
			next.calls)
	}
	if len(seen) != 1 || status.Code(seen[0]) != codes.Unavailable {
		t.Fatalf("OnError saw %v", seen)
	}
}

func TestHTTPMiddlewareMisconfiguredLimitIs500(t *testing.T) {
	s := startServer(t)
	c := s.client()
	next := &handler{}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "no_such_limit",
		OnUnavailable: ratelimit.FailOpen})(next)
	if rec := get(h, "192.0.2.1:1"); rec.Code != http.StatusInternalServerError || next.calls != 0 {
		t.Fatalf("unknown limit: %d, handler ran %d times", rec.Code, next.calls)
	}
}

// serveHealth serves grpc.health.v1 behind the interceptor on a free port, and returns a
// client of it.
func serveHealth(t *testing.T, c *ratelimit.Client, opts ratelimit.GRPCOptions) healthpb.HealthClient {
	t.Helper()
	srv := grpc.NewServer(grpc.UnaryInterceptor(c.UnaryServerInterceptor(opts)),
		grpc.StreamInterceptor(c.StreamServerInterceptor(opts)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return serveAndDialHealth(t, srv)
}

// serveAndDialHealth serves srv (with a health service) on a free loopback port until the test
// ends, and returns a health client of it.
func serveAndDialHealth(t *testing.T, srv *grpc.Server) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.Dial(lis.Addr().String(), grpc.WithInsecure())
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func TestGRPCInterceptorAnswersResourceExhaustedWithRetryAfter(t *testing.T) {
	s := startServer(t)
	c := s.client()
	hc := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "api",
		Cost: func(context.Context, string) float64 { return 2 }})
	for i, remaining := range []string{"3", "1"} {
		var md metadata.MD
		if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := md.Get("ratelimit-remaining"); len(got) != 1 || got[0] != remaining ||
			md.Get("ratelimit-limit")[0] != "5" {
			t.Fatalf("call %d headers: %v", i+1, md)
		}
	}
	var md metadata.MD
	_, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v", err)
	}
	retryAfter, perr := strconv.Atoi(firstOf(md.Get("retry-after")))
	if perr != nil || retryAfter < 3590 || retryAfter > 3600 ||
		firstOf(md.Get("ratelimit-remaining")) != "1" {
		t.Fatalf("denied call headers: %v", md)
	}
	// Streams are limited too: one token per stream.
	stream, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
	must(t, err)
	if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream: %v", err)
	}
}

func TestGRPCInterceptorFailOpenAndFailClosed(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithTimeout(2 * time.Second))
	open := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "api", OnUnavailable: ratelimit.FailOpen})
	closed := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "api"})
	if _, err := closed.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("with the server up: %v", err)
	}
	s.stop()
	if _, err := open.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("fail-open with the server stopped: %v", err)
	}
	if _, err := closed.Check(ctx(t), &healthpb.HealthCheckRequest{}); status.Code(err) !=
		codes.Unavailable {
		t.Fatalf("fail-closed with the server stopped: %v", err)
	}
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
