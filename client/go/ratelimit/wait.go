package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
)

// Waiting for a reservation: Client.Wait, WaitN and WaitRequest, which reserve and then sleep
// until the reservation may run, giving it back when the caller gives up.

// Wait reserves one token of (name, key) and blocks until the reservation may run.
func (c *Client) Wait(ctx context.Context, name, key string) error {
	return c.WaitN(ctx, name, key, 1)
}

// WaitN reserves n tokens of (name, key) and blocks until the reservation may run. As in
// golang.org/x/time/rate, n = 0 takes nothing and blocks until the limit is not in debt
// (Limiter.WaitN).
func (c *Client) WaitN(ctx context.Context, name, key string, n float64) error {
	return c.waitN(ctx, Limit{Name: name, Key: key}, n)
}

// WaitRequest reserves the request and blocks until its RetryAt, then returns the reservation.
// A denied reservation returns a *DeniedError at once. When ctx ends before RetryAt (or its
// deadline is before RetryAt, in which case WaitRequest does not wait), the reservation is
// cancelled (Settle with used = 0 for each receipt) and the context's error is returned. A ctx
// that has already ended (cancelled, or its deadline passed) returns its error at once, without
// any call, as rate.Limiter.Wait does.
//
// The Reserve carries a RequestID (a random one unless req has one) and asks for receipts
// whatever req.OmitReceipts says (they are what cancels the reservation). When ctx ends while the
// Reserve is in flight, the server may have reserved without the answer reaching this client:
// WaitRequest then sends the same Reserve again on a context of its own, which the server
// answers with the remembered reservation (or reserves now), and cancels that, so an abandoned
// Wait never leaves a reservation behind.
func (c *Client) WaitRequest(ctx context.Context, req Request) (*Result, error) {
	// Nothing to reserve for a caller that has given up: a Reserve now would only take tokens
	// for a Settle to give back.
	if err := endedErr(ctx); err != nil {
		return nil, err
	}
	if req.RequestID == "" {
		id, err := newRequestID()
		if err != nil {
			return nil, err
		}
		req.RequestID = id
	}
	req.OmitReceipts = false
	r, err := c.Reserve(ctx, req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			c.abandonReserve(req)
			return nil, fmt.Errorf("ratelimit: Reserve: %w", ctxErr)
		}
		// Timed out or cut off on the way: the server may have reserved as well.
		var e *Error
		if errors.As(err, &e) && (e.Code == codes.DeadlineExceeded || e.Code == codes.Canceled ||
			e.Code == codes.Unavailable) {
			c.abandonReserve(req)
		}
		return nil, err
	}
	if !r.Allowed {
		return r.Result, &DeniedError{Result: r.Result}
	}
	if err := c.sleepUntil(ctx, r.RetryAt); err != nil {
		r.Cancel()
		return nil, err
	}
	return r.Result, nil
}

// endedErr is the error of a context that has ended, or whose deadline has passed though its
// timer has not fired yet (context.DeadlineExceeded); nil while it runs.
func endedErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// sleepUntil returns when at has come (at once for a zero or past time), or with an error when
// ctx ends first or its deadline is before at (without waiting, like rate.Limiter.Wait).
func (c *Client) sleepUntil(ctx context.Context, at time.Time) error {
	wait := time.Until(at)
	if at.IsZero() || wait <= 0 {
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(at) {
		return fmt.Errorf("ratelimit: reservation runs at %v, after the context's deadline: %w",
			at, context.DeadlineExceeded)
	}
	return c.sleep(ctx, wait)
}

// abandonReserve gives back what a Reserve whose caller gave up may have taken: the same
// request (same RequestID) again, best effort, on its own deadline, then cancels it.
func (c *Client) abandonReserve(req Request) {
	r, err := c.Reserve(context.Background(), req)
	if err == nil {
		r.Cancel()
	}
}

// newRequestID returns 16 random bytes, hex-encoded.
func newRequestID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ratelimit: request id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// sleepContext sleeps for d or until ctx ends (returning its error).
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
