package ratelimit_test

// n = 0 takes nothing, as in golang.org/x/time/rate: AllowN reports whether the limit is not in
// debt, WaitN waits until it is not.

import (
	"context"
	"errors"
	"testing"
	"time"

	"ratelimit.dev/client/go/ratelimit"
)

// value is the balance of (name, key) now.
func value(t *testing.T, c *ratelimit.Client, name, key string) float64 {
	t.Helper()
	r, err := c.Check(ctx(t), one(name, key, 1))
	must(t, err)
	return r.Limits[0].Value
}

func TestAllowNOfZeroTakesNothingAndReportsWhetherTheLimitIsInDebt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	for i := 0; i < 3; i++ {
		ok, err := c.AllowN(ctx(t), "api", "k", 0)
		must(t, err)
		if !ok {
			t.Fatalf("AllowN(0) #%d of a full limit: false", i+1)
		}
	}
	if v := value(t, c, "api", "k"); !near(v, 5) {
		t.Fatalf("AllowN(0) took tokens: value %v, want 5", v)
	}
	// Drained to exactly 0: not in debt, so AllowN(0) is true (and AllowN(1) false).
	_, err := c.Consume(ctx(t), one("api", "k", 5))
	must(t, err)
	if ok, err := c.AllowN(ctx(t), "api", "k", 0); err != nil || !ok {
		t.Fatalf("AllowN(0) of a drained limit: %v %v", ok, err)
	}
	// In debt (a reservation owes 2 tokens): false, and still nothing taken.
	_, err = c.Reserve(ctx(t), one("api", "k", 2))
	must(t, err)
	if ok, err := c.AllowN(ctx(t), "api", "k", 0); err != nil || ok {
		t.Fatalf("AllowN(0) of a limit in debt: %v %v", ok, err)
	}
	if v := value(t, c, "api", "k"); !near(v, -2) {
		t.Fatalf("AllowN(0) took tokens: value %v, want -2", v)
	}
	// An unknown limit is still an error.
	if _, err := c.AllowN(ctx(t), "no_such_limit", "k", 0); err == nil {
		t.Fatal("AllowN(0) of an unknown limit: no error")
	}
}

func TestWaitNOfZeroTakesNothingAndWaitsUntilTheLimitIsOutOfDebt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	// Not in debt: returns at once, taking nothing.
	must(t, c.WaitN(ctx(t), "api", "k", 0))
	if v := value(t, c, "api", "k"); !near(v, 5) {
		t.Fatalf("WaitN(0) took tokens: value %v, want 5", v)
	}
	// In debt for about two hours: a context ending before is an error at once.
	_, err := c.Reserve(ctx(t), one("api", "k", 7))
	must(t, err)
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitN(dctx, "api", "k", 0); !errors.Is(err, context.DeadlineExceeded) ||
		dctx.Err() != nil {
		t.Fatalf("WaitN(0) of a limit in debt past the deadline: %v (context %v)", err, dctx.Err())
	}
	if v := value(t, c, "api", "k"); !near(v, -2) {
		t.Fatalf("WaitN(0) took tokens: value %v, want -2", v)
	}
}
