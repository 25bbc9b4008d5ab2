package ratelimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// fakeLeases serves the lease calls from memory: a concurrency limit of `capacity` slots (the
// inline config's capacity when given) per (name, key), leases of the request's TTL (default
// 30 s) judged by the real clock. extendErr / extendState, when set, answer every Extend;
// acquireErr every Acquire. It records the calls for the tests to assert on.
type fakeLeases struct {
	pb.UnimplementedRateLimitServiceServer
	capacity    uint64
	acquireErr  error
	extendErr   error
	extendState pb.LeaseState
	extendHang  bool  // every Extend waits until its caller gives up
	releaseErr  error // answers the next Release, then clears

	mu         sync.Mutex
	leases     map[string]*pb.Lease // by id
	byRequest  map[string]string    // request_id -> lease id
	acquires   []*pb.AcquireRequest
	extends    []*pb.ExtendRequest
	releases   []*pb.ReleaseRequest
	listTokens []string
	lists      []*pb.ListLeasesRequest
}

func newFakeLeases(capacity uint64) *fakeLeases {
	return &fakeLeases{capacity: capacity, leases: map[string]*pb.Lease{},
		byRequest: map[string]string{}}
}

func (f *fakeLeases) heldLocked(name, key string, now time.Time) uint64 {
	var held uint64
	for id, l := range f.leases {
		if !l.ExpiresAt.AsTime().After(now) {
			delete(f.leases, id)
			continue
		}
		if l.Name == name && l.Key == key {
			held += l.Count
		}
	}
	return held
}

// held is the slots held now on (name, key).
func (f *fakeLeases) held(name, key string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldLocked(name, key, time.Now())
}

func (f *fakeLeases) counts() (acquires, extends, releases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.acquires), len(f.extends), len(f.releases)
}

func ttlOf(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 30 * time.Second
	}
	return d.AsDuration()
}

func (f *fakeLeases) Acquire(_ context.Context, req *pb.AcquireRequest) (
	*pb.AcquireResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquires = append(f.acquires, req)
	if f.acquireErr != nil {
		return nil, f.acquireErr
	}
	if l, ok := f.leases[f.byRequest[req.RequestId]]; ok && req.RequestId != "" &&
		l.ExpiresAt.AsTime().After(time.Now()) {
		return &pb.AcquireResponse{Allowed: true, Lease: l, Replayed: true, DeniedBy: -1}, nil
	}
	if len(req.Limits) == 0 {
		return nil, status.Error(codes.InvalidArgument, "limits: must not be empty")
	}
	lim := req.Limits[0]
	capacity := f.capacity
	if lim.Config != nil && lim.Config.Capacity != nil {
		capacity = uint64(*lim.Config.Capacity)
	}
	count := uint64(1)
	if lim.Count != nil {
		count = uint64(*lim.Count)
	}
	now := time.Now()
	held := f.heldLocked(lim.Name, lim.Key, now)
	result := &pb.LimitResult{Name: lim.Name, Key: lim.Key, Capacity: float64(capacity)}
	if held+count > capacity {
		soonest := now.Add(time.Hour)
		for _, l := range f.leases {
			if l.Name == lim.Name && l.Key == lim.Key && l.ExpiresAt.AsTime().Before(soonest) {
				soonest = l.ExpiresAt.AsTime()
			}
		}
		result.Value = float64(capacity - held)
		result.Reason = pb.DenyReason_NO_FREE_SLOTS
		return &pb.AcquireResponse{Allowed: false, Results: []*pb.LimitResult{result},
			RetryAt: timestamppb.New(soonest), RetryAfter: durationpb.New(soonest.Sub(now)),
			Reason: pb.DenyReason_NO_FREE_SLOTS, DeniedBy: 0}, nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	lease := &pb.Lease{Id: hex.EncodeToString(b[:]), Name: lim.Name, Key: lim.Key,
		Count: count, AcquiredAt: timestamppb.New(now),
		ExpiresAt: timestamppb.New(now.Add(ttlOf(req.Ttl))), Holder: req.Holder}
	if req.RequestId != "" {
		f.byRequest[req.RequestId] = lease.Id
	}
	f.leases[lease.Id] = lease
	result.Allowed = true
	result.Value = float64(capacity - held - count)
	return &pb.AcquireResponse{Allowed: true, Lease: lease, Results: []*pb.LimitResult{result},
		DeniedBy: -1}, nil
}

func (f *fakeLeases) Release(_ context.Context, req *pb.ReleaseRequest) (
	*pb.ReleaseResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, req)
	if err := f.releaseErr; err != nil {
		f.releaseErr = nil
		return nil, err
	}
	now := time.Now()
	state := pb.LeaseState_NOT_HELD
	if l, ok := f.leases[req.LeaseId]; ok && l.ExpiresAt.AsTime().After(now) {
		delete(f.leases, req.LeaseId)
		state = pb.LeaseState_RELEASED
	}
	return &pb.ReleaseResponse{State: state, Held: f.heldLocked(req.Name, req.Key, now)}, nil
}

func (f *fakeLeases) Extend(ctx context.Context, req *pb.ExtendRequest) (
	*pb.ExtendResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.extends = append(f.extends, req)
	if f.extendHang {
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return nil, ctx.Err()
	}
	if f.extendErr != nil {
		return nil, f.extendErr
	}
	if f.extendState != pb.LeaseState_LEASE_STATE_UNSPECIFIED {
		return &pb.ExtendResponse{State: f.extendState}, nil
	}
	now := time.Now()
	l, ok := f.leases[req.LeaseId]
	if !ok || !l.ExpiresAt.AsTime().After(now) {
		return &pb.ExtendResponse{State: pb.LeaseState_NOT_HELD}, nil
	}
	l.ExpiresAt = timestamppb.New(now.Add(ttlOf(req.Ttl)))
	return &pb.ExtendResponse{State: pb.LeaseState_HELD, Lease: l}, nil
}

func (f *fakeLeases) ListLeases(ctx context.Context, req *pb.ListLeasesRequest) (
	*pb.ListLeasesResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listTokens = append(f.listTokens, md.Get("authorization")...)
	now := time.Now()
	f.lists = append(f.lists, req)
	out := &pb.ListLeasesResponse{Held: f.heldLocked(req.Name, req.Key, now),
		Capacity: f.capacity}
	var held []*pb.Lease
	for _, l := range f.leases {
		if l.Name == req.Name && l.Key == req.Key {
			held = append(held, l)
		}
	}
	// Pages of PageSize (0: 100) in the order of the ids; this fake's token is the next page's
	// first index.
	sort.Slice(held, func(i, j int) bool { return held[i].Id < held[j].Id })
	start, _ := strconv.Atoi(req.PageToken)
	size := int(req.PageSize)
	if size == 0 {
		size = 100
	}
	end := start + size
	if end < len(held) {
		out.NextPageToken = strconv.Itoa(end)
	} else {
		end = len(held)
	}
	if start < end {
		out.Leases = held[start:end]
	}
	return out, nil
}

// serveLeases serves f on a free loopback port until the test ends.
func serveLeases(t *testing.T, f *fakeLeases) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}
