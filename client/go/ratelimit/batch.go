package ratelimit

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// Batch: independent Consume, Check and Reserve requests in one call.

// Method is what an entry of a Batch asks for.
type Method int32

const (
	// MethodConsume: the entry is a Consume (the default).
	MethodConsume Method = Method(pb.BatchEntry_CONSUME)
	// MethodCheck: the entry is a Check.
	MethodCheck Method = Method(pb.BatchEntry_CHECK)
	// MethodReserve: the entry is a Reserve.
	MethodReserve Method = Method(pb.BatchEntry_RESERVE)
)

// BatchEntry is one request of a Batch. Its RequestID must be empty (the server refuses an
// entry carrying one).
type BatchEntry struct {
	Method  Method
	Request Request
}

// BatchResult is the answer to one entry of a Batch: its Result, or its own error (an *Error
// with Method "Batch" whose Field names the entry, e.g. "entries[2].limits[0].count").
type BatchResult struct {
	Result *Result
	Err    error
}

// Batch sends independent Consume, Check and Reserve requests in one call. The server decides
// them in order (a later entry sees the effect of the earlier ones), each all or nothing on its
// own; one BatchResult per entry, in order. The error is the call's: no entries, more than the
// server's bounds (1000 entries, 4096 limits), a string that is not valid UTF-8 (refused before
// sending, Field naming it: "entries[2].limits[0].key"), transport or deadline. Never retried.
func (c *Client) Batch(ctx context.Context, entries ...BatchEntry) ([]BatchResult, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req := &pb.BatchRequest{Entries: make([]*pb.BatchEntry, 0, len(entries))}
	for _, e := range entries {
		req.Entries = append(req.Entries,
			&pb.BatchEntry{Method: pb.BatchEntry_Method(e.Method), Request: toProto(e.Request)})
	}
	resp, err := c.stub.Batch(ctx, req)
	if err != nil {
		return nil, newError("Batch", err)
	}
	out := make([]BatchResult, 0, len(resp.Results))
	for _, r := range resp.Results {
		if e := r.GetError(); e != nil {
			out = append(out, BatchResult{
				Err: newError("Batch", status.Error(codes.Code(e.Code), e.Message))})
			continue
		}
		out = append(out, BatchResult{Result: fromProto(r.GetResponse())})
	}
	return out, nil
}
