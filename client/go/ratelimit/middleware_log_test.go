package ratelimit_test

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"ratelimit.dev/client/go/ratelimit"
)

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// lockedBuffer is a log destination safe for the concurrent writes of a gRPC server.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n")
}

// A configuration error is logged: one line naming the status and the server's message, not
// one per request.
func TestMisspeltLimitNameIsLoggedOnceNotPerRequest(t *testing.T) {
	s := startServer(t)
	c := s.client()
	var out lockedBuffer
	next := &handler{}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "apii", OnUnavailable: ratelimit.FailOpen,
		Logger: log.New(&out, "", 0)})(next)
	for i := 0; i < 20; i++ {
		if rec := get(h, "192.0.2.1:1"); rec.Code != http.StatusInternalServerError {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	_, err := c.Consume(ctx(t), one("apii", "k", 1))
	var e *ratelimit.Error
	if !errors.As(err, &e) || e.Code != codes.NotFound {
		t.Fatalf("Consume of a misspelt limit: %v", err)
	}
	lines := out.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], `limit "apii": NOT_FOUND: `+e.Message) ||
		!strings.Contains(lines[0], "answered 500") {
		t.Fatalf("log of 20 requests with a misspelt limit: %q", lines)
	}

	var grpcOut lockedBuffer
	hc := serveHealth(t, c, ratelimit.GRPCOptions{Limit: "apii",
		Logger: log.New(&grpcOut, "", 0)})
	for i := 0; i < 20; i++ {
		_, _ = hc.Check(ctx(t), &healthpb.HealthCheckRequest{})
	}
	lines = grpcOut.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], `gRPC interceptor, limit "apii": NOT_FOUND: `) ||
		!strings.Contains(lines[0], "answered INTERNAL") {
		t.Fatalf("log of 20 calls with a misspelt limit: %q", lines)
	}
}

// An outage is logged too, saying what the request was answered (let through by FailOpen).
func TestAnOutageIsLoggedWithWhatThePolicyDid(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithCheckAttempts(1))
	s.stop()
	var out lockedBuffer
	next := &handler{}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api", OnUnavailable: ratelimit.FailOpen,
		Logger: log.New(&out, "", 0)})(next)
	for i := 0; i < 5; i++ {
		if rec := get(h, "192.0.2.1:1"); rec.Code != http.StatusOK {
			t.Fatalf("fail-open with the server stopped: %d", rec.Code)
		}
	}
	lines := out.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "UNAVAILABLE") ||
		!strings.Contains(lines[0], "let through (FailOpen)") {
		t.Fatalf("log of an outage: %q", lines)
	}
}

// The README's middleware example: a request without X-Api-Key is limited by its client IP,
// not answered 500.
func TestREADMEMiddlewareExampleLimitsRequestsWithoutAKeyByIP(t *testing.T) {
	s := startServer(t)
	c := s.client()
	next := &handler{}
	limit := c.HTTPMiddleware(ratelimit.HTTPOptions{
		Limit: "api",
		Key: func(r *http.Request) string { // the API key; without one, the client's IP
			if k := r.Header.Get("X-Api-Key"); k != "" {
				return "key:" + k
			}
			return "ip:" + ratelimit.RemoteIP(r)
		},
	})(next)
	for i := 1; i <= 6; i++ {
		want := http.StatusOK
		if i == 6 {
			want = http.StatusTooManyRequests
		}
		if rec := get(limit, "192.0.2.9:1234"); rec.Code != want {
			t.Fatalf("request %d without X-Api-Key: %d, want %d", i, rec.Code, want)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.9:1234"
	req.Header.Set("X-Api-Key", "k1")
	rec := httptest.NewRecorder()
	limit.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || next.calls != 6 {
		t.Fatalf("a request with X-Api-Key from the same IP has its own counter: %d", rec.Code)
	}
}
