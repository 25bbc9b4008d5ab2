// Package ratelimit is the Go client of the ratelimit service (ratelimit.v1.RateLimitService).
//
// A Limiter (Client.Limiter) is shaped like golang.org/x/time/rate's, but the limiter lives in
// the server and is shared by every caller:
//
//	c, err := ratelimit.Dial("127.0.0.1:8081")
//	ok, err := c.Allow(ctx, "api", userID)          // Consume 1 token
//	err = c.Wait(ctx, "llm_tokens", orgID)          // Reserve 1 token and wait until it may run
//	r, err := c.Limiter("llm_tokens", orgID).ReserveN(ctx, 900) // r.Delay(), r.Cancel()
//
// As in x/time/rate, a count n = 0 (AllowN, ReserveN, WaitN) takes nothing.
//
// Every call carries a deadline (DefaultTimeout unless WithTimeout says otherwise, or the
// caller's context ends earlier). Only Check is retried (on UNAVAILABLE): Consume and Reserve
// take tokens, and a retry of a call whose answer was lost could take them twice. A Consume or
// Reserve carrying a RequestID may be retried by the caller: the server answers the retry with
// the remembered answer (Result.Replayed).
//
// A gRPC failure comes back as an *Error, which keeps the status code and the field the server
// named (errors.As, or status.Code(err)).
//
// Administrative calls send the admin token (WithAdminToken): Reset, and the overrides of
// limits (SetOverride, GetOverride, DeleteOverride, ListOverrides, ListOverrideAudit), which
// raise, cut, block or lift one key's limit or those of the keys matching a pattern at run time.
//
// Licensed under the Apache License 2.0, as the whole ratelimit repository (its LICENSE file).
package ratelimit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// DefaultTimeout is the deadline of each call unless WithTimeout sets another.
const DefaultTimeout = time.Second

// DefaultCheckAttempts is how many times Check is tried (the first try included) unless
// WithCheckAttempts sets another.
const DefaultCheckAttempts = 3

// AdminTokenEnv is the environment variable the admin token for Reset and the override calls
// is read from when neither
// WithAdminToken nor WithAdminTokenFile is given.
const AdminTokenEnv = "RATELIMIT_ADMIN_TOKEN"

// Kind is how a limit refills.
type Kind int32

const (
	// TokenBucket refills continuously at Rate per Period, up to Capacity.
	TokenBucket Kind = Kind(pb.Kind_TOKEN_BUCKET)
	// FixedWindow adds Rate tokens at each window boundary (every Period, offset by Start).
	FixedWindow Kind = Kind(pb.Kind_FIXED_WINDOW)
	// Concurrency holds at most Capacity slots at once, taken by Acquire for a lease that ends
	// when released or when it expires unextended (lease.go). Uses Capacity, LeaseTTL and
	// MaxLeaseTTL; Rate, Period, MaxReserved, Start and Jitter must be unset.
	Concurrency Kind = Kind(pb.Kind_CONCURRENCY)
)

// DenyReason says why a limit denied.
type DenyReason int32

const (
	// NotDenied: the limit allows.
	NotDenied DenyReason = DenyReason(pb.DenyReason_DENY_REASON_UNSPECIFIED)
	// InsufficientTokens: too few tokens now; retry at RetryAt.
	InsufficientTokens DenyReason = DenyReason(pb.DenyReason_INSUFFICIENT_TOKENS)
	// CountExceedsCapacity: the count can never fit; no retry will succeed (RetryAt is zero).
	CountExceedsCapacity DenyReason = DenyReason(pb.DenyReason_COUNT_EXCEEDS_CAPACITY)
	// MaxReservedExceeded: a reservation would owe more than max_reserved; retry at RetryAt.
	MaxReservedExceeded DenyReason = DenyReason(pb.DenyReason_MAX_RESERVED_EXCEEDED)
	// Blocked: an override blocks the key (Client.SetOverride); no retry is given (RetryAt is
	// zero).
	Blocked DenyReason = DenyReason(pb.DenyReason_BLOCKED)
	// NoFreeSlots: a concurrency limit has fewer free slots than the count; RetryAt is when
	// enough leases expire if none is released or extended meanwhile.
	NoFreeSlots DenyReason = DenyReason(pb.DenyReason_NO_FREE_SLOTS)
)

// String names the reason as the protocol does (BLOCKED). A reason added to the protocol after
// this client was written keeps its number, which String prints.
func (r DenyReason) String() string { return pb.DenyReason(r).String() }

// Source is the namespace a limit lives in, for Reset and overrides.
type Source int32

const (
	// LimitsFile: the server's limits file (the default).
	LimitsFile Source = Source(pb.LimitSource_LIMITS_FILE)
	// Inline: inline configs of requests.
	Inline Source = Source(pb.LimitSource_INLINE)
	// Envoy: rules of the Envoy RLS API.
	Envoy Source = Source(pb.LimitSource_ENVOY)
)

// Config defines a limit inline, for a name the server's limits file does not define.
type Config struct {
	Kind   Kind
	Rate   float64       // tokens per Period; > 0
	Period time.Duration // > 0
	// Capacity is the most tokens that can accumulate; nil: Rate.
	Capacity *float64
	// MaxReserved is how far below zero reservations may take the balance; nil: unbounded,
	// Ptr(0.0): no reservations.
	MaxReserved *float64
	// Start offsets fixed windows from the Unix epoch; nil: a per-key hash.
	Start *time.Duration
	// Jitter (0..1) pushes a denied caller's RetryAt later by up to Jitter*Period.
	Jitter float64
	// LeaseTTL (Concurrency only) is the TTL of a lease whose Acquire gives none; 0: the
	// server's default (30 s, or MaxLeaseTTL when shorter).
	LeaseTTL time.Duration
	// MaxLeaseTTL (Concurrency only) is the longest TTL an Acquire or Extend may ask for; 0:
	// the server's default (max(LeaseTTL, 1 hour)).
	MaxLeaseTTL time.Duration
}

// Ptr returns a pointer to v, for the optional fields of Config.
func Ptr[T any](v T) *T { return &v }

// Limit names one limit of a request.
type Limit struct {
	Name string
	Key  string
	// Count is the number of tokens to take; 0 means the server's default, 1.
	Count float64
	// Config defines the limit inline; nil for a limit of the server's limits file.
	Config *Config
}

// Request is a whole request: its limits are evaluated together, all or nothing.
type Request struct {
	Limits []Limit
	// RequestID (optional, up to 128 bytes) makes a Consume or Reserve idempotent: the server
	// answers a repeat of the same request with the same answer, marked Replayed.
	RequestID string
	// OmitReceipts, for callers that never Settle (gateways, sidecars, quota checks): an allowed
	// Consume or Reserve answers without receipts (LimitResult.Receipt empty), which spares the
	// server signing one per limit and the reply about 100 bytes per limit; nothing else
	// changes. A repeat of a RequestID is answered as the first request was, receipts or not.
	// WaitRequest ignores it: it needs the receipts to give back a reservation it abandons.
	OmitReceipts bool
}

// LimitResult is the verdict on one limit of a request.
type LimitResult struct {
	Name    string
	Key     string
	Allowed bool
	// Value is the tokens available after the decision (negative while reservations owe).
	Value    float64
	Capacity float64
	// RetryAt is set when the caller must wait (zero otherwise).
	RetryAt    time.Time
	RetryAfter time.Duration
	Reason     DenyReason
	// Receipt names what an allowed Consume or Reserve took from this limit; give it to Settle.
	Receipt []byte
	// Override is the key or key pattern of the override that set this limit for the key;
	// empty when the configured limit decided.
	Override string
}

// Result is the answer to a Consume, Check or Reserve.
type Result struct {
	Allowed bool
	// Limits holds one result per requested limit, in request order.
	Limits []LimitResult
	// RetryAt: on denial, when a retry can succeed (zero if it never can); for an allowed
	// reservation, when its work may run.
	RetryAt    time.Time
	RetryAfter time.Duration
	Reason     DenyReason
	// DeniedBy is the index in Limits of the limit that decided a denial; -1 when allowed.
	DeniedBy int
	// FailedOpen: the server's store failed and the server (--failure_policy=open) allowed
	// without evaluating.
	FailedOpen bool
	// Replayed: the remembered answer to an earlier request with the same RequestID.
	Replayed bool
}

// EnvoyPathEntry is one level of an Envoy rule's descriptor path (Reset of Source Envoy).
type EnvoyPathEntry struct {
	Key   string
	Value string
}

// ResetTarget names the state(s) a Reset deletes.
type ResetTarget struct {
	// Name is the limit name (the domain for Source Envoy).
	Name string
	// Key is the key to reset; empty with AllKeys.
	Key           string
	AllKeys       bool
	Source        Source
	EnvoyPath     []EnvoyPathEntry
	EnvoyOverride bool
}

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout        time.Duration
	checkAttempts  int
	checkBackoff   time.Duration
	adminToken     string
	adminTokenSet  bool
	adminTokenFile string
	tlsConfig      *tls.Config
	tlsFiles       *TLSFiles
	dialOptions    []grpc.DialOption
	leaseStream    bool
}

// WithTimeout sets the deadline of each call (default DefaultTimeout). A context that ends
// earlier still wins.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithCheckAttempts sets how many times Check is tried when the server is UNAVAILABLE
// (default DefaultCheckAttempts; 1: no retry). Consume and Reserve are never retried.
func WithCheckAttempts(n int) Option { return func(o *options) { o.checkAttempts = n } }

// WithAdminToken sets the bearer token Reset and the override calls send.
func WithAdminToken(token string) Option {
	return func(o *options) { o.adminToken, o.adminTokenSet = token, true }
}

// WithAdminTokenFile reads the bearer token Reset and the override calls send from a file (surrounding whitespace
// removed), once, when the client is created.
func WithAdminTokenFile(path string) Option { return func(o *options) { o.adminTokenFile = path } }

// WithTLS connects over TLS with the given configuration.
func WithTLS(config *tls.Config) Option { return func(o *options) { o.tlsConfig = config } }

// WithDialOptions adds gRPC dial options (interceptors, keepalive...) to Dial.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithLeaseStream(true) sends the client's Acquire, Release and Extend calls (TryAcquire,
// Release, Extend, and so a held lease's Acquire, heartbeat and Release, and the middlewares'
// max-in-flight slots) as ops on one LeaseStream of the server (docs/leases.md, lease streams),
// shared by every goroutine, instead of a call each: the server spends about a sixth of the CPU
// on an op that it spends on a call. For holders of many leases, or many acquires a second.
//
// Each op is decided by the server exactly as its call would be, and comes back exactly as the
// call's would: the same results, the same *Error (code, message, Field) for the same status,
// the same refusals before anything is sent (a sub-millisecond TTL, a string not valid UTF-8),
// the same deadline (WithTimeout) and the same lack of retries. An op whose context ends returns
// the context's error at once, as a call does (the server may still decide it; its answer is
// dropped). The stream is opened at the first op, and again at the first op after it ends;
// when it ends (the server restarts, a proxy cuts it), the ops waiting for an answer fail with
// UNAVAILABLE carrying the stream's message, as a call cut off would. Leases do not belong to
// the stream: a lease taken on it is held until it is released or expires, whether the stream
// ends or not, and a held lease's heartbeat goes on over the next stream.
//
// A server without LeaseStream (older than the RPC) answers UNIMPLEMENTED: the client then
// sends these calls as calls for the rest of its life, logs that once (log.Default()), and
// sends the op that found out as a call (it was not decided). An op too large for a stream
// message (64 KiB) goes as a call too. Close ends the stream. A unary interceptor (through
// WithDialOptions) sees no Acquire, Release or Extend call then, but one LeaseStream for a
// stream interceptor.
func WithLeaseStream(on bool) Option { return func(o *options) { o.leaseStream = on } }

// Client is a client of the ratelimit service. It is safe for concurrent use; share one.
type Client struct {
	conn       *grpc.ClientConn // owned, closed by Close; nil for NewClient
	stub       pb.RateLimitServiceClient
	overrides  pb.OverrideServiceClient
	opts       options
	adminToken string
	sleep      func(ctx context.Context, d time.Duration) error
	leases     *leaseStreams // WithLeaseStream's stream; nil without it
}

func buildOptions(opts []Option) (options, string, error) {
	o := options{timeout: DefaultTimeout, checkAttempts: DefaultCheckAttempts,
		checkBackoff: 50 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		return o, "", fmt.Errorf("ratelimit: timeout must be > 0, got %v", o.timeout)
	}
	if o.checkAttempts < 1 {
		o.checkAttempts = 1
	}
	token := os.Getenv(AdminTokenEnv)
	if o.adminTokenFile != "" {
		b, err := os.ReadFile(o.adminTokenFile)
		if err != nil {
			return o, "", fmt.Errorf("ratelimit: admin token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return o, "", fmt.Errorf("ratelimit: admin token file %s is empty", o.adminTokenFile)
		}
	}
	if o.adminTokenSet {
		token = o.adminToken
	}
	return o, token, nil
}

// Dial connects (lazily) to target ("host:port"), in plaintext unless WithTLS or WithTLSFiles.
func Dial(target string, opts ...Option) (*Client, error) {
	o, token, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	creds := grpc.WithInsecure()
	if o.tlsFiles != nil {
		config, err := loadTLS(*o.tlsFiles)
		if err != nil {
			return nil, err
		}
		creds = grpc.WithTransportCredentials(credentials.NewTLS(config))
	} else if o.tlsConfig != nil {
		creds = grpc.WithTransportCredentials(credentials.NewTLS(o.tlsConfig))
	}
	conn, err := grpc.Dial(target, append([]grpc.DialOption{creds}, o.dialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: dial %s: %w", target, err)
	}
	c := newClient(conn, o, token)
	c.conn = conn
	return c, nil
}

// NewClient uses an existing connection (which the caller keeps and closes).
func NewClient(conn grpc.ClientConnInterface, opts ...Option) (*Client, error) {
	o, token, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newClient(conn, o, token), nil
}

func newClient(conn grpc.ClientConnInterface, o options, token string) *Client {
	// Every call goes through utf8Conn, which refuses a string that is not valid UTF-8 before
	// gRPC fails to encode it.
	conn = utf8Conn{conn}
	c := &Client{stub: pb.NewRateLimitServiceClient(conn),
		overrides: pb.NewOverrideServiceClient(conn), opts: o, adminToken: token,
		sleep: sleepContext}
	if o.leaseStream {
		c.leases = newLeaseStreams(c.stub, o.timeout)
	}
	return c
}

// Close ends the lease stream (WithLeaseStream: the stream is half-closed, the answers to the
// ops sent are waited for up to the client's timeout, and its goroutines have returned when
// Close does), then closes the connection Dial opened. After Close, lease calls are sent as
// calls (which fail on the connection Dial opened, as every call does).
func (c *Client) Close() error {
	if c.leases != nil {
		c.leases.close()
	}
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.timeout)
}

// adminContext is callContext carrying the admin token, for Reset and the override calls.
func (c *Client) adminContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := c.callContext(ctx)
	if c.adminToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.adminToken)
	}
	return ctx, cancel
}

// Allow consumes one token of (name, key) and reports whether it was allowed.
func (c *Client) Allow(ctx context.Context, name, key string) (bool, error) {
	return c.AllowN(ctx, name, key, 1)
}

// AllowN consumes n tokens of (name, key) and reports whether they were allowed. As in
// golang.org/x/time/rate, n = 0 takes nothing and reports whether the limit is not in debt now
// (Limiter.AllowN).
func (c *Client) AllowN(ctx context.Context, name, key string, n float64) (bool, error) {
	return c.allowN(ctx, Limit{Name: name, Key: key}, n)
}

// Consume takes each limit's count from every limit of the request, or from none.
// Never retried.
func (c *Client) Consume(ctx context.Context, req Request) (*Result, error) {
	return c.decide(ctx, "Consume", c.stub.Consume, req)
}

// Reserve is Consume that may go into debt (down to max_reserved); an allowed reservation's
// RetryAt is when its work may run (Reservation.Delay), and Reservation.Cancel gives it back.
// Never retried.
func (c *Client) Reserve(ctx context.Context, req Request) (*Reservation, error) {
	r, err := c.decide(ctx, "Reserve", c.stub.Reserve, req)
	if err != nil {
		return nil, err
	}
	return c.reservation(r), nil
}

// Check answers what Consume would answer now, taking nothing. Retried when the server is
// UNAVAILABLE: up to WithCheckAttempts tries in all, each with its own deadline, backing off
// 50 ms then doubling, until ctx ends.
func (c *Client) Check(ctx context.Context, req Request) (*Result, error) {
	backoff := c.opts.checkBackoff
	for attempt := 1; ; attempt++ {
		r, err := c.decide(ctx, "Check", c.stub.Check, req)
		var e *Error
		if err == nil || attempt >= c.opts.checkAttempts || !errors.As(err, &e) ||
			e.Code != codes.Unavailable {
			return r, err
		}
		if c.sleep(ctx, backoff) != nil {
			return r, err
		}
		backoff *= 2
	}
}

type decideFunc func(context.Context, *pb.RateLimitRequest, ...grpc.CallOption) (
	*pb.RateLimitResponse, error)

func (c *Client) decide(ctx context.Context, method string, call decideFunc, req Request) (
	*Result, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := call(ctx, toProto(req))
	if err != nil {
		return nil, newError(method, err)
	}
	return fromProto(resp), nil
}

// Reset deletes the state of one key of a limit of the limits file, so it is full again.
// Administrative: sends the admin token.
func (c *Client) Reset(ctx context.Context, name, key string) error {
	return c.ResetTarget(ctx, ResetTarget{Name: name, Key: key})
}

// ResetAll deletes the state of every key of a limit of the limits file.
func (c *Client) ResetAll(ctx context.Context, name string) error {
	return c.ResetTarget(ctx, ResetTarget{Name: name, AllKeys: true})
}

// ResetTarget is any Reset: of another source (inline limits, Envoy rules).
func (c *Client) ResetTarget(ctx context.Context, t ResetTarget) error {
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	req := &pb.ResetRequest{Name: t.Name, Key: t.Key, AllKeys: t.AllKeys,
		Source: pb.LimitSource(t.Source), EnvoyOverride: t.EnvoyOverride}
	for _, e := range t.EnvoyPath {
		req.EnvoyPath = append(req.EnvoyPath, &pb.EnvoyPathEntry{Key: e.Key, Value: e.Value})
	}
	if _, err := c.stub.Reset(ctx, req); err != nil {
		return newError("Reset", err)
	}
	return nil
}

func toProto(req Request) *pb.RateLimitRequest {
	out := &pb.RateLimitRequest{RequestId: req.RequestID, OmitReceipts: req.OmitReceipts}
	for _, l := range req.Limits {
		lr := &pb.LimitRequest{Name: l.Name, Key: l.Key}
		if l.Count != 0 {
			lr.Count = Ptr(l.Count)
		}
		lr.Config = configToProto(l.Config)
		out.Limits = append(out.Limits, lr)
	}
	return out
}

// configToProto is an inline config on the wire (nil for nil). A concurrency limit's Period
// is sent only when set (the kind uses none); every other kind's always is.
func configToProto(cfg *Config) *pb.LimitConfig {
	if cfg == nil {
		return nil
	}
	out := &pb.LimitConfig{Kind: pb.Kind(cfg.Kind), Rate: cfg.Rate, Capacity: cfg.Capacity,
		MaxReserved: cfg.MaxReserved, Jitter: cfg.Jitter}
	if cfg.Kind != Concurrency || cfg.Period != 0 {
		out.Period = durationpb.New(cfg.Period)
	}
	if cfg.Start != nil {
		out.Start = durationpb.New(*cfg.Start)
	}
	if cfg.LeaseTTL != 0 {
		out.LeaseTtl = durationpb.New(cfg.LeaseTTL)
	}
	if cfg.MaxLeaseTTL != 0 {
		out.MaxLeaseTtl = durationpb.New(cfg.MaxLeaseTTL)
	}
	return out
}

func fromProto(resp *pb.RateLimitResponse) *Result {
	r := &Result{Allowed: resp.Allowed, RetryAt: timeOf(resp.RetryAt),
		RetryAfter: durationOf(resp.RetryAfter), Reason: DenyReason(resp.Reason),
		DeniedBy: int(resp.DeniedBy), FailedOpen: resp.FailedOpen, Replayed: resp.Replayed}
	for _, l := range resp.Results {
		r.Limits = append(r.Limits, LimitResult{
			Name: l.Name, Key: l.Key, Allowed: l.Allowed, Value: l.Value, Capacity: l.Capacity,
			RetryAt: timeOf(l.RetryAt), RetryAfter: durationOf(l.RetryAfter),
			Reason: DenyReason(l.Reason), Receipt: l.Receipt, Override: l.Override,
		})
	}
	return r
}
