package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lease is a held lease on slots of a concurrency limit, from Client.Acquire:
//
//	lease, err := c.Acquire(ctx, ratelimit.Slots("llm_calls", orgID, 1))
//	if err != nil { ... }                  // *AcquireDeniedError: no free slot (RetryAfter)
//	defer lease.Release(context.Background())
//	callTheModel(lease.Context())          // cancelled if the lease is lost
//
// While held, a goroutine extends the lease every AcquireRequest.Heartbeat (default: a third of
// its TTL), each time by the same TTL. The lease is lost when an Extend answers LeaseNotHeld
// (it expired, was reset, or was released elsewhere), or when Extends have failed and the next
// one would come after the lease's expiry (counted from the sending of the last call that set
// it): the holder may no longer count on its slots. Lost closes Lost(), cancels Context() and
// sets Err() to an error wrapping ErrLeaseLost. Release stops the heartbeat and gives the slots
// back. The methods are safe for concurrent use.
type Lease struct {
	c      *Client
	ref    LeaseRef
	ttl    time.Duration // sent with each Extend (0: the limit's lease_ttl)
	life   time.Duration // how long the lease lives after each Acquire or Extend
	every  time.Duration // heartbeat period; <= 0: none
	result *AcquireResult

	ctx      context.Context // cancelled when lost or released
	cancel   context.CancelFunc
	beatCtx  context.Context // the heartbeat's calls; cancelled by Release
	beatStop context.CancelFunc
	lost     chan struct{}
	done     chan struct{} // closed when the heartbeat goroutine has returned
	once     sync.Once     // Release's

	mu   sync.Mutex
	info LeaseInfo
	err  error
}

// Acquire takes slots of a concurrency limit (with the tokens of any rate limits in req, all
// or nothing) and holds them: the returned Lease is extended in the background until Release
// or until it is lost. A denial returns an *AcquireDeniedError carrying the result (RetryAfter,
// Reason); a failed call returns an *Error. For a lease without a heartbeat, or a denial as a
// value, use TryAcquire.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	sent := time.Now()
	r, err := c.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	if !r.Allowed || r.Lease == nil {
		return nil, &AcquireDeniedError{Result: r}
	}
	return c.hold(req, r, sent), nil
}

func (c *Client) hold(req AcquireRequest, r *AcquireResult, sent time.Time) *Lease {
	info := *r.Lease
	l := &Lease{c: c, ttl: req.TTL, result: r, info: info, lost: make(chan struct{}),
		done: make(chan struct{})}
	l.ref = LeaseRef{Name: info.Name, Key: info.Key, ID: info.ID}
	for _, lim := range req.Limits {
		if lim.Name == info.Name && lim.Key == info.Key && lim.Config != nil &&
			lim.Config.Kind == Concurrency {
			l.ref.Config = lim.Config
		}
	}
	l.life = req.TTL
	if l.life <= 0 {
		l.life = info.ExpiresAt.Sub(info.AcquiredAt)
	}
	l.every = req.Heartbeat
	if l.every == 0 {
		l.every = l.life / 3
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.beatCtx, l.beatStop = context.WithCancel(context.Background())
	if l.every <= 0 || l.life <= 0 {
		close(l.done)
	} else {
		go l.heartbeat(sent.Add(l.life))
	}
	return l
}

// heartbeat extends the lease every l.every until Release or until the lease is lost.
// validUntil is when the lease expires unless extended, by this machine's clock.
func (l *Lease) heartbeat(validUntil time.Time) {
	defer close(l.done)
	timer := time.NewTimer(l.every)
	defer timer.Stop()
	for {
		select {
		case <-l.beatCtx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		res, err := l.c.Extend(l.beatCtx, l.ref, l.ttl)
		if l.beatCtx.Err() != nil {
			return
		}
		switch {
		case err == nil && res.State == LeaseHeld:
			validUntil = sent.Add(l.life)
			if res.Lease != nil {
				l.mu.Lock()
				l.info = *res.Lease
				l.mu.Unlock()
			}
		case err == nil:
			l.markLost(fmt.Errorf("%w: Extend answered %v", ErrLeaseLost, res.State))
			return
		case !time.Now().Add(l.every).Before(validUntil):
			l.markLost(fmt.Errorf("%w: every Extend failed until its expiry (last: %v)",
				ErrLeaseLost, err))
			return
		}
		timer.Reset(l.every)
	}
}

func (l *Lease) markLost(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.mu.Unlock()
	close(l.lost)
	l.cancel()
}

// ID is the lease's id.
func (l *Lease) ID() string { return l.ref.ID }

// Ref names the lease, for Client.Release and Client.Extend.
func (l *Lease) Ref() LeaseRef { return l.ref }

// Info is the lease as the server last described it (ExpiresAt moves with each heartbeat).
func (l *Lease) Info() LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Result is the Acquire's answer (the per-limit results, Replayed).
func (l *Lease) Result() *AcquireResult { return l.result }

// Lost is closed when the lease is lost (not when it is released).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context is cancelled when the lease is lost or released: run the work the slots are for
// under it.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held; an error wrapping ErrLeaseLost once it is lost;
// ErrLeaseReleased once released (when it was not lost before).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release stops the heartbeat (waiting for an Extend in flight to be abandoned) and gives the
// slots back; a lease already lost is released too, in case its slots are still held. Only the
// first call does anything; later ones return nil. The error is the Release call's (the slots
// then return by themselves when the lease expires); a lease the server no longer holds is
// not an error.
func (l *Lease) Release(ctx context.Context) error {
	first := false
	l.once.Do(func() { first = true })
	if !first {
		return nil
	}
	l.beatStop()
	<-l.done
	l.mu.Lock()
	if l.err == nil {
		l.err = ErrLeaseReleased
	}
	l.mu.Unlock()
	l.cancel()
	_, err := l.c.Release(ctx, l.ref)
	return err
}
