package ratelimit_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// Wait against the in-process fake, which counts the calls it is sent.

var fakeReceipt = []byte("receipt-of-the-reservation")

// reservedInAnHour is an allowed reservation whose work may run in an hour, with a receipt
// to give it back with.
func reservedInAnHour() *pb.RateLimitResponse {
	at := time.Now().Add(time.Hour)
	return &pb.RateLimitResponse{Allowed: true, DeniedBy: -1, RetryAt: timestamppb.New(at),
		RetryAfter: durationpb.New(time.Hour),
		Results: []*pb.LimitResult{{Name: "api", Key: "k", Allowed: true, Value: -1,
			Capacity: 5, RetryAt: timestamppb.New(at), Receipt: fakeReceipt}}}
}

func TestWaitWithAnEndedContextSendsNothing(t *testing.T) {
	f := &fakeService{response: reservedInAnHour()}
	c, err := ratelimit.Dial(serveFake(t, f))
	must(t, err)
	defer c.Close()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(),
		time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, ended := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"cancelled", cancelled, context.Canceled}, {"past its deadline", expired,
		context.DeadlineExceeded}} {
		l := c.Limiter("api", "k")
		waits := map[string]func() error{
			"Wait":          func() error { return c.Wait(ended.ctx, "api", "k") },
			"WaitN(3)":      func() error { return c.WaitN(ended.ctx, "api", "k", 3) },
			"WaitN(0)":      func() error { return c.WaitN(ended.ctx, "api", "k", 0) },
			"Limiter.Wait":  func() error { return l.Wait(ended.ctx) },
			"Limiter.WaitN": func() error { return l.WaitN(ended.ctx, 2) },
			"WaitRequest": func() error {
				_, err := c.WaitRequest(ended.ctx, one("api", "k", 1))
				return err
			},
		}
		for what, wait := range waits {
			if err := wait(); !errors.Is(err, ended.want) {
				t.Errorf("%s with a context %s: %v, want the context's error %v", what,
					ended.name, err, ended.want)
			}
		}
	}
	if r, s, k := f.reserves.Load(), f.settles.Load(), f.checks.Load(); r != 0 || s != 0 || k != 0 {
		t.Fatalf("waits with an ended context sent %d Reserve, %d Settle and %d Check calls; "+
			"want none", r, s, k)
	}
}

func TestWaitGivesBackItsReservationWhenTheContextEndsDuringTheWait(t *testing.T) {
	f := &fakeService{response: reservedInAnHour()}
	reserved := make(chan struct{}, 1)
	observe := func(ictx context.Context, method string, req, reply interface{},
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ictx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/Reserve") {
			reserved <- struct{}{}
		}
		return err
	}
	c, err := ratelimit.Dial(serveFake(t, f), ratelimit.WithDialOptions(
		grpc.WithUnaryInterceptor(observe)))
	must(t, err)
	defer c.Close()

	// Cancelled while it sleeps until the reservation's time.
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Wait(cctx, "api", "k") }()
	select {
	case <-reserved:
	case <-time.After(20 * time.Second):
		t.Fatal("the Wait's Reserve was never answered")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled during its sleep: %v", err)
	}
	// A deadline before the reservation's time: given back at once.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if err := c.Wait(dctx, "api", "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a deadline before the reservation's time: %v", err)
	}
	<-reserved
	settled := f.settled()
	if r, s := f.reserves.Load(), f.settles.Load(); r != 2 || s != 2 || len(settled) != 2 {
		t.Fatalf("%d Reserve and %d Settle calls (%d settlements); want one of each per Wait",
			r, s, len(settled))
	}
	for _, s := range settled {
		if !bytes.Equal(s.Receipt, fakeReceipt) || s.Used != 0 {
			t.Fatalf("the reservation was not given back: settlement %v", s)
		}
	}
}
