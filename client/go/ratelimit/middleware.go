package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Policy is what a middleware does when the rate-limit service is unavailable: the call to it
// fails with UNAVAILABLE (the server cannot be reached, or its store failed) or
// DEADLINE_EXCEEDED. Any other failure (NOT_FOUND for a misspelt limit name, INVALID_ARGUMENT,
// PERMISSION_DENIED, INTERNAL, CANCELLED...) is a configuration or programming error: it is
// logged and answered HTTP 500 / gRPC INTERNAL whatever the Policy.
type Policy int

const (
	// FailClosed refuses the request: HTTP 503, gRPC UNAVAILABLE. The default: a limit is a
	// promise about cost or abuse, which an outage of the service must not silently break.
	FailClosed Policy = iota
	// FailOpen lets the request through unlimited, for services that put availability first.
	FailOpen
)

// String is the name of the constant ("FailClosed", "FailOpen").
func (p Policy) String() string {
	switch p {
	case FailClosed:
		return "FailClosed"
	case FailOpen:
		return "FailOpen"
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// HTTPOptions configures Client.HTTPMiddleware.
type HTTPOptions struct {
	// Limit is the rate limit's name. Limit or InFlight is required (HTTPMiddleware panics
	// without both): there is no default, so that two routes or services never share a counter
	// unless they name the same limit.
	Limit string
	// InFlight ("max in flight") is the name of a concurrency limit: each request holds one
	// slot of it, of the key Key gives, while the handler runs. The slot is given back before
	// the end of the response is sent: when the handler returns (or panics), or, when Write or
	// Flush would send the end sooner, just before (the last byte of a declared Content-Length,
	// the headers of a response without a body). So a client that waits for each response
	// before sending the next is never refused by max in flight. A request finding no free
	// slot is answered 429 with Retry-After: 1 (slots come back as requests end, not at the
	// server's retry time, when leases expire), without running. With Limit too, the
	// request's token and its slot are taken together (one Acquire, all or nothing). A request
	// running longer than the lease's TTL keeps its slot: the lease is extended in the
	// background (Client.Acquire).
	InFlight string
	// InFlightConfig defines InFlight inline (Kind Concurrency: Capacity is the most requests
	// in flight per key); nil for a limit of the server's limits file.
	InFlightConfig *Config
	// Config defines the limit inline; nil for a limit of the server's limits file.
	Config *Config
	// Key is whose counter a request takes from; default RemoteIP (the client's IP address,
	// from RemoteAddr; behind a proxy, set it from a header the proxy sets and you trust). A
	// request whose Key is "" is answered 400 Bad Request without asking the service: make Key
	// fall back to another key (e.g. RemoteIP) to limit such requests, or Skip them. So is one
	// whose Key is not valid UTF-8 (keys are protobuf strings): encode raw bytes (hex, base64).
	Key func(*http.Request) string
	// Cost is the tokens a request takes; default 1. A cost of 0 takes nothing: the request runs
	// without a call to the server (with InFlight, it still takes its slot).
	Cost func(*http.Request) float64
	// Skip lets a request through without taking a token (e.g. health checks).
	Skip func(*http.Request) bool
	// OnUnavailable is FailClosed (default) or FailOpen.
	OnUnavailable Policy
	// OnError, when set, is told every error of the service (before the Policy applies).
	OnError func(*http.Request, error)
	// Logger receives a line for each error of the service (the status code and message, and
	// what the request was answered), at most one per distinct code and message every 10 s,
	// with the count of the repeats left out. Default: log.Default().
	Logger *log.Logger
}

// Headers of the IETF draft "RateLimit header fields for HTTP" (draft-ietf-httpapi-ratelimit-
// headers-06), plus Retry-After (RFC 9110) on a denial.
const (
	HeaderLimit      = "RateLimit-Limit"
	HeaderRemaining  = "RateLimit-Remaining"
	HeaderReset      = "RateLimit-Reset"
	HeaderRetryAfter = "Retry-After"
)

// HTTPMiddleware consumes a token for each request (and, with InFlight, holds a slot while it
// runs): an allowed request goes on with the
// RateLimit-* headers set, a denied one is answered 429 Too Many Requests with Retry-After and
// the RateLimit-* headers. When the service is unavailable (UNAVAILABLE, DEADLINE_EXCEEDED) the
// request is answered 503 (FailClosed) or let through (FailOpen); any other error of the service
// (a misconfigured limit: NOT_FOUND, INVALID_ARGUMENT...) is answered 500 whatever the policy.
// Errors are logged (see HTTPOptions.Logger). A request whose key is empty or not valid UTF-8 is
// answered 400, without asking the service and whatever the policy.
//
// With InFlight, the headers describe the concurrency limit (RateLimit-Limit its capacity,
// RateLimit-Remaining its free slots) unless the rate limit denied. A request refused for want
// of a free slot gets Retry-After (and RateLimit-Reset) 1, not the server's retry time (when a
// lease expires if no holder releases it): the slots come back as requests end. A refusal of
// the rate limit keeps the server's retry time, the later one when both refuse.
//
// It panics when opts.Limit and opts.InFlight are both empty or opts.OnUnavailable is not a
// Policy.
func (c *Client) HTTPMiddleware(opts HTTPOptions) func(http.Handler) http.Handler {
	if opts.Limit == "" && opts.InFlight == "" {
		panic("ratelimit: HTTPOptions.Limit is required (or InFlight): the name of the limit " +
			"this middleware takes from (no default, so that unrelated routes never share a " +
			"counter)")
	}
	checkPolicy("HTTPOptions", opts.OnUnavailable)
	keyOf := RemoteIP
	if opts.Key != nil {
		keyOf = opts.Key
	}
	logs := newLogThrottle(opts.Logger)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.Skip != nil && opts.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			key := keyOf(r)
			if bad := badKey(key); bad != "" {
				http.Error(w, bad, http.StatusBadRequest)
				return
			}
			cost := 1.0
			if opts.Cost != nil {
				cost = opts.Cost(r)
			}
			limits := admissionLimits(opts.InFlight, opts.InFlightConfig, opts.Limit, opts.Config,
				key, cost)
			if len(limits) == 0 { // a cost of 0, no slot: nothing to ask
				next.ServeHTTP(w, r)
				return
			}
			name := opts.Limit
			var res *Result
			var lease *Lease
			var err error
			if opts.InFlight != "" {
				name = opts.InFlight
				lease, res, err = c.acquireForRequest(r.Context(), limits)
			} else {
				res, err = c.Consume(r.Context(), Request{Limits: limits})
			}
			if err != nil {
				if opts.OnError != nil {
					opts.OnError(r, err)
				}
				switch {
				case !unavailable(err):
					logs.log(err, "HTTP middleware", name, "answered 500")
					http.Error(w, "rate limit error", http.StatusInternalServerError)
				case opts.OnUnavailable == FailOpen:
					logs.log(err, "HTTP middleware", name, "let through (FailOpen)")
					next.ServeHTTP(w, r)
				default:
					logs.log(err, "HTTP middleware", name, "answered 503 (FailClosed)")
					http.Error(w, "rate limit unavailable", http.StatusServiceUnavailable)
				}
				return
			}
			if lease != nil {
				release := releaseOnce(lease, logs, "HTTP middleware", name)
				defer release()
				// The slot goes back before the response's end is written, too.
				w = newInFlightWriter(w, r, release)
			}
			for name, value := range limitHeaders(res) {
				w.Header().Set(name, value)
			}
			if !res.Allowed {
				http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// releaseOnce is the release of a request's slot (lease): the first call gives the slot back
// (bounded by the client's timeout), later ones do nothing. A failure is logged; the slot then
// comes back when the lease expires.
func releaseOnce(lease *Lease, logs *logThrottle, component, name string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			// Not the request's context: the slot goes back even when the client is gone.
			if err := lease.Release(context.Background()); err != nil {
				logs.log(err, component, name,
					"slot not given back (it comes back when its lease expires)")
			}
		})
	}
}

// acquireForRequest acquires the slot (and tokens) of one request (admissionLimits: the
// concurrency limit first): the held lease when allowed, and the answer as a Result for the
// headers either way (a refusal as refusalOfAcquire makes it).
func (c *Client) acquireForRequest(ctx context.Context, limits []Limit) (*Lease, *Result, error) {
	lease, err := c.Acquire(ctx, AcquireRequest{Limits: limits})
	var denied *AcquireDeniedError
	switch {
	case errors.As(err, &denied):
		return nil, refusalOfAcquire(denied.Result), nil
	case err != nil:
		return nil, nil, err
	}
	return lease, resultOfAcquire(lease.Result()), nil
}

func resultOfAcquire(a *AcquireResult) *Result {
	return &Result{Allowed: a.Allowed, Limits: a.Limits, RetryAt: a.RetryAt,
		RetryAfter: a.RetryAfter, Reason: a.Reason, DeniedBy: a.DeniedBy, Replayed: a.Replayed}
}

// inFlightRetryAfter is the retry time (Retry-After: 1) of a middleware's or interceptor's
// refusal for want of a free slot of its concurrency limit (InFlight). The server's retry time
// for it is when a lease expires if no holder releases it, up to the whole lease TTL; but the
// middlewares release each request's slot as soon as it ends, so one is usually free much
// sooner. A refusal of a rate limit keeps the server's retry time.
const inFlightRetryAfter = time.Second

// refusalOfAcquire is the Result of a denied Acquire of admissionLimits with a concurrency limit
// (first): when that limit decided, its retry time is cut to inFlightRetryAfter, and a rate
// limit denying too with a later retry time decides instead (the server's rule: the latest
// retry decides).
func refusalOfAcquire(a *AcquireResult) *Result {
	res := resultOfAcquire(a)
	if !deniedByInFlight(res) || res.RetryAt.IsZero() || res.RetryAfter <= inFlightRetryAfter {
		return res // a rate limit decided, no retry can succeed, or a slot frees by then anyway
	}
	res.RetryAt = res.RetryAt.Add(inFlightRetryAfter - res.RetryAfter)
	res.RetryAfter = inFlightRetryAfter
	for i := 1; i < len(res.Limits); i++ {
		if l := res.Limits[i]; !l.Allowed && !l.RetryAt.IsZero() && l.RetryAfter > res.RetryAfter {
			res.RetryAt, res.RetryAfter, res.Reason, res.DeniedBy = l.RetryAt, l.RetryAfter,
				l.Reason, i
		}
	}
	return res
}

// deniedByInFlight reports whether the refusal res of admissionLimits with a concurrency limit
// is that limit's (the first; NoFreeSlots is a concurrency limit's reason only).
func deniedByInFlight(res *Result) bool {
	return !res.Allowed && (res.DeniedBy == 0 || res.Reason == NoFreeSlots)
}

// admissionLimits are the limits a middleware asks for one request: a slot of the concurrency
// limit inFlight (when set) first, then cost tokens of the rate limit (when set).
func admissionLimits(inFlight string, inFlightConfig *Config, limit string, config *Config,
	key string, cost float64) []Limit {
	var limits []Limit
	if inFlight != "" {
		limits = append(limits, Limit{Name: inFlight, Key: key, Count: 1, Config: inFlightConfig})
	}
	// A cost of 0 takes nothing, as n = 0 does in x/time/rate (a Count of 0 would be sent as the
	// server's default, 1).
	if limit != "" && cost != 0 {
		limits = append(limits, Limit{Name: limit, Key: key, Count: cost, Config: config})
	}
	return limits
}

// MaxKeyBytes is the longest key the service takes (ratelimit.proto: a key is 1..1024 bytes).
const MaxKeyBytes = 1024

// badKey is why a request's key cannot be sent ("" when it can): empty, not valid UTF-8 (the
// client would refuse it with INVALID_ARGUMENT, which the middlewares answer as a configuration
// error), or longer than MaxKeyBytes (the service would refuse it so). Each is the request's
// fault, not the service's nor the configuration's: answered 400 / INVALID_ARGUMENT without a
// call, never let through by FailOpen. The message does not echo the key (an API key, say).
func badKey(key string) string {
	switch {
	case key == "":
		return "rate limit key missing"
	case !utf8.ValidString(key):
		return "rate limit key is not valid UTF-8"
	case len(key) > MaxKeyBytes:
		return "rate limit key is longer than 1024 bytes"
	}
	return ""
}

// RemoteIP is the IP address of the client (from r.RemoteAddr, without the port): the
// middleware's default key.
func RemoteIP(r *http.Request) string { return remoteIP(r.RemoteAddr) }

func checkPolicy(options string, p Policy) {
	if p != FailClosed && p != FailOpen {
		panic(fmt.Sprintf("ratelimit: %s.OnUnavailable: %v is neither FailClosed nor FailOpen",
			options, p))
	}
}

// unavailable reports whether err means the service is unavailable (UNAVAILABLE, which is also
// what a call that cannot reach the server fails with, or DEADLINE_EXCEEDED), as opposed to an
// error of configuration or programming, which no Policy may turn into a pass.
func unavailable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// limitHeaders are the RateLimit-* headers of a result (of a one-limit request), and
// Retry-After on a denial. Seconds are rounded up, so a client waiting that long is not early.
func limitHeaders(res *Result) map[string]string {
	h := map[string]string{}
	if res.FailedOpen || len(res.Limits) == 0 {
		return h
	}
	l := res.Limits[0]
	if res.DeniedBy >= 0 && res.DeniedBy < len(res.Limits) {
		l = res.Limits[res.DeniedBy]
	}
	h[HeaderLimit] = strconv.FormatFloat(math.Floor(l.Capacity), 'f', -1, 64)
	h[HeaderRemaining] = strconv.FormatFloat(math.Max(0, math.Floor(l.Value)), 'f', -1, 64)
	// The server's retry_after (not retry_at minus the local clock, which may be skewed), cut
	// to 1 s for a middleware's concurrency limit (refusalOfAcquire). A denial that no retry can
	// lift (COUNT_EXCEEDS_CAPACITY) has none.
	if !res.Allowed && !res.RetryAt.IsZero() {
		seconds := strconv.FormatInt(ceilSeconds(res.RetryAfter), 10)
		h[HeaderRetryAfter] = seconds
		h[HeaderReset] = seconds
	}
	return h
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func remoteIP(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
