package ratelimit

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// InfDuration is the Delay of a reservation that was not granted, as in golang.org/x/time/rate.
const InfDuration = time.Duration(math.MaxInt64)

// probeCount is the count of the Check that answers a take of nothing (n = 0): the server's
// counts must be > 0, and a billionth of a token is far below what a balance is read to. A
// Check takes nothing; its value says whether the limit is in debt and, when it is, its
// RetryAt is when the debt is paid (when the balance reaches the billionth).
const probeCount = 1e-9

// Reservation is a reservation made by Client.Reserve or Limiter.Reserve(N): the server's
// Result, and what golang.org/x/time/rate's Reservation offers (OK, Delay, Cancel).
type Reservation struct {
	// Result is the server's answer: to the Reserve, or, for a reservation of n = 0 tokens, to
	// the Check that asked whether the limit is in debt.
	*Result
	c         *Client
	ok        bool
	at        time.Time // when the reserved work may run; zero: now
	took      bool      // whether the reservation took tokens (that Cancel would give back)
	mu        sync.Mutex
	cancelled bool
}

func (c *Client) reservation(r *Result) *Reservation {
	return &Reservation{Result: r, c: c, ok: r.Allowed, at: r.RetryAt,
		took: r.Allowed && !r.FailedOpen}
}

// OK reports whether the reservation was granted. A reservation that was not took nothing;
// its Result says why (Reason) and when a retry can succeed (RetryAt).
func (r *Reservation) OK() bool { return r.ok }

// Delay is how long to wait before the reserved work may run: zero when it may run now,
// InfDuration when the reservation was not granted.
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom is Delay as of t.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.ok {
		return InfDuration
	}
	if r.at.IsZero() || !r.at.After(t) {
		return 0
	}
	return r.at.Sub(t)
}

// Cancel gives the reservation back (best effort): the work it reserved will not run. See
// CancelContext.
func (r *Reservation) Cancel() { _ = r.CancelContext(context.Background()) }

// CancelContext gives the reservation back: a Settle of each of its receipts with used = 0,
// which returns the tokens as far as the server's rule for refunds allows (see Settle). Unlike
// golang.org/x/time/rate, a reservation whose time has come can still be given back. Once it
// succeeds, later calls do nothing; a reservation that was not granted, or took nothing (n = 0),
// has nothing to give back. A reservation made with OmitReceipts cannot be given back (an error).
func (r *Reservation) CancelContext(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelled || !r.took {
		return nil
	}
	var settlements []Settlement
	for _, l := range r.Limits {
		if len(l.Receipt) > 0 {
			settlements = append(settlements, Settlement{Receipt: l.Receipt, Used: 0})
		}
	}
	if len(settlements) == 0 {
		return errors.New("ratelimit: the reservation has no receipts (OmitReceipts): " +
			"it cannot be given back")
	}
	if _, err := r.c.Settle(ctx, settlements...); err != nil {
		return err
	}
	r.cancelled = true
	return nil
}

// Limiter is one limit and key of the service, shaped like golang.org/x/time/rate's Limiter:
// Allow, AllowN, Reserve, ReserveN, Wait and WaitN, with a context (each is a call to the
// server) and an error. Counts are float64; n = 0 takes nothing, as in x/time/rate. Safe for
// concurrent use; every Limiter of one name and key, in every process, shares one state.
type Limiter struct {
	c     *Client
	limit Limit
}

// Limiter is the limit name of the server's limits file, for key.
func (c *Client) Limiter(name, key string) *Limiter {
	return &Limiter{c: c, limit: Limit{Name: name, Key: key}}
}

// InlineLimiter is the limit name defined inline by config (for a name the server's limits
// file does not define), for key.
func (c *Client) InlineLimiter(name, key string, config Config) *Limiter {
	return &Limiter{c: c, limit: Limit{Name: name, Key: key, Config: &config}}
}

// Name is the limit's name.
func (l *Limiter) Name() string { return l.limit.Name }

// Key is the limit's key.
func (l *Limiter) Key() string { return l.limit.Key }

// Allow is AllowN(ctx, 1).
func (l *Limiter) Allow(ctx context.Context) (bool, error) { return l.AllowN(ctx, 1) }

// AllowN takes n tokens when the limit has them (a Consume), and reports whether it did. n = 0
// takes nothing and reports whether the limit is not in debt now.
func (l *Limiter) AllowN(ctx context.Context, n float64) (bool, error) {
	return l.c.allowN(ctx, l.limit, n)
}

// Reserve is ReserveN(ctx, 1).
func (l *Limiter) Reserve(ctx context.Context) (*Reservation, error) {
	return l.ReserveN(ctx, 1)
}

// ReserveN reserves n tokens (a Reserve, which may take the limit into debt down to
// -max_reserved): the work may run after the reservation's Delay; Cancel gives it back. A
// reservation the server refuses is returned with OK false. n = 0 takes nothing: its Delay is
// until the limit is not in debt. Never retried.
func (l *Limiter) ReserveN(ctx context.Context, n float64) (*Reservation, error) {
	if n == 0 {
		return l.c.reserveNothing(ctx, l.limit)
	}
	limit := l.limit
	limit.Count = n
	return l.c.Reserve(ctx, Request{Limits: []Limit{limit}})
}

// Wait is WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN reserves n tokens and blocks until they may be used (Client.WaitRequest: a reservation
// refused returns a *DeniedError, one that cannot run before ctx ends is given back and returns
// the context's error). n = 0 takes nothing and blocks until the limit is not in debt.
func (l *Limiter) WaitN(ctx context.Context, n float64) error {
	return l.c.waitN(ctx, l.limit, n)
}

// Tokens is the limit's balance now (negative while reservations owe); takes nothing.
func (l *Limiter) Tokens(ctx context.Context) (float64, error) {
	r, err := l.c.probe(ctx, l.limit)
	if err != nil {
		return 0, err
	}
	if len(r.Limits) == 0 {
		return 0, nil
	}
	return r.Limits[0].Value, nil
}

// probe is a Check of l that takes nothing and says whether l is in debt.
func (c *Client) probe(ctx context.Context, l Limit) (*Result, error) {
	l.Count = probeCount
	return c.Check(ctx, Request{Limits: []Limit{l}})
}

// inDebt reports whether a probe found its limit in debt. A failed-open answer has no values.
func inDebt(r *Result) bool {
	return !r.FailedOpen && len(r.Limits) > 0 && r.Limits[0].Value < 0
}

func (c *Client) allowN(ctx context.Context, l Limit, n float64) (bool, error) {
	if n == 0 {
		r, err := c.probe(ctx, l)
		if err != nil {
			return false, err
		}
		return !inDebt(r), nil
	}
	l.Count = n
	r, err := c.Consume(ctx, Request{Limits: []Limit{l}})
	if err != nil {
		return false, err
	}
	return r.Allowed, nil
}

// reserveNothing is the reservation of n = 0 tokens: granted, to run when l is not in debt.
func (c *Client) reserveNothing(ctx context.Context, l Limit) (*Reservation, error) {
	r, err := c.probe(ctx, l)
	if err != nil {
		return nil, err
	}
	res := &Reservation{Result: r, c: c, ok: true}
	if inDebt(r) {
		// A debt no refill pays (a limit whose capacity cannot hold the probe) has no RetryAt.
		res.at, res.ok = r.RetryAt, !r.RetryAt.IsZero()
	}
	return res, nil
}

func (c *Client) waitN(ctx context.Context, l Limit, n float64) error {
	if n != 0 {
		l.Count = n
		_, err := c.WaitRequest(ctx, Request{Limits: []Limit{l}})
		return err
	}
	if err := endedErr(ctx); err != nil {
		return err
	}
	r, err := c.reserveNothing(ctx, l)
	if err != nil {
		return err
	}
	if !r.OK() {
		return &DeniedError{Result: r.Result}
	}
	return c.sleepUntil(ctx, r.at)
}
