package ratelimit

import (
	"context"
	"log"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// GRPCOptions configures Client.UnaryServerInterceptor and Client.StreamServerInterceptor.
type GRPCOptions struct {
	// Limit is the rate limit's name. Limit or InFlight is required (the interceptors panic
	// without both): there is no default, so that two services never share a counter unless
	// they name the same limit.
	Limit string
	// Config defines the limit inline; nil for a limit of the server's limits file.
	Config *Config
	// InFlight ("max in flight") is the name of a concurrency limit: each call holds one slot
	// of it, of the key Key gives, from before the handler runs until it returns (or panics):
	// a unary call while it is handled, a stream for as long as it is open. The slot is given
	// back before gRPC sends the call's response (unary) and status, so a client that waits for
	// each call's end before starting the next is never refused by max in flight. A call
	// finding no free slot is answered RESOURCE_EXHAUSTED ("max in flight reached for ...")
	// with a retry time of 1 s (slots come back as calls end, not at the server's retry time,
	// when leases expire), without running. With Limit too, the call's tokens and its slot are
	// taken together (one Acquire, all or nothing). A call running longer than the lease's TTL
	// keeps its slot: the lease is extended in the background (Client.Acquire).
	InFlight string
	// InFlightConfig defines InFlight inline (Kind Concurrency: Capacity is the most calls in
	// flight per key); nil for a limit of the server's limits file.
	InFlightConfig *Config
	// Key is whose counter a call takes from; default: the peer's IP address. A call whose key
	// is "" is answered INVALID_ARGUMENT without asking the service: make Key fall back to
	// another key to limit such calls, or Skip them. So is one whose key is not valid UTF-8
	// (e.g. from binary "-bin" metadata): encode raw bytes (hex, base64).
	Key func(ctx context.Context, fullMethod string) string
	// Cost is the tokens a call takes; default 1. A cost of 0 takes nothing: the call runs
	// without a call to the server (with InFlight, it still takes its slot).
	Cost func(ctx context.Context, fullMethod string) float64
	// Skip lets a call through without taking a token (e.g. grpc.health.v1).
	Skip func(fullMethod string) bool
	// OnUnavailable is FailClosed (default: UNAVAILABLE) or FailOpen.
	OnUnavailable Policy
	// OnError, when set, is told every error of the service (before the Policy applies).
	OnError func(ctx context.Context, fullMethod string, err error)
	// Logger receives a line for each error of the service, as HTTPOptions.Logger does.
	// Default: log.Default().
	Logger *log.Logger
}

// UnaryServerInterceptor consumes a token for each call (and, with InFlight, holds a slot
// while it is handled): a denied call is answered RESOURCE_EXHAUSTED with a
// google.rpc.RetryInfo detail (when a retry can succeed) and the header metadata retry-after
// and ratelimit-* (lower case, as gRPC metadata is); an allowed call gets the ratelimit-*
// headers. When the service is unavailable (UNAVAILABLE, DEADLINE_EXCEEDED) the call is
// answered UNAVAILABLE (FailClosed) or let through (FailOpen); any other error of the service
// is INTERNAL. Errors are logged (see GRPCOptions.Logger). A call whose key is empty or not valid
// UTF-8 is answered INVALID_ARGUMENT, without asking the service and whatever the policy.
//
// With InFlight, the headers describe the concurrency limit (ratelimit-limit its capacity,
// ratelimit-remaining its free slots) unless the rate limit denied. A call refused for want of
// a free slot gets retry-after (and ratelimit-reset) 1 and a RetryInfo delay of at most 1 s, not
// the server's retry time (when a lease expires if no holder releases it): the slots come back
// as calls end. Its status reads "max in flight reached for <InFlight>: NO_FREE_SLOTS"; a
// refusal of the rate limit reads "rate limit <Limit> exceeded: <reason>" and keeps the server's
// retry time, the later one when both refuse.
//
// It panics when opts.Limit and opts.InFlight are both empty or opts.OnUnavailable is not a
// Policy.
func (c *Client) UnaryServerInterceptor(opts GRPCOptions) grpc.UnaryServerInterceptor {
	a := c.newAdmission(opts)
	return func(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo,
		handler grpc.UnaryHandler) (interface{}, error) {
		release, err := a.admit(ctx, info.FullMethod, func(md metadata.MD) error {
			return grpc.SetHeader(ctx, md)
		})
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls: one token per stream,
// and with InFlight one slot held until the stream's handler returns. It panics as
// UnaryServerInterceptor does.
func (c *Client) StreamServerInterceptor(opts GRPCOptions) grpc.StreamServerInterceptor {
	a := c.newAdmission(opts)
	return func(srv interface{}, ss grpc.ServerStream, info *grpc.StreamServerInfo,
		handler grpc.StreamHandler) error {
		release, err := a.admit(ss.Context(), info.FullMethod, ss.SetHeader)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// admission is the state of one interceptor.
type admission struct {
	c    *Client
	opts GRPCOptions
	logs *logThrottle
}

func (c *Client) newAdmission(opts GRPCOptions) *admission {
	if opts.Limit == "" && opts.InFlight == "" {
		panic("ratelimit: GRPCOptions.Limit is required (or InFlight): the name of the limit " +
			"this interceptor takes from (no default, so that unrelated services never share a " +
			"counter)")
	}
	checkPolicy("GRPCOptions", opts.OnUnavailable)
	return &admission{c: c, opts: opts, logs: newLogThrottle(opts.Logger)}
}

// keep is admit's release when the call holds nothing.
func keep() {}

// admit decides one call: nil error lets it run, and release (never nil) then gives back its
// slot; call it when the handler has returned.
func (a *admission) admit(ctx context.Context, method string,
	setHeader func(metadata.MD) error) (release func(), err error) {
	opts := a.opts
	if opts.Skip != nil && opts.Skip(method) {
		return keep, nil
	}
	key := ""
	if opts.Key != nil {
		key = opts.Key(ctx, method)
	} else if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		key = remoteIP(p.Addr.String())
	}
	if bad := badKey(key); bad != "" {
		return nil, status.Error(codes.InvalidArgument, bad)
	}
	cost := 1.0
	if opts.Cost != nil {
		cost = opts.Cost(ctx, method)
	}
	limits := admissionLimits(opts.InFlight, opts.InFlightConfig, opts.Limit, opts.Config, key,
		cost)
	if len(limits) == 0 { // a cost of 0, no slot: nothing to ask
		return keep, nil
	}
	name := opts.Limit
	var res *Result
	var lease *Lease
	if opts.InFlight != "" {
		name = opts.InFlight
		lease, res, err = a.c.acquireForRequest(ctx, limits)
	} else {
		res, err = a.c.Consume(ctx, Request{Limits: limits})
	}
	if err != nil {
		if opts.OnError != nil {
			opts.OnError(ctx, method, err)
		}
		switch {
		case !unavailable(err):
			a.logs.log(err, "gRPC interceptor", name, "answered INTERNAL")
			return nil, status.Error(codes.Internal, "rate limit error")
		case opts.OnUnavailable == FailOpen:
			a.logs.log(err, "gRPC interceptor", name, "let through (FailOpen)")
			return keep, nil
		default:
			a.logs.log(err, "gRPC interceptor", name, "answered UNAVAILABLE (FailClosed)")
			return nil, status.Error(codes.Unavailable, "rate limit unavailable")
		}
	}
	md := metadata.MD{}
	for name, value := range limitHeaders(res) {
		md.Set(name, value)
	}
	_ = setHeader(md)
	if !res.Allowed {
		return nil, deniedStatus(res, name, opts.InFlight != "")
	}
	if lease == nil {
		return keep, nil
	}
	return releaseOnce(lease, a.logs, "gRPC interceptor", name), nil
}

// deniedStatus is RESOURCE_EXHAUSTED naming the deciding limit and its reason, with a
// google.rpc.RetryInfo detail carrying the retry time (the server's retry_after, or
// inFlightRetryAfter for the concurrency limit's refusal) when a retry can succeed. inFlight
// says the request had a concurrency limit (first): its refusal reads as a concurrency limit's
// ("max in flight reached for inflight: NO_FREE_SLOTS"), a rate limit's as one ("rate limit api
// exceeded: INSUFFICIENT_TOKENS").
func deniedStatus(res *Result, name string, inFlight bool) error {
	if res.DeniedBy >= 0 && res.DeniedBy < len(res.Limits) {
		name = res.Limits[res.DeniedBy].Name
	}
	format := "rate limit %s exceeded: %v"
	switch {
	case !inFlight || !deniedByInFlight(res):
	case res.Reason == NoFreeSlots:
		format = "max in flight reached for %s: %v"
	default: // e.g. an override blocking the key
		format = "max in flight %s refused: %v"
	}
	st := status.Newf(codes.ResourceExhausted, format, name, res.Reason)
	if res.RetryAt.IsZero() {
		return st.Err()
	}
	delay := res.RetryAfter
	if delay < 0 {
		delay = 0
	}
	if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = with
	}
	return st.Err()
}
