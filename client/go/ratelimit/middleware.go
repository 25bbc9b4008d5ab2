package ratelimit

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Policy is what a middleware does when the rate-limit service cannot answer: the call fails
// with UNAVAILABLE (unreachable, or its store failed), DEADLINE_EXCEEDED, CANCELLED, UNKNOWN,
// INTERNAL or RESOURCE_EXHAUSTED.
type Policy int

const (
	// FailClosed refuses the request: HTTP 503, gRPC UNAVAILABLE. The default.
	FailClosed Policy = iota
	// FailOpen lets the request through unlimited.
	FailOpen
)

// HTTPOptions configures Client.HTTPMiddleware.
type HTTPOptions struct {
	// Limit is the limit's name. Required.
	Limit string
	// Config defines the limit inline; nil for a limit of the server's limits file.
	Config *Config
	// Key is whose counter a request takes from; default: the client's IP address (from
	// RemoteAddr; put the middleware behind one that sets RemoteAddr from a trusted proxy
	// header when there is one).
	Key func(*http.Request) string
	// Cost is the tokens a request takes; default 1.
	Cost func(*http.Request) float64
	// Skip lets a request through without taking a token (e.g. health checks).
	Skip func(*http.Request) bool
	// OnUnavailable is FailClosed (default) or FailOpen.
	OnUnavailable Policy
	// OnError, when set, is told every error of the service (before the Policy applies).
	OnError func(*http.Request, error)
}

// Headers of the IETF draft "RateLimit header fields for HTTP" (draft-ietf-httpapi-ratelimit-
// headers-06), plus Retry-After (RFC 9110) on a denial.
const (
	HeaderLimit      = "RateLimit-Limit"
	HeaderRemaining  = "RateLimit-Remaining"
	HeaderReset      = "RateLimit-Reset"
	HeaderRetryAfter = "Retry-After"
)

// HTTPMiddleware consumes a token for each request: an allowed request goes on with the
// RateLimit-* headers set, a denied one is answered 429 Too Many Requests with Retry-After and
// the RateLimit-* headers. A service failure is answered 503 (FailClosed) or lets the request
// through (FailOpen); any other error of the service (a misconfigured limit: INVALID_ARGUMENT,
// NOT_FOUND...) is answered 500 whatever the policy.
func (c *Client) HTTPMiddleware(opts HTTPOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.Skip != nil && opts.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			key := remoteIP(r.RemoteAddr)
			if opts.Key != nil {
				key = opts.Key(r)
			}
			cost := 1.0
			if opts.Cost != nil {
				cost = opts.Cost(r)
			}
			res, err := c.Consume(r.Context(),
				Request{Limits: []Limit{{Name: opts.Limit, Key: key, Count: cost, Config: opts.Config}}})
			if err != nil {
				if opts.OnError != nil {
					opts.OnError(r, err)
				}
				switch {
				case !unreachable(err):
					http.Error(w, "rate limit misconfigured", http.StatusInternalServerError)
				case opts.OnUnavailable == FailOpen:
					next.ServeHTTP(w, r)
				default:
					http.Error(w, "rate limit unavailable", http.StatusServiceUnavailable)
				}
				return
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

// GRPCOptions configures Client.UnaryServerInterceptor and Client.StreamServerInterceptor.
type GRPCOptions struct {
	// Limit is the limit's name. Required.
	Limit string
	// Config defines the limit inline; nil for a limit of the server's limits file.
	Config *Config
	// Key is whose counter a call takes from; default: the peer's IP address.
	Key func(ctx context.Context, fullMethod string) string
	// Cost is the tokens a call takes; default 1.
	Cost func(ctx context.Context, fullMethod string) float64
	// Skip lets a call through without taking a token (e.g. grpc.health.v1).
	Skip func(fullMethod string) bool
	// OnUnavailable is FailClosed (default: UNAVAILABLE) or FailOpen.
	OnUnavailable Policy
	// OnError, when set, is told every error of the service (before the Policy applies).
	OnError func(ctx context.Context, fullMethod string, err error)
}

// UnaryServerInterceptor consumes a token for each call: a denied call is answered
// RESOURCE_EXHAUSTED with the header metadata retry-after and ratelimit-* (lower case, as gRPC
// metadata is); an allowed call gets the ratelimit-* headers. A service failure is answered
// UNAVAILABLE (FailClosed) or lets the call through (FailOpen); any other error of the service
// is INTERNAL.
func (c *Client) UnaryServerInterceptor(opts GRPCOptions) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo,
		handler grpc.UnaryHandler) (interface{}, error) {
		if err := c.admit(ctx, info.FullMethod, opts, func(md metadata.MD) error {
			return grpc.SetHeader(ctx, md)
		}); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls: one token per stream.
func (c *Client) StreamServerInterceptor(opts GRPCOptions) grpc.StreamServerInterceptor {
	return func(srv interface{}, ss grpc.ServerStream, info *grpc.StreamServerInfo,
		handler grpc.StreamHandler) error {
		if err := c.admit(ss.Context(), info.FullMethod, opts, ss.SetHeader); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func (c *Client) admit(ctx context.Context, method string, opts GRPCOptions,
	setHeader func(metadata.MD) error) error {
	if opts.Skip != nil && opts.Skip(method) {
		return nil
	}
	key := ""
	if opts.Key != nil {
		key = opts.Key(ctx, method)
	} else if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		key = remoteIP(p.Addr.String())
	}
	cost := 1.0
	if opts.Cost != nil {
		cost = opts.Cost(ctx, method)
	}
	res, err := c.Consume(ctx,
		Request{Limits: []Limit{{Name: opts.Limit, Key: key, Count: cost, Config: opts.Config}}})
	if err != nil {
		if opts.OnError != nil {
			opts.OnError(ctx, method, err)
		}
		switch {
		case !unreachable(err):
			return status.Error(codes.Internal, "rate limit misconfigured")
		case opts.OnUnavailable == FailOpen:
			return nil
		default:
			return status.Error(codes.Unavailable, "rate limit unavailable")
		}
	}
	md := metadata.MD{}
	for name, value := range limitHeaders(res) {
		md.Set(name, value)
	}
	_ = setHeader(md)
	if !res.Allowed {
		return status.Errorf(codes.ResourceExhausted, "rate limit %s exceeded: %v", opts.Limit,
			res.Reason)
	}
	return nil
}

// unreachable reports whether err means the service could not answer (as opposed to an
// answer refusing the request as invalid).
func unreachable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return true
	}
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown,
		codes.Internal, codes.ResourceExhausted:
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
	// The server's retry_after (not retry_at minus the local clock, which may be skewed). A
	// denial that no retry can lift (COUNT_EXCEEDS_CAPACITY) has none.
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
