package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Writers with the optional interfaces of net/http's HTTP/1 and HTTP/2 writers, of
// httptest.ResponseRecorder, and none (the interfaces are never called here).
type (
	http1Writer struct {
		*httptest.ResponseRecorder
		http.Hijacker
		http.CloseNotifier
	}
	http2Writer struct {
		*httptest.ResponseRecorder
		http.CloseNotifier
		http.Pusher
	}
	bareWriter struct{ http.ResponseWriter }
)

// interfacesOf says which of the optional interfaces w implements.
func interfacesOf(w http.ResponseWriter) [4]bool {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, c := w.(http.CloseNotifier)
	_, p := w.(http.Pusher)
	return [4]bool{f, h, c, p}
}

// The wrapper implements the optional interfaces its writer does, and no other.
func TestInFlightWriterKeepsTheOptionalInterfaces(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for name, w := range map[string]http.ResponseWriter{
		"HTTP/1":   http1Writer{ResponseRecorder: httptest.NewRecorder()},
		"HTTP/2":   http2Writer{ResponseRecorder: httptest.NewRecorder()},
		"recorder": httptest.NewRecorder(),
		"bare":     bareWriter{httptest.NewRecorder()},
	} {
		wrapped := newInFlightWriter(w, req, func() {})
		if got, want := interfacesOf(wrapped), interfacesOf(w); got != want {
			t.Errorf("%s: Flusher, Hijacker, CloseNotifier, Pusher %v, want %v", name, got, want)
		}
		if u, ok := wrapped.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != w {
			t.Errorf("%s: no Unwrap to the writer", name)
		}
	}
}
