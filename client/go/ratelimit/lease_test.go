package ratelimit_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// expectLost waits at most `within` for lease to be lost, and checks that Err and Context say so.
func expectLost(t *testing.T, lease *ratelimit.Lease, within time.Duration) {
	t.Helper()
	select {
	case <-lease.Lost():
	case <-time.After(within):
		t.Fatalf("the lease was not lost within %v", within)
	}
	if !errors.Is(lease.Err(), ratelimit.ErrLeaseLost) || lease.Context().Err() == nil {
		t.Fatalf("lost lease: err %v, context %v", lease.Err(), lease.Context().Err())
	}
}

// acquireHeld acquires a held lease of one slot of ("jobs", "k") with `ttl` (0: the limit's)
// from f, through a client the test closes.
func acquireHeld(t *testing.T, f *fakeLeases, ttl time.Duration,
	opts ...ratelimit.Option) *ratelimit.Lease {
	t.Helper()
	c, err := ratelimit.Dial(serveLeases(t, f), opts...)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	req := ratelimit.Slots("jobs", "k", 1)
	req.TTL = ttl
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	return lease
}

// waitFor polls cond every 5 ms for at most 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTryAcquireSendsTheRequestAndADenialIsAValue(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	req := ratelimit.Slots("jobs", "tenant-1", 1)
	req.TTL, req.RequestID, req.Holder = 2*time.Second, "req-1", "pod-a"
	r, err := c.TryAcquire(ctx(t), req)
	must(t, err)
	if !r.Allowed || r.Lease == nil || r.Lease.Holder != "pod-a" || r.Lease.Count != 1 ||
		r.DeniedBy != -1 || r.Lease.ExpiresAt.Sub(r.Lease.AcquiredAt) != 2*time.Second {
		t.Fatalf("allowed acquire: %+v (lease %+v)", r, r.Lease)
	}
	sent := f.acquires[0]
	if sent.RequestId != "req-1" || sent.Ttl.AsDuration() != 2*time.Second ||
		sent.Limits[0].GetCount() != 1 {
		t.Fatalf("request on the wire: %v", sent)
	}
	r, err = c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "tenant-1", 0))
	must(t, err)
	if r.Allowed || r.Lease != nil || r.Reason != ratelimit.NoFreeSlots || r.DeniedBy != 0 ||
		r.RetryAfter <= 0 || r.RetryAt.IsZero() || r.Limits[0].Value != 0 {
		t.Fatalf("denied acquire: %+v", r)
	}
	if f.acquires[1].Ttl != nil || f.acquires[1].Limits[0].Count != nil {
		t.Fatalf("unset TTL and count must stay unset: %v", f.acquires[1])
	}
}

func TestListLeasesPages(t *testing.T) {
	f := newFakeLeases(3)
	c, err := ratelimit.Dial(serveLeases(t, f), ratelimit.WithAdminToken("tok"))
	must(t, err)
	defer c.Close()
	var ids []string
	for i := 0; i < 3; i++ {
		r, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
		must(t, err)
		ids = append(ids, r.Lease.ID)
	}
	sort.Strings(ids)
	req := ratelimit.ListLeasesRequest{Name: "jobs", Key: "k", PageSize: 2}
	first, err := c.ListLeases(ctx(t), req)
	must(t, err)
	if first.Held != 3 || len(first.Leases) != 2 || first.NextPageToken == "" ||
		f.lists[0].PageSize != 2 || f.lists[0].PageToken != "" {
		t.Fatalf("first page: %+v, sent %+v", first, f.lists[0])
	}
	req.PageToken = first.NextPageToken
	rest, err := c.ListLeases(ctx(t), req)
	must(t, err)
	if len(rest.Leases) != 1 || rest.NextPageToken != "" ||
		f.lists[1].PageToken != first.NextPageToken {
		t.Fatalf("second page: %+v, sent %+v", rest, f.lists[1])
	}
	got := []string{first.Leases[0].ID, first.Leases[1].ID, rest.Leases[0].ID}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("pages %v, want %v", got, ids)
		}
	}
}

func TestReleaseExtendAndListLeasesCalls(t *testing.T) {
	f := newFakeLeases(3)
	c, err := ratelimit.Dial(serveLeases(t, f), ratelimit.WithAdminToken("tok"))
	must(t, err)
	defer c.Close()
	r, err := c.TryAcquire(ctx(t), ratelimit.Slots("jobs", "k", 2))
	must(t, err)
	ref := ratelimit.LeaseRef{Name: "jobs", Key: "k", ID: r.Lease.ID}
	e, err := c.Extend(ctx(t), ref, time.Minute)
	must(t, err)
	if e.State != ratelimit.LeaseHeld || e.Lease == nil ||
		time.Until(e.Lease.ExpiresAt) < 50*time.Second {
		t.Fatalf("Extend: %+v", e)
	}
	list, err := c.ListLeases(ctx(t), ratelimit.ListLeasesRequest{Name: "jobs", Key: "k"})
	must(t, err)
	if list.Held != 2 || list.Capacity != 3 || len(list.Leases) != 1 ||
		list.Leases[0].ID != r.Lease.ID || f.listTokens[0] != "Bearer tok" {
		t.Fatalf("ListLeases: %+v, token %v", list, f.listTokens)
	}
	rel, err := c.Release(ctx(t), ref)
	must(t, err)
	if rel.State != ratelimit.LeaseReleased || rel.Held != 0 {
		t.Fatalf("Release: %+v", rel)
	}
	rel, err = c.Release(ctx(t), ref)
	must(t, err)
	e, err = c.Extend(ctx(t), ref, 0)
	must(t, err)
	if rel.State != ratelimit.LeaseNotHeld || e.State != ratelimit.LeaseNotHeld ||
		rel.State.String() != "NOT_HELD" {
		t.Fatalf("a second Release / Extend: %+v %+v", rel, e)
	}
}

func TestAcquireDenialIsAnAcquireDeniedErrorWithRetryAfter(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	lease, err := c.Acquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	must(t, err)
	defer lease.Release(context.Background()) //nolint:errcheck
	_, err = c.Acquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	var denied *ratelimit.AcquireDeniedError
	if !errors.As(err, &denied) || denied.Result.Reason != ratelimit.NoFreeSlots ||
		denied.Result.RetryAfter <= 0 {
		t.Fatalf("second Acquire on capacity 1: %v", err)
	}
	f.acquireErr = status.Error(codes.InvalidArgument, "limits[0].count: must be whole")
	_, err = c.Acquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	var e *ratelimit.Error
	if !errors.As(err, &e) || e.Method != "Acquire" || e.Field != "limits[0].count" {
		t.Fatalf("a refused Acquire: %v", err)
	}
}

func TestReleaseGivesTheSlotBackOnceAndEndsTheContext(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	lease, err := c.Acquire(ctx(t), ratelimit.Slots("jobs", "k", 1))
	must(t, err)
	if f.held("jobs", "k") != 1 || lease.Err() != nil || lease.Context().Err() != nil {
		t.Fatalf("held lease: held %d, err %v", f.held("jobs", "k"), lease.Err())
	}
	must(t, lease.Release(ctx(t)))
	must(t, lease.Release(ctx(t)))
	_, _, releases := f.counts()
	if f.held("jobs", "k") != 0 || releases != 1 || !errors.Is(lease.Err(), ratelimit.ErrLeaseReleased) ||
		lease.Context().Err() == nil {
		t.Fatalf("after Release: held %d, %d releases, err %v", f.held("jobs", "k"), releases,
			lease.Err())
	}
	select {
	case <-lease.Lost():
		t.Fatal("a released lease is not lost")
	default:
	}
}

func TestHeartbeatExtendsByTheTTLUntilReleased(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	req := ratelimit.Slots("jobs", "k", 1)
	req.TTL = 150 * time.Millisecond // a heartbeat every 50 ms
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	first := lease.Info().ExpiresAt
	waitFor(t, "three heartbeats", func() bool { _, e, _ := f.counts(); return e >= 3 })
	// Held well past the TTL without a release, by the heartbeats alone.
	time.Sleep(200 * time.Millisecond)
	if f.held("jobs", "k") != 1 || lease.Err() != nil || !lease.Info().ExpiresAt.After(first) {
		t.Fatalf("after heartbeats: held %d, err %v, expiry %v (first %v)", f.held("jobs", "k"),
			lease.Err(), lease.Info().ExpiresAt, first)
	}
	f.mu.Lock()
	ext := f.extends[0]
	f.mu.Unlock()
	if ext.LeaseId != lease.ID() || ext.Ttl.AsDuration() != req.TTL || ext.Name != "jobs" {
		t.Fatalf("the heartbeat's Extend: %v", ext)
	}
	must(t, lease.Release(ctx(t)))
	_, before, _ := f.counts()
	time.Sleep(120 * time.Millisecond) // more than two heartbeat periods
	if _, after, _ := f.counts(); after != before {
		t.Fatalf("the heartbeat went on after Release: %d extends, then %d", before, after)
	}
}

func TestAnExtendAnsweringNotHeldLosesTheLease(t *testing.T) {
	f := newFakeLeases(1)
	f.extendState = pb.LeaseState_NOT_HELD
	lease := acquireHeld(t, f, 90*time.Millisecond)
	expectLost(t, lease, 5*time.Second)
	if _, extends, _ := f.counts(); extends != 1 {
		t.Fatalf("the heartbeat went on after NOT_HELD: %d extends", extends)
	}
	must(t, lease.Release(ctx(t))) // harmless: the server answers NOT_HELD
	if !errors.Is(lease.Err(), ratelimit.ErrLeaseLost) {
		t.Fatalf("Release must keep the loss visible: %v", lease.Err())
	}
}

func TestExtendsFailingUntilExpiryLoseTheLease(t *testing.T) {
	f := newFakeLeases(1)
	f.extendErr = status.Error(codes.Unavailable, "store unavailable")
	start := time.Now()
	lease := acquireHeld(t, f, 600*time.Millisecond)
	expectLost(t, lease, 5*time.Second)
	// After a failure the next Extend comes sooner (half the time left); lost at the expiry,
	// not before it.
	_, extends, _ := f.counts()
	if extends < 3 || time.Since(start) < 550*time.Millisecond ||
		!errors.Is(lease.Err(), ratelimit.ErrLeaseLost) {
		t.Fatalf("lost after %v and %d extends: %v", time.Since(start), extends, lease.Err())
	}
}

// An Extend that hangs (a network that drops the packets) is given up at the lease's expiry,
// not at the client's timeout: the lease is lost by then, and another holder may have its slots.
func TestAHungExtendLosesTheLeaseAtItsExpiry(t *testing.T) {
	f := newFakeLeases(1)
	f.extendHang = true
	lease := acquireHeld(t, f, 600*time.Millisecond, ratelimit.WithTimeout(30*time.Second))
	expectLost(t, lease, 10*time.Second)
}

// A retry answered with the earlier Acquire's lease (Replayed) is extended at once: its life is
// what is left of the first Acquire's, not a whole TTL from the retry.
func TestAReplayedLeaseIsExtendedAtOnce(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	req := ratelimit.Slots("jobs", "k", 1)
	req.TTL, req.RequestID = 900*time.Millisecond, "job-42"
	first, err := c.TryAcquire(ctx(t), req) // its answer, say, was lost
	must(t, err)
	time.Sleep(600 * time.Millisecond)
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	if !lease.Result().Replayed || lease.ID() != first.Lease.ID {
		t.Fatalf("the retry: replayed %v, id %s (first %s)", lease.Result().Replayed, lease.ID(),
			first.Lease.ID)
	}
	waitFor(t, "an Extend", func() bool { _, e, _ := f.counts(); return e >= 1 })
	time.Sleep(500 * time.Millisecond) // past the first Acquire's expiry
	if lease.Err() != nil || f.held("jobs", "k") != 1 {
		t.Fatalf("the replayed lease: err %v, held %d", lease.Err(), f.held("jobs", "k"))
	}
	must(t, lease.Release(ctx(t)))
}

// A Heartbeat longer than the lease's TTL never brings an Extend past the lease's expiry: the
// Extends come at half the time left instead, and keep the lease (not lost a minute later, at the
// heartbeat).
func TestAHeartbeatLongerThanTheTTLExtendsBeforeTheExpiry(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	req := ratelimit.Slots("jobs", "k", 1)
	req.TTL, req.Heartbeat = 150*time.Millisecond, time.Minute
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	first := lease.Info().ExpiresAt
	waitFor(t, "three Extends", func() bool { _, e, _ := f.counts(); return e >= 3 })
	if f.held("jobs", "k") != 1 || lease.Err() != nil || !lease.Info().ExpiresAt.After(first) {
		t.Fatalf("after Extends: held %d, err %v", f.held("jobs", "k"), lease.Err())
	}
	must(t, lease.Release(ctx(t)))
}

// A Release that failed can be called again, and sends again; once one succeeded, no more.
func TestAFailedReleaseCanBeRetried(t *testing.T) {
	f := newFakeLeases(1)
	lease := acquireHeld(t, f, 0) // the limit's TTL
	f.mu.Lock()
	f.releaseErr = status.Error(codes.Unavailable, "store unavailable")
	f.mu.Unlock()
	if err := lease.Release(ctx(t)); err == nil {
		t.Fatal("the failed Release returned nil")
	}
	if f.held("jobs", "k") != 1 {
		t.Fatal("the failed Release gave the slot back")
	}
	must(t, lease.Release(ctx(t)))
	must(t, lease.Release(ctx(t)))
	if _, _, releases := f.counts(); releases != 2 || f.held("jobs", "k") != 0 {
		t.Fatalf("%d releases, held %d", releases, f.held("jobs", "k"))
	}
}

func TestANegativeHeartbeatNeverExtends(t *testing.T) {
	f := newFakeLeases(1)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	req := ratelimit.Slots("jobs", "k", 1)
	req.TTL, req.Heartbeat = 30*time.Millisecond, -1
	lease, err := c.Acquire(ctx(t), req)
	must(t, err)
	time.Sleep(60 * time.Millisecond)
	if _, extends, _ := f.counts(); extends != 0 || f.held("jobs", "k") != 0 {
		t.Fatalf("without a heartbeat: %d extends, held %d", extends, f.held("jobs", "k"))
	}
	// Its expiry is known: the lease is lost then, and its context ended.
	expectLost(t, lease, 5*time.Second)
	must(t, lease.Release(ctx(t)))
}
