//go:build !nosettle

package ratelimit_test

// Reservation (OK, Delay, Cancel) and Limiter, shaped like golang.org/x/time/rate's. Cancel
// gives a reservation back through Settle: these need a server that implements it.

import (
	"context"
	"errors"
	"testing"
	"time"

	"ratelimit.dev/client/go/ratelimit"
)

func TestReservationHasDelayAndCancelGivesItBack(t *testing.T) {
	s := startServer(t)
	c := s.client()
	before := time.Now()
	r, err := c.Reserve(ctx(t), one("api", "k", 7))
	must(t, err)
	// Two tokens owed at one an hour: the work may run in about two hours.
	if !r.OK() || r.Delay() < 119*time.Minute || r.Delay() > 2*time.Hour ||
		r.DelayFrom(before.Add(3*time.Hour)) != 0 {
		t.Fatalf("reservation of 7 of capacity 5: OK %v, Delay %v", r.OK(), r.Delay())
	}
	if v := value(t, c, "api", "k"); !near(v, -2) {
		t.Fatalf("value after the reservation: %v", v)
	}
	r.Cancel()
	if v := value(t, c, "api", "k"); !near(v, 5) {
		t.Fatalf("value after Cancel: %v, want 5", v)
	}
	// Cancelling again gives nothing back twice (and is no error).
	_, err = c.Consume(ctx(t), one("api", "k", 3))
	must(t, err)
	must(t, r.CancelContext(ctx(t)))
	if v := value(t, c, "api", "k"); !near(v, 2) {
		t.Fatalf("value after a second Cancel: %v, want 2", v)
	}

	// A reservation the server refuses: not OK, an infinite Delay, nothing to give back.
	noDebt := inline("job", "k", 2, 1)
	noDebt.Limits[0].Config.MaxReserved = ratelimit.Ptr(0.0)
	denied, err := c.Reserve(ctx(t), noDebt)
	must(t, err)
	if denied.OK() || denied.Delay() != ratelimit.InfDuration || denied.CancelContext(ctx(t)) != nil {
		t.Fatalf("refused reservation: OK %v, Delay %v", denied.OK(), denied.Delay())
	}

	// Without receipts a reservation cannot be given back: an error, not a silent no-op.
	omit := one("other", "k", 1)
	omit.OmitReceipts = true
	blind, err := c.Reserve(ctx(t), omit)
	must(t, err)
	if err := blind.CancelContext(ctx(t)); err == nil {
		t.Fatal("Cancel of a reservation without receipts: no error")
	}
}

func TestLimiterIsBoundToOneLimitAndKey(t *testing.T) {
	s := startServer(t)
	c := s.client()
	l := c.Limiter("api", "user-1")
	if l.Name() != "api" || l.Key() != "user-1" {
		t.Fatalf("limiter of %q %q", l.Name(), l.Key())
	}
	for i := 1; i <= 5; i++ {
		ok, err := l.Allow(ctx(t))
		if err != nil || !ok {
			t.Fatalf("Allow #%d of capacity 5: %v %v", i, ok, err)
		}
	}
	if ok, err := l.Allow(ctx(t)); err != nil || ok {
		t.Fatalf("the sixth Allow: %v %v", ok, err)
	}
	if tokens, err := l.Tokens(ctx(t)); err != nil || !near(tokens, 0) {
		t.Fatalf("Tokens of a drained limit: %v %v", tokens, err)
	}
	// Another key is another counter.
	if ok, err := c.Limiter("api", "user-2").AllowN(ctx(t), 5); err != nil || !ok {
		t.Fatalf("AllowN(5) of another key: %v %v", ok, err)
	}

	r, err := l.ReserveN(ctx(t), 2)
	must(t, err)
	if !r.OK() || r.Delay() < 119*time.Minute {
		t.Fatalf("ReserveN(2) of a drained limit: OK %v, Delay %v", r.OK(), r.Delay())
	}
	if ok, err := l.AllowN(ctx(t), 0); err != nil || ok {
		t.Fatalf("AllowN(0) of a limit in debt: %v %v", ok, err)
	}
	// ReserveN(0) takes nothing; its Delay is until the debt is paid.
	zero, err := l.ReserveN(ctx(t), 0)
	must(t, err)
	if !zero.OK() || zero.Delay() < 119*time.Minute || zero.Delay() > 2*time.Hour {
		t.Fatalf("ReserveN(0) of a limit in debt: OK %v, Delay %v", zero.OK(), zero.Delay())
	}
	zero.Cancel()
	if tokens, err := l.Tokens(ctx(t)); err != nil || !near(tokens, -2) {
		t.Fatalf("Tokens after ReserveN(0) and its Cancel: %v %v, want -2", tokens, err)
	}
	// Wait with a deadline before the reservation may run: an error at once, and the
	// reservation is given back.
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) || dctx.Err() != nil {
		t.Fatalf("Wait past the deadline: %v", err)
	}
	r.Cancel()
	if tokens, err := l.Tokens(ctx(t)); err != nil || !near(tokens, 0) {
		t.Fatalf("Tokens after the reservation's Cancel: %v %v, want 0", tokens, err)
	}
	if ok, err := l.AllowN(ctx(t), 0); err != nil || !ok {
		t.Fatalf("AllowN(0) of a limit out of debt: %v %v", ok, err)
	}
}

func TestInlineLimiterWaitsAndWaitNOfZeroWaitsForTheDebt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	// 20 tokens a second, capacity 1.
	l := c.InlineLimiter("fast", "k", ratelimit.Config{Kind: ratelimit.TokenBucket, Rate: 20,
		Period: time.Second, Capacity: ratelimit.Ptr(1.0)})
	must(t, l.Wait(ctx(t)))
	r, err := l.ReserveN(ctx(t), 1)
	must(t, err)
	if !r.OK() || r.Delay() > 60*time.Millisecond {
		t.Fatalf("ReserveN(1) of a drained limit: OK %v, Delay %v", r.OK(), r.Delay())
	}
	// One token owed: WaitN(0) returns once it is paid, no earlier.
	must(t, l.WaitN(ctx(t), 0))
	returned := time.Now()
	if returned.Before(r.RetryAt) {
		t.Fatalf("WaitN(0) returned at %v, before the debt was paid at %v", returned, r.RetryAt)
	}
	if tokens, err := l.Tokens(ctx(t)); err != nil || tokens < 0 {
		t.Fatalf("Tokens after WaitN(0): %v %v, want the debt paid", tokens, err)
	}
}
