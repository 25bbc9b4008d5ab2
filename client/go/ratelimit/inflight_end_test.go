package ratelimit_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// Max in flight gives each request's slot back before the end of its response is sent: a
// client that waits for each response before sending the next is never refused, even by a
// handler that goes on working after its response is complete.

// afterResponse is how long the test handlers go on working after their response is complete.
const afterResponse = 5 * time.Millisecond

// sequentially sends n requests to url one after the other, reading each answer to its end
// (and checking its body, when body is not nil), and returns the status codes that were not
// want, with their count.
func sequentially(t *testing.T, client *http.Client, method, url string, n, want int,
	body []byte) (refused int, answers []int) {
	t.Helper()
	for i := 0; i < n; i++ {
		req, err := http.NewRequest(method, url, nil)
		must(t, err)
		resp, err := client.Do(req)
		must(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		must(t, err)
		if resp.StatusCode != want {
			refused++
			answers = append(answers, resp.StatusCode)
			continue
		}
		if body != nil && !bytes.Equal(got, body) {
			t.Fatalf("request %d: a body of %d bytes, want %d", i, len(got), len(body))
		}
	}
	return refused, answers
}

// inFlightServer serves next behind a middleware with one slot of an inline concurrency limit
// (every request on the key `key`), on a free port; connections counts the connections it
// accepted.
func inFlightServer(t *testing.T, c *ratelimit.Client, key string, next http.Handler) (
	url string, connections *atomic.Int64) {
	t.Helper()
	mw := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight",
		InFlightConfig: concurrency(1), Key: func(*http.Request) string { return key }})
	srv := httptest.NewUnstartedServer(mw(next))
	connections = &atomic.Int64{}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			connections.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, connections
}

// clients are the two sequential clients: one keeping its connection alive (every request on
// one connection), one opening a connection per request.
func clients(t *testing.T) map[string]*http.Client {
	keepAlive := &http.Transport{}
	perRequest := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(keepAlive.CloseIdleConnections)
	return map[string]*http.Client{"keep-alive": {Transport: keepAlive},
		"connection per request": {Transport: perRequest}}
}

// Thirty requests one after the other, each answered in full while the handler still runs
// (then works on for 5 ms): every one is answered, none refused by max in flight (capacity 1).
func TestMaxInFlightNeverRefusesASequentialClientWhoseResponseEndsEarly(t *testing.T) {
	const requests = 30
	s := startServer(t)
	c := s.client()
	large := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB, past the server's buffer
	file := filepath.Join(t.TempDir(), "large.bin")
	must(t, os.WriteFile(file, large, 0o600))
	cases := []struct {
		name   string
		method string
		want   int
		body   []byte
		next   http.HandlerFunc
	}{
		{"Content-Length, a body larger than the buffer", http.MethodGet, http.StatusOK, large,
			func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(large)))
				_, _ = w.Write(large)
				time.Sleep(afterResponse)
			}},
		{"Content-Length, then Flush", http.MethodGet, http.StatusOK, []byte("done"),
			func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "4")
				_, _ = io.WriteString(w, "do")
				_, _ = io.WriteString(w, "ne")
				w.(http.Flusher).Flush()
				time.Sleep(afterResponse)
			}},
		{"204, then Flush", http.MethodGet, http.StatusNoContent, []byte{},
			func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNoContent)
				w.(http.Flusher).Flush()
				time.Sleep(afterResponse)
			}},
		{"HEAD, then Flush", http.MethodHead, http.StatusOK, []byte{},
			func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(large)))
				_, _ = w.Write(large)
				w.(http.Flusher).Flush()
				time.Sleep(afterResponse)
			}},
		{"ServeContent of a file (ReadFrom)", http.MethodGet, http.StatusOK, large,
			func(w http.ResponseWriter, r *http.Request) {
				f, err := os.Open(file)
				if err != nil {
					panic(err)
				}
				defer f.Close()
				http.ServeContent(w, r, "large.bin", time.Time{}, f)
				time.Sleep(afterResponse)
			}},
	}
	for i, tc := range cases {
		tc := tc
		key := "end-" + strconv.Itoa(i)
		t.Run(tc.name, func(t *testing.T) {
			for name, client := range clients(t) {
				url, connections := inFlightServer(t, c, key+" "+name, tc.next)
				refused, answers := sequentially(t, client, tc.method, url, requests, tc.want,
					tc.body)
				if refused > 0 {
					t.Errorf("%s: %d of %d sequential requests refused (%v)", name, refused,
						requests, answers)
				}
				opened := connections.Load()
				if name == "keep-alive" && opened != 1 || name != "keep-alive" &&
					opened != requests {
					t.Errorf("%s: %d connections for %d requests", name, opened, requests)
				}
			}
		})
	}
}

// A small response is written when the handler returns, after its slot was given back: a
// sequential client is never refused either.
func TestMaxInFlightNeverRefusesASequentialClientOfSmallResponses(t *testing.T) {
	const requests = 30
	s := startServer(t)
	c := s.client()
	for i, withLength := range []bool{false, true} {
		withLength := withLength
		next := func(w http.ResponseWriter, _ *http.Request) {
			if withLength {
				w.Header().Set("Content-Length", "2")
			}
			_, _ = io.WriteString(w, "ok")
			time.Sleep(afterResponse)
		}
		t.Run("Content-Length "+strconv.FormatBool(withLength), func(t *testing.T) {
			for name, client := range clients(t) {
				url, _ := inFlightServer(t, c, "small-"+strconv.Itoa(i)+" "+name,
					http.HandlerFunc(next))
				refused, answers := sequentially(t, client, http.MethodGet, url, requests,
					http.StatusOK, []byte("ok"))
				if refused > 0 {
					t.Errorf("%s: %d of %d sequential requests refused (%v)", name, refused,
						requests, answers)
				}
			}
		})
	}
}

// recordingWriter is a ResponseWriter that notes, at each Write, the slots the fake service
// holds; it is a Flusher and a Hijacker.
type recordingWriter struct {
	*httptest.ResponseRecorder
	heldAt []uint64
	held   func() uint64
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.heldAt = append(w.heldAt, w.held())
	return w.ResponseRecorder.Write(p)
}

func (w *recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("not hijackable")
}

// The slot is released just before the Write completing the declared Content-Length, once:
// the deferred release at the handler's return sends nothing more. The handler still sees a
// Flusher and a Hijacker.
func TestMaxInFlightReleasesBeforeTheLastByteOnce(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	held := func() uint64 { return f.held("inflight", "192.0.2.9") }
	var flusher, hijacker bool
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight"})(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, flusher = w.(http.Flusher)
			_, hijacker = w.(http.Hijacker)
			w.Header().Set("Content-Length", "10")
			for _, part := range []string{"abc", "def", "ghij"} {
				_, _ = w.Write([]byte(part))
			}
		}))
	req := httptest.NewRequest(http.MethodGet, "/work", nil)
	req.RemoteAddr = "192.0.2.9:1"
	rec := &recordingWriter{ResponseRecorder: httptest.NewRecorder(), held: held}
	h.ServeHTTP(rec, req)
	if rec.Body.String() != "abcdefghij" || !flusher || !hijacker {
		t.Fatalf("body %q, Flusher %v, Hijacker %v", rec.Body.String(), flusher, hijacker)
	}
	f.mu.Lock()
	releases := len(f.releases)
	f.mu.Unlock()
	if len(rec.heldAt) != 3 || rec.heldAt[0] != 1 || rec.heldAt[1] != 1 || rec.heldAt[2] != 0 ||
		releases != 1 {
		t.Fatalf("held at each Write %v (want [1 1 0]), releases %d (want 1)", rec.heldAt,
			releases)
	}
}

// A Release that fails is logged; the request is answered all the same.
func TestMaxInFlightLogsAFailedRelease(t *testing.T) {
	f := newFakeLeases(1)
	f.releaseErr = status.Error(codes.Unavailable, "store unavailable")
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	var out lockedBuffer
	h := c.HTTPMiddleware(ratelimit.HTTPOptions{InFlight: "inflight",
		Logger: log.New(&out, "", 0)})(&handler{})
	if rec := get(h, "192.0.2.9:1"); rec.Code != http.StatusOK {
		t.Fatalf("a request whose release fails: %d", rec.Code)
	}
	if lines := out.lines(); len(lines) != 1 ||
		!strings.Contains(lines[0], `HTTP middleware, limit "inflight": UNAVAILABLE`) ||
		!strings.Contains(lines[0], "slot not given back") {
		t.Fatalf("log of a failed release: %q", lines)
	}
}

// streamingHealth answers Check at once, and a Watch with three messages, then works on for
// afterResponse before returning (gRPC sends the stream's status after).
type streamingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (streamingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (
	*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (streamingHealth) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	for i := 0; i < 3; i++ {
		if err := ss.Send(&healthpb.HealthCheckResponse{}); err != nil {
			return err
		}
	}
	time.Sleep(afterResponse)
	return nil
}

// Thirty unary calls, then thirty streams, one after the other on one slot: the interceptors
// give the slot back before gRPC sends a call's status, so none is refused.
func TestGRPCMaxInFlightNeverRefusesSequentialCalls(t *testing.T) {
	const calls = 30
	s := startServer(t)
	c := s.client()
	opts := ratelimit.GRPCOptions{InFlight: "inflight", InFlightConfig: concurrency(1)}
	srv := grpc.NewServer(grpc.UnaryInterceptor(c.UnaryServerInterceptor(opts)),
		grpc.StreamInterceptor(c.StreamServerInterceptor(opts)))
	healthpb.RegisterHealthServer(srv, streamingHealth{})
	hc := serveAndDialHealth(t, srv)
	for i := 0; i < calls; i++ {
		if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("unary call %d: %v", i, err)
		}
	}
	for i := 0; i < calls; i++ {
		stream, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
		must(t, err)
		messages := 0
		for {
			_, err = stream.Recv()
			if err != nil {
				break
			}
			messages++
		}
		if err != io.EOF || messages != 3 {
			t.Fatalf("stream %d: %d messages, then %v", i, messages, err)
		}
	}
}
