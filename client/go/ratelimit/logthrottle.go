package ratelimit

import (
	"fmt"
	"log"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logInterval is how often a middleware logs one distinct error at most.
const logInterval = 10 * time.Second

// logThrottleSize is how many distinct errors a throttle remembers before it forgets those
// whose interval has passed.
const logThrottleSize = 256

// logThrottle logs the errors of a middleware without a line per request: the first occurrence
// of a (code, message) is logged at once, later ones within logInterval of that line are
// counted, and the next occurrence after the interval is logged with the count of those left
// out. An error that stops recurring gets its count logged when the throttle forgets it.
type logThrottle struct {
	logger *log.Logger
	now    func() time.Time
	mu     sync.Mutex
	seen   map[throttleKey]*throttleEntry
}

type throttleKey struct {
	code    codes.Code
	message string
}

type throttleEntry struct {
	logged     time.Time // when the last line for this error was written
	suppressed int       // occurrences since then that were not logged
	where      string    // the last occurrence's context, for a forgotten entry's summary
}

func newLogThrottle(logger *log.Logger) *logThrottle {
	if logger == nil {
		logger = log.Default()
	}
	return &logThrottle{logger: logger, now: time.Now, seen: map[throttleKey]*throttleEntry{}}
}

// log records err, which happened to a request of the middleware `component` limiting `limit`,
// and was answered as `outcome` says.
func (t *logThrottle) log(err error, component, limit, outcome string) {
	s := status.Convert(err)
	k := throttleKey{code: s.Code(), message: s.Message()}
	where := fmt.Sprintf("ratelimit: %s, limit %q: %s: %s", component, limit, codeName(k.code),
		k.message)
	now := t.now()
	var lines []string
	t.mu.Lock()
	e := t.seen[k]
	if e != nil && now.Sub(e.logged) < logInterval {
		e.suppressed++
		e.where = where
		t.mu.Unlock()
		return
	}
	line := where + ": " + outcome
	if e != nil && e.suppressed > 0 {
		line += fmt.Sprintf(" (and %d more like it in the %v after the previous line)",
			e.suppressed, logInterval)
	}
	lines = append(lines, line)
	if e == nil {
		if len(t.seen) >= logThrottleSize {
			lines = append(lines, t.forget(now)...)
		}
		e = &throttleEntry{}
		t.seen[k] = e
	}
	e.logged, e.suppressed, e.where = now, 0, where
	t.mu.Unlock()
	for _, l := range lines {
		t.logger.Print(l)
	}
}

// forget drops the entries whose interval has passed, returning the summary lines of those
// with repeats not yet logged. Called with t.mu held.
func (t *logThrottle) forget(now time.Time) []string {
	var lines []string
	for k, e := range t.seen {
		if now.Sub(e.logged) < logInterval {
			continue
		}
		if e.suppressed > 0 {
			lines = append(lines, fmt.Sprintf("%s: %d more like it in the %v after it was logged",
				e.where, e.suppressed, logInterval))
		}
		delete(t.seen, k)
	}
	return lines
}
