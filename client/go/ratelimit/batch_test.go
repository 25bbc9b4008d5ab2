package ratelimit_test

// Batch: independent requests in one call, each answered on its own, in order.

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"ratelimit.dev/client/go/ratelimit"
)

func TestBatchAnswersEachEntryInOrder(t *testing.T) {
	s := startServer(t)
	c := s.client()
	bad := one("api", "k", -1)
	results, err := c.Batch(ctx(t),
		ratelimit.BatchEntry{Method: ratelimit.MethodConsume, Request: one("api", "k", 4)},
		ratelimit.BatchEntry{Method: ratelimit.MethodConsume, Request: one("api", "k", 4)},
		ratelimit.BatchEntry{Method: ratelimit.MethodConsume, Request: bad},
		ratelimit.BatchEntry{Method: ratelimit.MethodCheck, Request: one("api", "k", 1)},
		ratelimit.BatchEntry{Method: ratelimit.MethodReserve, Request: one("other", "k", 1)})
	must(t, err)
	if len(results) != 5 {
		t.Fatalf("one result per entry: %+v", results)
	}
	if r := results[0].Result; results[0].Err != nil || !r.Allowed || !near(r.Limits[0].Value, 1) ||
		len(r.Limits[0].Receipt) == 0 {
		t.Fatalf("first consume: %+v %v", r, results[0].Err)
	}
	if r := results[1].Result; results[1].Err != nil || r.Allowed ||
		r.Reason != ratelimit.InsufficientTokens {
		t.Fatalf("the second sees the first's take and is denied: %+v %v", r, results[1].Err)
	}
	var e *ratelimit.Error
	if !errors.As(results[2].Err, &e) || e.Method != "Batch" || e.Code != codes.InvalidArgument ||
		e.Field != "entries[2].limits[0].count" || results[2].Result != nil {
		t.Fatalf("an invalid entry gets its own error: %v", results[2].Err)
	}
	if r := results[3].Result; results[3].Err != nil || !r.Allowed || !near(r.Limits[0].Value, 1) {
		t.Fatalf("check: %+v %v", r, results[3].Err)
	}
	if r := results[4].Result; results[4].Err != nil || !r.Allowed || !near(r.Limits[0].Value, 4) {
		t.Fatalf("reserve: %+v %v", r, results[4].Err)
	}
}

func TestBatchWithoutEntriesIsRefusedAsAWhole(t *testing.T) {
	s := startServer(t)
	_, err := s.client().Batch(ctx(t))
	var e *ratelimit.Error
	if !errors.As(err, &e) || e.Method != "Batch" || e.Code != codes.InvalidArgument ||
		e.Field != "entries" {
		t.Fatalf("empty batch: %v", err)
	}
}
