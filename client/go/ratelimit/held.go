package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Lease is a held lease on slots of a concurrency limit, from Client.Acquire:
//
//	lease, err := c.Acquire(ctx, ratelimit.Slots("llm_calls", orgID, 1))
//	if err != nil { ... }                  // *AcquireDeniedError: no free slot (RetryAfter)
//	defer lease.Release(context.Background())
//	callTheModel(lease.Context())          // cancelled if the lease is lost
//
// While held, a goroutine extends the lease every AcquireRequest.Heartbeat (default: a third of
// its TTL), each time by the same TTL. A heartbeat's Extend waits for the connection (a server
// restarting is waited for) but never past the lease's expiry, counted from the sending of the
// last call that set it; after a failed Extend the next comes sooner (half the time left, at
// most the period). Nor does the next Extend ever come after the expiry: when the period would
// bring it there (a Heartbeat not shorter than the TTL, an Acquire or Extend answered late), it
// comes after half the time left. The lease is lost when an Extend answers LeaseNotHeld (it
// expired, was reset, or was released elsewhere), or at its expiry when no Extend succeeded
// before it: the holder may no longer count on its slots. A lease without a heartbeat
// (Heartbeat < 0) is lost at its expiry. Lost closes Lost(), cancels Context() and sets Err() to
// an error wrapping ErrLeaseLost. A lease answered to a retry (Replayed) is extended at once,
// since how much of its life is left is not known here. Release stops the heartbeat and gives the
// slots back. The methods are safe for concurrent use.
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
	expiry   *time.Timer   // without a heartbeat: marks the lease lost at its expiry
	stopOnce sync.Once     // Release's stopping of the heartbeat

	relMu    sync.Mutex // serializes Release calls
	released bool       // a Release call succeeded

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
	validUntil := sent.Add(l.life)
	first := l.every
	if r.Replayed {
		// The lease of an earlier Acquire: its life is what is left of it, which this machine's
		// clock can only estimate from the server's ExpiresAt. Extended at once.
		if at := info.ExpiresAt; !at.IsZero() && at.Before(validUntil) {
			validUntil = at
		}
		first = 0
	}
	switch {
	case l.life <= 0:
		close(l.done)
	case l.every <= 0:
		close(l.done)
		l.expiry = time.AfterFunc(time.Until(validUntil), func() {
			l.markLost(fmt.Errorf("%w: it expired (no heartbeat)", ErrLeaseLost))
		})
	default:
		go l.heartbeat(first, validUntil)
	}
	return l
}

// The shortest pause between a failed heartbeat and the next.
const minHeartbeatRetry = 10 * time.Millisecond

// untilNext is the heartbeat's wait for its next Extend: d, unless that would reach validUntil;
// then half the time left, or, with less than twice minHeartbeatRetry left, the time left (the
// lease is then lost at its expiry).
func untilNext(d time.Duration, validUntil time.Time) time.Duration {
	left := time.Until(validUntil)
	switch {
	case d < left:
		return d
	case left/2 >= minHeartbeatRetry:
		return left / 2
	default:
		return left
	}
}

// heartbeat extends the lease, first after `first`, then every l.every, until Release or until
// the lease is lost. validUntil is when the lease expires unless extended, by this machine's
// clock.
func (l *Lease) heartbeat(first time.Duration, validUntil time.Time) {
	defer close(l.done)
	timer := time.NewTimer(untilNext(first, validUntil))
	defer timer.Stop()
	var lastErr error // of the last Extend, nil after one succeeded
	for {
		select {
		case <-l.beatCtx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		if !sent.Before(validUntil) {
			if lastErr != nil {
				l.markLost(fmt.Errorf("%w: no Extend succeeded before its expiry (last: %v)",
					ErrLeaseLost, lastErr))
			} else {
				l.markLost(fmt.Errorf("%w: it expired before the next Extend", ErrLeaseLost))
			}
			return
		}
		// Never past the expiry: a hung call must not keep a lost lease looking held.
		ctx, cancel := context.WithDeadline(l.beatCtx, validUntil)
		res, err := l.c.extend(ctx, l.ref, l.ttl, grpc.WaitForReady(true))
		cancel()
		if l.beatCtx.Err() != nil {
			return
		}
		next := l.every
		switch {
		case err == nil && res.State == LeaseHeld:
			lastErr = nil
			validUntil = sent.Add(l.life)
			if res.Lease != nil {
				l.mu.Lock()
				l.info = *res.Lease
				l.mu.Unlock()
			}
		case err == nil:
			l.markLost(fmt.Errorf("%w: Extend answered %v", ErrLeaseLost, res.State))
			return
		default:
			lastErr = err
			left := time.Until(validUntil)
			if left <= 0 {
				l.markLost(fmt.Errorf("%w: no Extend succeeded before its expiry (last: %v)",
					ErrLeaseLost, err))
				return
			}
			// A channel waiting out its reconnect backoff would fail the next call at once,
			// though the server may be back: it reconnects now.
			if l.c.conn != nil {
				l.c.conn.ResetConnectBackoff()
			}
			if left/2 < next {
				next = left / 2
			}
			if next < minHeartbeatRetry {
				next = left // at the expiry, when the lease is lost
			}
		}
		timer.Reset(untilNext(next, validUntil))
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
// slots back; a lease already lost is released too, in case its slots are still held. The error
// is the Release call's: calling Release again sends it again (the slots otherwise return by
// themselves when the lease expires). Once a call has succeeded, later ones return nil; a lease
// the server no longer holds is not an error. Concurrent calls run one after the other.
func (l *Lease) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return nil
	}
	l.stopOnce.Do(func() {
		l.beatStop()
		<-l.done
		if l.expiry != nil {
			l.expiry.Stop()
		}
		l.mu.Lock()
		if l.err == nil {
			l.err = ErrLeaseReleased
		}
		l.mu.Unlock()
		l.cancel()
	})
	if _, err := l.c.Release(ctx, l.ref); err != nil {
		return err
	}
	l.released = true
	return nil
}
