package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// Concurrency limits (kind Concurrency, docs/leases.md): at most Capacity slots held at once.
// Slots are taken by Acquire for a lease that ends when it is released or when it expires
// without being extended. These are the calls themselves; Client.Acquire (held.go) holds a
// lease with a heartbeat.

// LeaseState says whether a lease is held (the answer to Release and Extend).
type LeaseState int32

const (
	// LeaseHeld: Extend pushed the lease's expiry.
	LeaseHeld LeaseState = LeaseState(pb.LeaseState_HELD)
	// LeaseReleased: Release gave the lease's slots back.
	LeaseReleased LeaseState = LeaseState(pb.LeaseState_RELEASED)
	// LeaseNotHeld: the lease is not held (released before, expired, reset, or never
	// acquired); the call changed nothing.
	LeaseNotHeld LeaseState = LeaseState(pb.LeaseState_NOT_HELD)
)

// String names the state as the protocol does (NOT_HELD).
func (s LeaseState) String() string { return pb.LeaseState(s).String() }

// LeaseInfo is a lease on slots of a concurrency limit, as the server describes it.
type LeaseInfo struct {
	// ID is opaque and unique, chosen by the server.
	ID string
	// Name and Key are the concurrency limit's; Source is LimitsFile or Inline.
	Name   string
	Key    string
	Source Source
	// Count is the slots the lease holds.
	Count      uint64
	AcquiredAt time.Time
	// ExpiresAt is when the lease ends by itself unless extended.
	ExpiresAt time.Time
	// Holder is what the acquirer said about itself (AcquireRequest.Holder).
	Holder string
}

// AcquireRequest asks for slots of one concurrency limit, together with the tokens of any rate
// limits, all or nothing.
type AcquireRequest struct {
	// Limits: exactly one limit of kind Concurrency (its Count is whole slots; 0: one) and any
	// rate limits (TokenBucket, FixedWindow) whose tokens are taken with the slots. 1..16.
	Limits []Limit
	// TTL is the lease's time to live (1 ms .. the limit's max_lease_ttl); 0: the limit's
	// lease_ttl. Client.Acquire's heartbeat extends by the same TTL. A negative TTL, or one
	// under 1 ms, is refused before any call: an *Error with code InvalidArgument and Field
	// "ttl" whose message names the TTL given.
	TTL time.Duration
	// RequestID (optional, 1..128 bytes) makes the Acquire idempotent: while the lease it took
	// has not expired, a retry answers that lease again (AcquireResult.Replayed) and takes
	// nothing.
	RequestID string
	// Holder is free text naming the holder (a pod, a job id), 0..256 bytes, shown by
	// ListLeases.
	Holder string
	// Heartbeat is how often Client.Acquire extends the held lease: 0 is a third of the
	// lease's TTL (so two heartbeats may fail before it expires); < 0: never (the lease then
	// expires unless Extend is called). One that would bring the next Extend past the lease's
	// expiry (not shorter than the TTL) is shortened to half the time left. TryAcquire ignores
	// it.
	Heartbeat time.Duration
}

// Slots is an AcquireRequest for n slots (0: one) of the concurrency limit (name, key) of the
// server's limits file.
func Slots(name, key string, n float64) AcquireRequest {
	return AcquireRequest{Limits: []Limit{{Name: name, Key: key, Count: n}}}
}

// AcquireResult is the answer to an Acquire. A denial is a value (Allowed false, RetryAt),
// not an error.
type AcquireResult struct {
	Allowed bool
	// Lease is set when Allowed.
	Lease *LeaseInfo
	// Limits holds one result per requested limit, in request order. The concurrency limit's
	// Value is its free slots (after the acquire when allowed) and Capacity its slots.
	Limits []LimitResult
	// RetryAt: on denial, the latest retry time among the denying limits (zero when one can
	// never allow); for NoFreeSlots, when enough leases expire if no holder releases or
	// extends (a release frees slots sooner).
	RetryAt    time.Time
	RetryAfter time.Duration
	Reason     DenyReason
	// DeniedBy is the index in Limits of the limit that decided a denial; -1 when allowed.
	DeniedBy int
	// Replayed: this answers a retry of an earlier Acquire with the same RequestID; nothing
	// was taken for this call.
	Replayed bool
}

// LeaseRef names a lease: its concurrency limit (Config for an inline one) and its ID.
type LeaseRef struct {
	Name   string
	Key    string
	ID     string
	Config *Config
}

// ReleaseResult is the answer to Release.
type ReleaseResult struct {
	// State is LeaseReleased or LeaseNotHeld.
	State LeaseState
	// Held is the slots held on the key after the call.
	Held uint64
}

// ExtendResult is the answer to Extend.
type ExtendResult struct {
	// State is LeaseHeld (extended) or LeaseNotHeld (the holder has lost its slots).
	State LeaseState
	// Lease is the lease with its new expiry; set when LeaseHeld.
	Lease *LeaseInfo
}

// ListLeasesRequest names one key of a concurrency limit, for ListLeases.
type ListLeasesRequest struct {
	Name string
	Key  string
	// Source is LimitsFile (the default) or Inline (with Config).
	Source Source
	Config *Config
	// PageSize is the most leases in the answer, 1..1000 (0: the server's 100); PageToken the
	// NextPageToken of the previous page (empty: the first page).
	PageSize  int32
	PageToken string
}

// LeaseList is the answer to ListLeases: a page of the key's leases.
type LeaseList struct {
	// Leases are the leases held now, soonest expiry first.
	Leases []LeaseInfo
	// Held is the slots held; Capacity the limit's (the whole key's, on every page).
	Held     uint64
	Capacity uint64
	// NextPageToken, when more leases follow, is the PageToken of the next page.
	NextPageToken string
}

// TryAcquire sends one Acquire: the slots and every rate limit's tokens are taken, or nothing
// is. The lease it returns is not extended by anyone (see Client.Acquire for a held lease).
// Never retried (give a RequestID to make a retry safe). With WithLeaseStream, sent as an op of
// the client's lease stream.
func (c *Client) TryAcquire(ctx context.Context, req AcquireRequest) (*AcquireResult, error) {
	if err := checkTTL("Acquire", req.TTL); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	in := &pb.AcquireRequest{RequestId: req.RequestID, Holder: req.Holder}
	in.Limits = toProto(Request{Limits: req.Limits}).Limits
	if req.TTL != 0 {
		in.Ttl = durationpb.New(req.TTL)
	}
	if res, sent, err := c.leaseOp(ctx, "Acquire", &pb.LeaseOp{
		Op: &pb.LeaseOp_Acquire{Acquire: in}}, false); sent {
		if err != nil {
			return nil, err
		}
		return acquireResultOf(res.GetAcquire()), nil
	}
	resp, err := c.stub.Acquire(ctx, in)
	if err != nil {
		return nil, newError("Acquire", err)
	}
	return acquireResultOf(resp), nil
}

// acquireResultOf is an Acquire's answer, of the call or of a lease stream's op.
func acquireResultOf(resp *pb.AcquireResponse) *AcquireResult {
	r := fromProto(&pb.RateLimitResponse{Results: resp.Results})
	return &AcquireResult{Allowed: resp.Allowed, Lease: leaseOf(resp.Lease), Limits: r.Limits,
		RetryAt: timeOf(resp.RetryAt), RetryAfter: durationOf(resp.RetryAfter),
		Reason: DenyReason(resp.Reason), DeniedBy: int(resp.DeniedBy), Replayed: resp.Replayed}
}

// Release gives a lease's slots back. A lease that is not held answers LeaseNotHeld and
// changes nothing, so a retried Release is harmless. With WithLeaseStream, sent as an op of the
// client's lease stream.
func (c *Client) Release(ctx context.Context, ref LeaseRef) (*ReleaseResult, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	in := &pb.ReleaseRequest{Name: ref.Name, Key: ref.Key, LeaseId: ref.ID,
		Config: configToProto(ref.Config)}
	if res, sent, err := c.leaseOp(ctx, "Release", &pb.LeaseOp{
		Op: &pb.LeaseOp_Release{Release: in}}, false); sent {
		if err != nil {
			return nil, err
		}
		return releaseResultOf(res.GetRelease()), nil
	}
	resp, err := c.stub.Release(ctx, in)
	if err != nil {
		return nil, newError("Release", err)
	}
	return releaseResultOf(resp), nil
}

// releaseResultOf is a Release's answer, of the call or of a lease stream's op.
func releaseResultOf(resp *pb.ReleaseResponse) *ReleaseResult {
	return &ReleaseResult{State: LeaseState(resp.State), Held: resp.Held}
}

// Extend pushes a held lease's expiry to now + ttl (0: the limit's lease_ttl). A lease that is
// not held answers LeaseNotHeld and changes nothing: its holder has lost the slots and should
// stop. A ttl that is negative or under 1 ms is refused before any call, as in TryAcquire. With
// WithLeaseStream, sent as an op of the client's lease stream.
func (c *Client) Extend(ctx context.Context, ref LeaseRef, ttl time.Duration) (
	*ExtendResult, error) {
	return c.extend(ctx, ref, ttl)
}

// extend is Extend with call options (a heartbeat's wait for the connection, which a lease
// stream honours when it opens the stream).
func (c *Client) extend(ctx context.Context, ref LeaseRef, ttl time.Duration,
	opts ...grpc.CallOption) (*ExtendResult, error) {
	if err := checkTTL("Extend", ttl); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	in := &pb.ExtendRequest{Name: ref.Name, Key: ref.Key, LeaseId: ref.ID,
		Config: configToProto(ref.Config)}
	if ttl != 0 {
		in.Ttl = durationpb.New(ttl)
	}
	if res, sent, err := c.leaseOp(ctx, "Extend", &pb.LeaseOp{
		Op: &pb.LeaseOp_Extend{Extend: in}}, waitsForReady(opts)); sent {
		if err != nil {
			return nil, err
		}
		return extendResultOf(res.GetExtend()), nil
	}
	resp, err := c.stub.Extend(ctx, in, opts...)
	if err != nil {
		return nil, newError("Extend", err)
	}
	return extendResultOf(resp), nil
}

// extendResultOf is an Extend's answer, of the call or of a lease stream's op.
func extendResultOf(resp *pb.ExtendResponse) *ExtendResult {
	return &ExtendResult{State: LeaseState(resp.State), Lease: leaseOf(resp.Lease)}
}

// ListLeases lists the leases held on one key of a concurrency limit, a page at a time.
// Administrative: sends the admin token, as Reset does.
func (c *Client) ListLeases(ctx context.Context, req ListLeasesRequest) (*LeaseList, error) {
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	resp, err := c.stub.ListLeases(ctx, &pb.ListLeasesRequest{Name: req.Name, Key: req.Key,
		Source: pb.LimitSource(req.Source), Config: configToProto(req.Config),
		PageSize: req.PageSize, PageToken: req.PageToken})
	if err != nil {
		return nil, newError("ListLeases", err)
	}
	out := &LeaseList{Held: resp.Held, Capacity: resp.Capacity,
		NextPageToken: resp.NextPageToken}
	for _, l := range resp.Leases {
		out.Leases = append(out.Leases, *leaseOf(l))
	}
	return out, nil
}

func leaseOf(l *pb.Lease) *LeaseInfo {
	if l == nil {
		return nil
	}
	return &LeaseInfo{ID: l.Id, Name: l.Name, Key: l.Key, Source: Source(l.Source),
		Count: l.Count, AcquiredAt: timeOf(l.AcquiredAt), ExpiresAt: timeOf(l.ExpiresAt),
		Holder: l.Holder}
}

// AcquireDeniedError is Client.Acquire's error when the Acquire is denied: the result says why
// and when to retry (Result.RetryAfter).
type AcquireDeniedError struct {
	Result *AcquireResult
}

func (e *AcquireDeniedError) Error() string {
	if e.Result.RetryAt.IsZero() {
		return fmt.Sprintf("ratelimit: acquire denied (%v), no retry can succeed", e.Result.Reason)
	}
	return fmt.Sprintf("ratelimit: acquire denied (%v), retry after %v", e.Result.Reason,
		e.Result.RetryAfter)
}

// ErrLeaseLost is the error of a held lease (Lease.Err) whose slots were lost: an Extend
// answered LeaseNotHeld (it expired, was reset, or was released elsewhere), or every Extend
// failed until the lease would have expired.
var ErrLeaseLost = errors.New("ratelimit: lease lost")

// ErrLeaseReleased is the error of a held lease (Lease.Err) once Release was called.
var ErrLeaseReleased = errors.New("ratelimit: lease released")
