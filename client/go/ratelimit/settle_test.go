//go:build !nosettle

package ratelimit_test

// Settle, receipts, request_id and replayed: these need a server that implements Settle.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

func TestSettleGivesBackWhatWasNotUsed(t *testing.T) {
	s := startServer(t)
	c := s.client()
	r, err := c.Consume(ctx(t), one("api", "k", 4))
	must(t, err)
	if !r.Allowed || len(r.Limits[0].Receipt) == 0 {
		t.Fatalf("an allowed Consume carries a receipt: %+v", r)
	}
	settled, err := c.Settle(ctx(t), ratelimit.Settlement{Receipt: r.Limits[0].Receipt, Used: 1})
	must(t, err)
	if len(settled) != 1 || settled[0].Name != "api" || settled[0].Key != "k" ||
		!near(settled[0].Returned, 3) || !near(settled[0].Value, 4) {
		t.Fatalf("settle: %+v", settled)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 4) {
		t.Fatalf("value after giving 3 back: %v", check.Limits[0].Value)
	}
	// A receipt settles once.
	_, err = c.Settle(ctx(t), ratelimit.Settlement{Receipt: r.Limits[0].Receipt, Used: 0})
	var e *ratelimit.Error
	if !errors.As(err, &e) || e.Method != "Settle" || e.Code != codes.AlreadyExists ||
		e.Field != "settlements[0].receipt" {
		t.Fatalf("second settlement of one receipt: %v", err)
	}
	// Using more than was taken charges the difference.
	r, err = c.Consume(ctx(t), one("api", "k2", 1))
	must(t, err)
	settled, err = c.Settle(ctx(t), ratelimit.Settlement{Receipt: r.Limits[0].Receipt, Used: 7})
	must(t, err)
	if !near(settled[0].Charged, 6) || !near(settled[0].Value, -2) || settled[0].PaidAt.IsZero() {
		t.Fatalf("settling more than was taken: %+v", settled)
	}
}

func TestSettleRequestIDReplaysTheAnswer(t *testing.T) {
	s := startServer(t)
	c := s.client()
	req := one("api", "k", 2)
	req.RequestID = "order-42"
	first, err := c.Consume(ctx(t), req)
	must(t, err)
	again, err := c.Consume(ctx(t), req)
	must(t, err)
	if first.Replayed || !again.Replayed || !again.Allowed ||
		string(again.Limits[0].Receipt) != string(first.Limits[0].Receipt) {
		t.Fatalf("first %+v, repeat %+v", first, again)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 3) {
		t.Fatalf("a replayed Consume took tokens again: value %v", check.Limits[0].Value)
	}
	// The same request_id with another request is refused, naming the field.
	other := one("api", "k", 3)
	other.RequestID = "order-42"
	_, err = c.Consume(ctx(t), other)
	var e *ratelimit.Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Field != "request_id" {
		t.Fatalf("request_id reused for another request: %v", err)
	}
}

func TestSettleCancelsTheReservationOfAnAbandonedWait(t *testing.T) {
	s := startServer(t)
	// Cancelled once the Wait has its reservation's answer (not merely once the server shows the
	// debt: the answer may still be on its way, and this test is about a Wait that is waiting).
	reserved := make(chan struct{}, 1)
	observe := func(ictx context.Context, method string, req, reply interface{},
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ictx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/Reserve") {
			select {
			case reserved <- struct{}{}:
			default:
			}
		}
		return err
	}
	c := s.client(ratelimit.WithDialOptions(grpc.WithUnaryInterceptor(observe)))
	_, err := c.Consume(ctx(t), one("api", "k", 5))
	must(t, err)
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Wait(cctx, "api", "k") }()
	select {
	case <-reserved:
	case <-time.After(20 * time.Second):
		t.Fatal("the Wait's Reserve was never answered")
	}
	waitForDebt(t, c, "api", "k")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v", err)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if check.Limits[0].Value < -0.01 {
		t.Fatalf("the abandoned reservation still owes: value %v", check.Limits[0].Value)
	}

	// A deadline before retry_at: the reservation is given back at once.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if err := c.Wait(dctx, "api", "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a deadline before retry_at: %v", err)
	}
	check, err = c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if check.Limits[0].Value < -0.01 {
		t.Fatalf("the reservation refused for the deadline still owes: value %v",
			check.Limits[0].Value)
	}
}

func TestAWaitAbandonedWhileItsReserveIsInFlightLeavesNoReservation(t *testing.T) {
	s := startServer(t)
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first Reserve reaches the server and is decided, then the caller gives up before the
	// answer is read: what a cancellation racing the reply looks like to the client.
	reserves := 0
	lose := func(ictx context.Context, method string, req, reply interface{},
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ictx, method, req, reply, cc, opts...)
		if strings.HasSuffix(method, "/Reserve") {
			reserves++
			if reserves == 1 {
				cancel()
				return status.Error(codes.Canceled, "context canceled")
			}
		}
		return err
	}
	c := s.client(ratelimit.WithDialOptions(grpc.WithUnaryInterceptor(lose)))
	_, err := c.Consume(ctx(t), one("api", "k", 5))
	must(t, err)
	if err := c.Wait(cctx, "api", "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled during its Reserve: %v", err)
	}
	if reserves != 2 {
		t.Fatalf("%d Reserve calls, want the first and its replay", reserves)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 0) {
		t.Fatalf("the reservation of the abandoned Wait was not given back: value %v",
			check.Limits[0].Value)
	}
}

func TestSettleIsImplementedByTheServer(t *testing.T) {
	s := startServer(t)
	c := s.client()
	_, err := c.Settle(ctx(t), ratelimit.Settlement{Receipt: []byte("not a receipt"), Used: 0})
	if status.Code(err) == codes.Unimplemented {
		t.Fatalf("the server does not implement Settle: %v", err)
	}
	var e *ratelimit.Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument ||
		e.Field != "settlements[0].receipt" {
		t.Fatalf("a forged receipt: %v (field %q)", err, e.Field)
	}
}

func TestOmitReceiptsConsumeTakesTokensWithoutAReceipt(t *testing.T) {
	s := startServer(t)
	c := s.client()
	req := one("api", "k", 2)
	req.OmitReceipts = true
	r, err := c.Consume(ctx(t), req)
	must(t, err)
	if !r.Allowed || !near(r.Limits[0].Value, 3) || len(r.Limits[0].Receipt) != 0 {
		t.Fatalf("an allowed Consume with OmitReceipts: %+v", r)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 3) {
		t.Fatalf("a Consume with OmitReceipts took nothing: value %v", check.Limits[0].Value)
	}
	// The same call without it carries a receipt, as before.
	r, err = c.Consume(ctx(t), one("api", "k", 2))
	must(t, err)
	if !r.Allowed || !near(r.Limits[0].Value, 1) || len(r.Limits[0].Receipt) == 0 {
		t.Fatalf("an allowed Consume without OmitReceipts: %+v", r)
	}
}

func TestOmitReceiptsAppliesToItsOwnBatchEntry(t *testing.T) {
	s := startServer(t)
	c := s.client()
	omit := one("api", "k", 1)
	omit.OmitReceipts = true
	reserve := one("other", "k", 1)
	reserve.OmitReceipts = true
	results, err := c.Batch(ctx(t),
		ratelimit.BatchEntry{Method: ratelimit.MethodConsume, Request: omit},
		ratelimit.BatchEntry{Method: ratelimit.MethodConsume, Request: one("api", "k", 1)},
		ratelimit.BatchEntry{Method: ratelimit.MethodReserve, Request: reserve})
	must(t, err)
	if len(results) != 3 {
		t.Fatalf("one result per entry: %+v", results)
	}
	if r := results[0].Result; results[0].Err != nil || !r.Allowed || !near(r.Limits[0].Value, 4) ||
		len(r.Limits[0].Receipt) != 0 {
		t.Fatalf("the entry with OmitReceipts: %+v %v", r, results[0].Err)
	}
	if r := results[1].Result; results[1].Err != nil || !r.Allowed || !near(r.Limits[0].Value, 3) ||
		len(r.Limits[0].Receipt) == 0 {
		t.Fatalf("the entry without OmitReceipts: %+v %v", r, results[1].Err)
	}
	if r := results[2].Result; results[2].Err != nil || !r.Allowed || !near(r.Limits[0].Value, 4) ||
		len(r.Limits[0].Receipt) != 0 {
		t.Fatalf("the Reserve entry with OmitReceipts: %+v %v", r, results[2].Err)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 3) {
		t.Fatalf("both Consume entries take their token: value %v", check.Limits[0].Value)
	}
}

func TestWaitRequestWithOmitReceiptsStillGivesBackItsReservation(t *testing.T) {
	s := startServer(t)
	c := s.client()
	_, err := c.Consume(ctx(t), one("api", "k", 5))
	must(t, err)
	// A deadline before retry_at: WaitRequest must be able to cancel what it reserved, so it
	// asks for the receipts whatever the request says.
	req := one("api", "k", 1)
	req.OmitReceipts = true
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if _, err := c.WaitRequest(dctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRequest with a deadline before retry_at: %v", err)
	}
	check, err := c.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	if !near(check.Limits[0].Value, 0) {
		t.Fatalf("the reservation of a WaitRequest with OmitReceipts still owes: value %v",
			check.Limits[0].Value)
	}
}
