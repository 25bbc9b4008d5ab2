package ratelimit

import (
	"io"
	"net/http"
	"strconv"
)

// inFlightWriter is the ResponseWriter of a request holding a slot of HTTPOptions.InFlight: it
// gives the slot back (release) before the end of the response can reach the client, so that a
// client waiting for each response before sending the next never finds its own slot still held.
//
// A response without a declared length (chunked, or closed by the connection's end) ends when
// the handler returns, after the middleware's deferred release. A response of known length ends
// with its last byte, or with its headers when it has no body (HEAD, 204, 304, Content-Length:
// 0); those can reach the client while the handler still runs (a body larger than the server's
// buffer, a Flush). So release runs before the Write (or ReadFrom) that completes the declared
// Content-Length, and before a Flush once nothing more is due. release must be safe to call more
// than once (the middleware's runs once).
type inFlightWriter struct {
	http.ResponseWriter
	release     func()
	head        bool // a HEAD request: no body is sent
	wroteHeader bool
	// remaining is the body still due of a response of known length: the declared
	// Content-Length less what was written, 0 once nothing more is due (or for a response
	// without a body); -1 when the length is unknown.
	remaining int64
}

// newInFlightWriter wraps w for the request r: the result implements http.Flusher,
// http.Hijacker, http.CloseNotifier and http.Pusher when w does.
func newInFlightWriter(w http.ResponseWriter, r *http.Request, release func()) http.ResponseWriter {
	iw := &inFlightWriter{ResponseWriter: w, release: release, head: r.Method == http.MethodHead,
		remaining: -1}
	var fl http.Flusher
	has := 0
	if _, ok := w.(http.Flusher); ok {
		fl = flushFunc(iw.flush)
		has |= withFlusher
	}
	hj, ok := w.(http.Hijacker)
	if ok {
		has |= withHijacker
	}
	cn, ok := w.(http.CloseNotifier) //nolint:staticcheck // deprecated, still used by some
	if ok {
		has |= withCloseNotifier
	}
	pu, ok := w.(http.Pusher)
	if ok {
		has |= withPusher
	}
	switch has {
	case withFlusher | withHijacker | withCloseNotifier | withPusher:
		return struct {
			*inFlightWriter
			http.Flusher
			http.Hijacker
			http.CloseNotifier
			http.Pusher
		}{iw, fl, hj, cn, pu}
	case withHijacker | withCloseNotifier | withPusher:
		return struct {
			*inFlightWriter
			http.Hijacker
			http.CloseNotifier
			http.Pusher
		}{iw, hj, cn, pu}
	case withFlusher | withCloseNotifier | withPusher:
		return struct {
			*inFlightWriter
			http.Flusher
			http.CloseNotifier
			http.Pusher
		}{iw, fl, cn, pu}
	case withCloseNotifier | withPusher:
		return struct {
			*inFlightWriter
			http.CloseNotifier
			http.Pusher
		}{iw, cn, pu}
	case withFlusher | withHijacker | withPusher:
		return struct {
			*inFlightWriter
			http.Flusher
			http.Hijacker
			http.Pusher
		}{iw, fl, hj, pu}
	case withHijacker | withPusher:
		return struct {
			*inFlightWriter
			http.Hijacker
			http.Pusher
		}{iw, hj, pu}
	case withFlusher | withPusher:
		return struct {
			*inFlightWriter
			http.Flusher
			http.Pusher
		}{iw, fl, pu}
	case withPusher:
		return struct {
			*inFlightWriter
			http.Pusher
		}{iw, pu}
	case withFlusher | withHijacker | withCloseNotifier:
		return struct {
			*inFlightWriter
			http.Flusher
			http.Hijacker
			http.CloseNotifier
		}{iw, fl, hj, cn}
	case withHijacker | withCloseNotifier:
		return struct {
			*inFlightWriter
			http.Hijacker
			http.CloseNotifier
		}{iw, hj, cn}
	case withFlusher | withCloseNotifier:
		return struct {
			*inFlightWriter
			http.Flusher
			http.CloseNotifier
		}{iw, fl, cn}
	case withCloseNotifier:
		return struct {
			*inFlightWriter
			http.CloseNotifier
		}{iw, cn}
	case withFlusher | withHijacker:
		return struct {
			*inFlightWriter
			http.Flusher
			http.Hijacker
		}{iw, fl, hj}
	case withHijacker:
		return struct {
			*inFlightWriter
			http.Hijacker
		}{iw, hj}
	case withFlusher:
		return struct {
			*inFlightWriter
			http.Flusher
		}{iw, fl}
	}
	return iw
}

// The optional interfaces of a ResponseWriter that newInFlightWriter keeps.
const (
	withFlusher = 1 << iota
	withHijacker
	withCloseNotifier
	withPusher
)

type flushFunc func()

func (f flushFunc) Flush() { f() }

// Unwrap is the wrapped ResponseWriter (for http.ResponseController, Go 1.20 on).
func (w *inFlightWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// begin notes the response's final status code (its headers are then fixed, as net/http fixes
// the Content-Length it enforces): what remains of a response of known length.
func (w *inFlightWriter) begin(code int) {
	w.wroteHeader = true
	switch {
	case code == http.StatusSwitchingProtocols: // the connection goes on as something else
	case w.head || code == http.StatusNoContent || code == http.StatusNotModified:
		w.remaining = 0
	default:
		if cl := w.Header().Get("Content-Length"); cl != "" {
			if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
				w.remaining = n
			}
		}
	}
}

func (w *inFlightWriter) WriteHeader(code int) {
	// An informational response (103 Early Hints) is not the response's header.
	if !w.wroteHeader && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.begin(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *inFlightWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.begin(http.StatusOK) // as the wrapped writer does on its first Write
	}
	if w.remaining > 0 && int64(len(p)) >= w.remaining {
		w.release()
	}
	n, err := w.ResponseWriter.Write(p)
	w.wrote(int64(n))
	return n, err
}

// WriteString is Write of a string, without a copy when the wrapped writer has WriteString.
func (w *inFlightWriter) WriteString(s string) (int, error) {
	if !w.wroteHeader {
		w.begin(http.StatusOK)
	}
	if w.remaining > 0 && int64(len(s)) >= w.remaining {
		w.release()
	}
	n, err := io.WriteString(w.ResponseWriter, s)
	w.wrote(int64(n))
	return n, err
}

func (w *inFlightWriter) wrote(n int64) {
	if w.remaining > 0 {
		w.remaining -= n
		if w.remaining < 0 {
			w.remaining = 0
		}
	}
}

func (w *inFlightWriter) flush() {
	if !w.wroteHeader {
		w.begin(http.StatusOK)
	}
	if w.remaining == 0 {
		w.release()
	}
	w.ResponseWriter.(http.Flusher).Flush()
}

// ReadFrom keeps the wrapped writer's ReadFrom (sendfile for http.ServeContent of a file) for
// all but the last byte of a response of known length, which goes through Write.
func (w *inFlightWriter) ReadFrom(src io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.begin(http.StatusOK)
	}
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	switch {
	case !ok || w.remaining == 1:
		return io.Copy(writerOnly{w}, src)
	case w.remaining <= 0: // no byte completes the response
		return rf.ReadFrom(src)
	}
	// One *io.LimitedReader around the source, not two: sendfile sees through one only.
	head := &io.LimitedReader{R: src, N: w.remaining - 1}
	lr, isLimited := src.(*io.LimitedReader)
	if isLimited {
		head.R = lr.R
		if lr.N < head.N {
			head.N = lr.N
		}
	}
	before := head.N
	n, err := rf.ReadFrom(head)
	if isLimited {
		lr.N -= before - head.N
	}
	w.wrote(n)
	if err != nil || head.N > 0 { // failed, or the source ended
		return n, err
	}
	m, err := io.Copy(writerOnly{w}, src)
	return n + m, err
}

// writerOnly hides ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }
