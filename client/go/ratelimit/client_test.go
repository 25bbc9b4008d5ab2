package ratelimit_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

func TestConsumeTakesTokensThenDeniesWithRetryAt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	r, err := c.Consume(ctx(t), one("api", "u1", 4))
	must(t, err)
	if !r.Allowed || r.DeniedBy != -1 || len(r.Limits) != 1 || !near(r.Limits[0].Value, 1) ||
		r.Limits[0].Capacity != 5 || r.Limits[0].Name != "api" || r.Limits[0].Key != "u1" {
		t.Fatalf("first consume: %+v", r)
	}
	before := time.Now()
	r, err = c.Consume(ctx(t), one("api", "u1", 2))
	must(t, err)
	if r.Allowed || r.Reason != ratelimit.InsufficientTokens || r.DeniedBy != 0 {
		t.Fatalf("second consume should be denied for insufficient tokens: %+v", r)
	}
	// One token missing at one token per hour: retry in about an hour.
	if r.RetryAfter < 59*time.Minute || r.RetryAfter > time.Hour ||
		r.RetryAt.Before(before.Add(59*time.Minute)) {
		t.Fatalf("retry_at %v / retry_after %v, want about an hour", r.RetryAt, r.RetryAfter)
	}
	if !near(r.Limits[0].Value, 1) {
		t.Fatalf("a denial must take nothing: value %v", r.Limits[0].Value)
	}
}

func TestAllowAndAllowNDefaultToOneToken(t *testing.T) {
	s := startServer(t)
	c := s.client()
	for i := 0; i < 5; i++ {
		ok, err := c.Allow(ctx(t), "api", "k")
		must(t, err)
		if !ok {
			t.Fatalf("Allow #%d denied within capacity 5", i+1)
		}
	}
	ok, err := c.Allow(ctx(t), "api", "k")
	must(t, err)
	if ok {
		t.Fatal("the sixth Allow of capacity 5 was allowed")
	}
	ok, err = c.AllowN(ctx(t), "api", "k2", 6)
	must(t, err)
	if ok {
		t.Fatal("AllowN(6) of capacity 5 was allowed")
	}
}

func TestCheckTakesNothing(t *testing.T) {
	s := startServer(t)
	c := s.client()
	for i := 0; i < 3; i++ {
		r, err := c.Check(ctx(t), one("api", "k", 5))
		must(t, err)
		if !r.Allowed || !near(r.Limits[0].Value, 5) {
			t.Fatalf("check #%d: %+v", i, r)
		}
	}
	if _, err := c.Consume(ctx(t), one("api", "k", 5)); err != nil {
		t.Fatal(err)
	}
	r, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if r.Allowed || !near(r.Limits[0].Value, 0) {
		t.Fatalf("check after draining: %+v", r)
	}
}

func TestReserveGoesIntoDebtWithRetryAt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	before := time.Now()
	r, err := c.Reserve(ctx(t), one("api", "k", 7))
	must(t, err)
	if !r.Allowed || !near(r.Limits[0].Value, -2) {
		t.Fatalf("reserve: %+v", r)
	}
	// Two tokens owed at one per hour: the work may run in about two hours.
	if r.RetryAt.Before(before.Add(119*time.Minute)) || r.RetryAfter > 2*time.Hour {
		t.Fatalf("reservation retry_at %v retry_after %v, want about two hours", r.RetryAt,
			r.RetryAfter)
	}
}

func TestAllOrNothingDenialTakesFromNoLimit(t *testing.T) {
	s := startServer(t)
	c := s.client()
	_, err := c.Consume(ctx(t), one("other", "k", 5))
	must(t, err)
	req := ratelimit.Request{Limits: []ratelimit.Limit{{Name: "api", Key: "k", Count: 2},
		{Name: "other", Key: "k"}}}
	r, err := c.Consume(ctx(t), req)
	must(t, err)
	if r.Allowed || r.DeniedBy != 1 || !r.Limits[0].Allowed || r.Limits[1].Allowed {
		t.Fatalf("consume: %+v", r)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 5) {
		t.Fatalf("the allowing limit was charged by a denied request: value %v",
			check.Limits[0].Value)
	}
}

func TestInlineConfigAndCountExceedsCapacity(t *testing.T) {
	s := startServer(t)
	c := s.client()
	r, err := c.Consume(ctx(t), inline("job", "k", 2, 3))
	must(t, err)
	if !r.Allowed || !near(r.Limits[0].Value, 1) || r.Limits[0].Capacity != 3 {
		t.Fatalf("inline consume: %+v", r)
	}
	r, err = c.Consume(ctx(t), inline("job", "k", 4, 3))
	must(t, err)
	if r.Allowed || r.Reason != ratelimit.CountExceedsCapacity || !r.RetryAt.IsZero() {
		t.Fatalf("count over capacity: %+v", r)
	}
	// max_reserved 0: no reservation into debt.
	noDebt := inline("job2", "k", 2, 1)
	noDebt.Limits[0].Config.MaxReserved = ratelimit.Ptr(0.0)
	res, err := c.Reserve(ctx(t), noDebt)
	must(t, err)
	if res.Allowed || res.OK() || res.Delay() != ratelimit.InfDuration {
		t.Fatalf("a reservation beyond capacity with max_reserved 0 was allowed: %+v", res.Result)
	}
}

func TestBadInputKeepsCodeAndField(t *testing.T) {
	s := startServer(t)
	c := s.client()
	_, err := c.Consume(ctx(t), one("api", "", 1))
	var e *ratelimit.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *ratelimit.Error, got %T %v", err, err)
	}
	if e.Code != codes.InvalidArgument || e.Field != "limits[0].key" || e.Method != "Consume" {
		t.Fatalf("error %+v (%v)", e, err)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("status.Code(err) = %v", status.Code(err))
	}
	bad := inline("job", "k", 1, 1)
	bad.Limits[0].Config.Rate = -5
	_, err = c.Check(ctx(t), bad)
	if !errors.As(err, &e) || e.Field != "limits[0].config.rate" {
		t.Fatalf("negative rate: %v (field %q)", err, e.Field)
	}
	_, err = c.Consume(ctx(t), one("no_such_limit", "k", 1))
	if !errors.As(err, &e) || e.Code != codes.NotFound {
		t.Fatalf("unknown limit: %v", err)
	}
}

func TestResetNeedsTheAdminToken(t *testing.T) {
	s := startServer(t)
	t.Setenv(ratelimit.AdminTokenEnv, "")
	drain := func(c *ratelimit.Client) {
		_, err := c.Consume(ctx(t), one("api", "k", 5))
		must(t, err)
	}
	full := func(c *ratelimit.Client) bool {
		r, err := c.Check(ctx(t), one("api", "k", 5))
		must(t, err)
		return r.Allowed
	}
	anonymous := s.client()
	drain(anonymous)
	if err := anonymous.Reset(ctx(t), "api", "k"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("reset without a token: %v", err)
	}
	wrong := s.client(ratelimit.WithAdminToken("wrong"))
	if err := wrong.Reset(ctx(t), "api", "k"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reset with a wrong token: %v", err)
	}
	if full(anonymous) {
		t.Fatal("a refused reset reset the key")
	}

	fromFile := s.client(ratelimit.WithAdminTokenFile(s.tokenFile))
	must(t, fromFile.Reset(ctx(t), "api", "k"))
	if !full(anonymous) {
		t.Fatal("reset with the token from a file did not refill the key")
	}

	drain(anonymous)
	t.Setenv(ratelimit.AdminTokenEnv, testToken)
	fromEnv := s.client()
	must(t, fromEnv.ResetAll(ctx(t), "api"))
	if !full(anonymous) {
		t.Fatal("reset with the token from the environment did not refill the key")
	}

	// An inline limit lives in its own namespace.
	_, err := anonymous.Consume(ctx(t), inline("job", "k", 3, 3))
	must(t, err)
	must(t, fromEnv.ResetTarget(ctx(t), ratelimit.ResetTarget{Name: "job", Key: "k",
		Source: ratelimit.Inline}))
	r, err := anonymous.Check(ctx(t), inline("job", "k", 3, 3))
	must(t, err)
	if !r.Allowed {
		t.Fatalf("inline reset did not refill: %+v", r)
	}

	if _, err := ratelimit.Dial(s.addr,
		ratelimit.WithAdminTokenFile(filepath.Join(s.dir, "missing"))); err == nil {
		t.Fatal("Dial accepted a missing admin token file")
	}
}

func TestWaitReturnsNoEarlierThanRetryAt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	// 20 tokens per second, capacity 1: the second reservation runs about 50 ms later.
	req := ratelimit.Request{Limits: []ratelimit.Limit{{Name: "fast", Key: "k",
		Config: &ratelimit.Config{Kind: ratelimit.TokenBucket, Rate: 20, Period: time.Second,
			Capacity: ratelimit.Ptr(1.0)}}}}
	first, err := c.WaitRequest(ctx(t), req)
	must(t, err)
	if !first.Allowed {
		t.Fatalf("first: %+v", first)
	}
	second, err := c.WaitRequest(ctx(t), req)
	must(t, err)
	returned := time.Now()
	if second.RetryAt.IsZero() || returned.Before(second.RetryAt) {
		t.Fatalf("WaitRequest returned at %v, before the reservation's retry_at %v", returned,
			second.RetryAt)
	}
	must(t, c.Wait(ctx(t), "api", "w"))
}

func TestWaitHonoursCancellation(t *testing.T) {
	s := startServer(t)
	c := s.client()
	_, err := c.Consume(ctx(t), one("api", "k", 5))
	must(t, err)

	// The next token comes in an hour: cancelling must end the wait.
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Wait(cctx, "api", "k") }()
	waitForDebt(t, c, "api", "k")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Wait returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return after its context was cancelled")
	}

	// A deadline before retry_at: an error at once, as rate.Limiter.Wait does.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	err = c.Wait(dctx, "api", "k")
	if !errors.Is(err, context.DeadlineExceeded) || dctx.Err() != nil {
		t.Fatalf("Wait with a deadline before retry_at: %v (context: %v)", err, dctx.Err())
	}
}

func TestWaitOnADeniedReservationReturnsDeniedError(t *testing.T) {
	s := startServer(t)
	c := s.client()
	req := inline("job", "k", 6, 5)
	req.Limits[0].Config.MaxReserved = ratelimit.Ptr(0.0)
	_, err := c.WaitRequest(ctx(t), req)
	var denied *ratelimit.DeniedError
	if !errors.As(err, &denied) || denied.Result.Reason != ratelimit.CountExceedsCapacity {
		t.Fatalf("WaitN beyond what the limit can ever hold: %v", err)
	}
}

// Goroutines racing for one key never get more than the bound
// capacity + rate*T/period.
func TestConcurrentCallersNeverOverGrant(t *testing.T) {
	s := startServer(t)
	c := s.client()
	const callers, attempts = 64, 8
	const capacity, perHour = 100.0, 1.0
	req := inline("shared", "one-key", 1, capacity)
	var granted, denied atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < attempts; i++ {
				r, err := c.Consume(context.Background(), req)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					granted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	bound := capacity + perHour*elapsed.Hours()
	t.Logf("%d callers, %d calls: %d granted, %d denied in %v (bound %.3f)", callers,
		callers*attempts, granted.Load(), denied.Load(), elapsed, bound)
	if float64(granted.Load()) > bound {
		t.Fatalf("%d granted in %v, bound %.3f", granted.Load(), elapsed, bound)
	}
	if granted.Load() < int64(capacity) || granted.Load()+denied.Load() != callers*attempts {
		t.Fatalf("granted %d denied %d of %d: the bucket's capacity was not all granted",
			granted.Load(), denied.Load(), callers*attempts)
	}
}

// waitForDebt waits until (name, key) owes tokens: a reservation of a Wait has been taken.
func waitForDebt(t *testing.T, c *ratelimit.Client, name, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := c.Check(ctx(t), one(name, key, 1))
		must(t, err)
		if r.Limits[0].Value < 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s never went into debt: value %v", name, key, r.Limits[0].Value)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// near compares token balances, which refill a little (one token per hour) while a test runs.
func near(got, want float64) bool { return got > want-0.01 && got < want+0.01 }
