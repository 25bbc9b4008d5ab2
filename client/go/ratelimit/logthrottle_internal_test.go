package ratelimit

import (
	"bytes"
	"fmt"
	"log"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestThrottle() (*logThrottle, *bytes.Buffer, *fakeClock) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	th := newLogThrottle(log.New(&out, "", 0))
	th.now = clock.now
	return th, &out, clock
}

func logLines(out *bytes.Buffer) []string {
	s := strings.TrimSuffix(out.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

var moreLikeIt = regexp.MustCompile(`(\d+) more like it`)

// occurrences is how many events a set of lines accounts for: one per line, plus the repeats
// each line reports.
func occurrences(t *testing.T, lines []string) int {
	t.Helper()
	n := 0
	for _, l := range lines {
		if m := moreLikeIt.FindStringSubmatch(l); m != nil {
			k, err := strconv.Atoi(m[1])
			if err != nil {
				t.Fatal(err)
			}
			n += k
			if !strings.Contains(l, ": answered 500") { // a summary of a forgotten error
				continue
			}
		}
		n++
	}
	return n
}

func TestLogThrottleWritesOneLinePerErrorPerIntervalWithTheCount(t *testing.T) {
	th, out, clock := newTestThrottle()
	notFound := status.Error(codes.NotFound, `name: no limit "apii"`)
	// 100,000 failing requests over 25 s (one every 250 µs): a line at 0 s, 10 s and 20 s.
	const requests = 100000
	for i := 0; i < requests; i++ {
		th.log(notFound, "HTTP middleware", "apii", "answered 500")
		clock.advance(250 * time.Microsecond)
	}
	lines := logLines(out)
	if len(lines) != 3 {
		t.Fatalf("%d lines for %d requests: %q", len(lines), requests, lines)
	}
	want := `ratelimit: HTTP middleware, limit "apii": NOT_FOUND: name: no limit "apii": answered 500`
	if lines[0] != want {
		t.Fatalf("first line %q, want %q", lines[0], want)
	}
	if !strings.HasPrefix(lines[1], want+" (and 39999 more like it in the 10s after") {
		t.Fatalf("second line: %q", lines[1])
	}
	// The requests after the last line are not logged yet; with them the counts add up.
	logged := occurrences(t, lines)
	pending := th.seen[throttleKey{codes.NotFound, `name: no limit "apii"`}].suppressed
	if logged+pending != requests {
		t.Fatalf("lines account for %d requests, %d pending: want %d in all", logged, pending,
			requests)
	}
}

func TestLogThrottleKeepsDistinctErrorsApart(t *testing.T) {
	th, out, _ := newTestThrottle()
	for i := 0; i < 10; i++ {
		th.log(status.Error(codes.NotFound, "a"), "HTTP middleware", "x", "answered 500")
		th.log(status.Error(codes.NotFound, "b"), "HTTP middleware", "x", "answered 500")
		th.log(status.Error(codes.Internal, "a"), "HTTP middleware", "x", "answered 500")
	}
	if lines := logLines(out); len(lines) != 3 {
		t.Fatalf("three distinct errors, ten times each: %q", lines)
	}
}

// An error that stops recurring has its repeats logged when the throttle makes room for others.
func TestLogThrottleSummarisesTheErrorsItForgets(t *testing.T) {
	th, out, clock := newTestThrottle()
	for i := 0; i < 5; i++ {
		th.log(status.Error(codes.NotFound, "gone"), "HTTP middleware", "x", "answered 500")
	}
	clock.advance(logInterval)
	for i := 0; i < logThrottleSize; i++ {
		th.log(status.Error(codes.NotFound, fmt.Sprint("other ", i)), "HTTP middleware", "x",
			"answered 500")
	}
	lines := logLines(out)
	summary := `ratelimit: HTTP middleware, limit "x": NOT_FOUND: gone: 4 more like it in the 10s ` +
		`after it was logged`
	found := false
	for _, l := range lines {
		found = found || l == summary
	}
	if !found || occurrences(t, lines) != 5+logThrottleSize || len(th.seen) > logThrottleSize {
		t.Fatalf("%d lines (%d remembered), no summary %q: %q", len(lines), len(th.seen), summary,
			lines)
	}
}
