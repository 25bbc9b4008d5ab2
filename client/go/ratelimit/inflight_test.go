package ratelimit_test

import (
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// slowHandler counts the requests running at once (and the most ever) and blocks each until
// `release` is closed.
type slowHandler struct {
	running, most atomic.Int64
	started       chan struct{}
	release       chan struct{}
}

func newSlowHandler() *slowHandler {
	return &slowHandler{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (h *slowHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := h.running.Add(1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	h.started <- struct{}{}
	<-h.release
	h.running.Add(-1)
	w.WriteHeader(http.StatusOK)
}

// maxInFlightExactlyTwo sends five concurrent slow requests of one client through a middleware
// whose concurrency limit has two slots: exactly two run, three are answered 429 with
// Retry-After; once the two end, their slots are free again. held says how many slots the
// service holds for the key.
func maxInFlightExactlyTwo(t *testing.T, h http.Handler, slow *slowHandler, held func() uint64) {
	t.Helper()
	const n = 5
	codes := make(chan *httpAnswer, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := get(h, "192.0.2.9:1000")
			codes <- &httpAnswer{rec.Code, rec.Header().Get("Retry-After")}
		}()
	}
	// Two run; the three others are answered 429 without running.
	started, denied := 0, 0
	for started < 2 || denied < n-2 {
		select {
		case <-slow.started:
			started++
		case a := <-codes:
			if a.code != http.StatusTooManyRequests {
				close(slow.release)
				t.Fatalf("a request beyond the two slots: %d", a.code)
			}
			if s, err := strconv.Atoi(a.retryAfter); err != nil || s < 0 {
				t.Fatalf("429 without Retry-After: %q", a.retryAfter)
			}
			denied++
		case <-time.After(10 * time.Second):
			close(slow.release)
			t.Fatalf("%d requests started, %d denied", started, denied)
		}
	}
	if slow.running.Load() != 2 || held() != 2 {
		t.Fatalf("running %d, held %d; want 2 and 2", slow.running.Load(), held())
	}
	close(slow.release)
	wg.Wait()
	for i := 0; i < 2; i++ {
		if a := <-codes; a.code != http.StatusOK {
			t.Fatalf("a request holding a slot: %d", a.code)
		}
	}
	if slow.most.Load() != 2 || held() != 0 {
		t.Fatalf("most in flight %d, held after %d; want 2 and 0", slow.most.Load(), held())
	}
	if rec := get(h, "192.0.2.9:1000"); rec.Code != http.StatusOK {
		t.Fatalf("a request after the slots came back: %d", rec.Code)
	}
}

type httpAnswer struct {
	code       int
	retryAfter string
}

func TestMaxInFlightHoldsTwoSlotsAndAnswersTheRest429(t *testing.T) {
	f := newFakeLeases(2)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	slow := newSlowHandler()
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight"})(slow)
	maxInFlightExactlyTwo(t, h, slow, func() uint64 { return f.held("inflight", "192.0.2.9") })
}

func TestMaxInFlightReleasesTheSlotWhenTheHandlerPanics(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight"})(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler failed") }))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic was swallowed")
			}
		}()
		get(h, "192.0.2.9:1")
	}()
	if held := f.held("inflight", "192.0.2.9"); held != 0 {
		t.Fatalf("a panicking request kept its slot: held %d", held)
	}
}

func TestMaxInFlightWithARateLimitSendsBothInOneAcquire(t *testing.T) {
	f := newFakeLeases(2)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	next := &handler{}
	cfg := &ratelimit.Config{Kind: ratelimit.Concurrency, Capacity: ratelimit.Ptr(2.0)}
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{Limit: "api", InFlight: "inflight",
		InFlightConfig: cfg})(next)
	rec := get(h, "192.0.2.9:1")
	if rec.Code != http.StatusOK || next.calls != 1 || rec.Header().Get("RateLimit-Limit") != "2" ||
		rec.Header().Get("RateLimit-Remaining") != "1" {
		t.Fatalf("allowed: %d %v", rec.Code, rec.Header())
	}
	sent := f.acquires[0]
	if len(sent.Limits) != 2 || sent.Limits[0].Name != "inflight" || sent.Limits[1].Name != "api" ||
		sent.Limits[0].Config.GetKind().String() != "CONCURRENCY" || sent.Limits[0].Config.Period != nil ||
		sent.Limits[1].Key != "192.0.2.9" {
		t.Fatalf("the Acquire: %v", sent)
	}
	if f.held("inflight", "192.0.2.9") != 0 {
		t.Fatal("the slot was not released after the response")
	}
}

func TestMaxInFlightFollowsTheFailurePolicy(t *testing.T) {
	f := newFakeLeases(2)
	f.acquireErr = status.Error(codes.Unavailable, "store unavailable")
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	quiet := log.New(io.Discard, "", 0)
	next := &handler{}
	open := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight",
		OnUnavailable: ratelimit.FailOpen, Logger: quiet})(next)
	closed := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight", Logger: quiet})(next)
	if rec := get(open, "192.0.2.9:1"); rec.Code != http.StatusOK || next.calls != 1 {
		t.Fatalf("FailOpen: %d", rec.Code)
	}
	if rec := get(closed, "192.0.2.9:1"); rec.Code != http.StatusServiceUnavailable ||
		next.calls != 1 {
		t.Fatalf("FailClosed: %d", rec.Code)
	}
	f.acquireErr = status.Error(codes.NotFound, "limits[0].name: no limit named inflight")
	if rec := get(open, "192.0.2.9:1"); rec.Code != http.StatusInternalServerError ||
		next.calls != 1 {
		t.Fatalf("a configuration error with FailOpen: %d", rec.Code)
	}
}
