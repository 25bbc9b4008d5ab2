package ratelimit

import (
	"context"
	"time"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// Settling what a take really used: Consume and Reserve answer with receipts (Result.Receipt),
// and Settle gives back or charges the difference.

// Settlement says what one receipt's take really used.
type Settlement struct {
	Receipt []byte
	Used    float64
}

// SettleResult is the outcome of one Settlement.
type SettleResult struct {
	Name      string
	Key       string
	Returned  float64
	Charged   float64
	Uncharged float64
	Value     float64
	// PaidAt is when the limit's debt is paid off (zero when the balance is not negative).
	PaidAt    time.Time
	PaidAfter time.Duration
}

// Settle tells the server what allowed Consume and Reserve calls really used: each receipt
// gives back count - used, or charges used - count. All or nothing; never retried.
func (c *Client) Settle(ctx context.Context, settlements ...Settlement) ([]SettleResult, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req := &pb.SettleRequest{}
	for _, s := range settlements {
		req.Settlements = append(req.Settlements, &pb.Settlement{Receipt: s.Receipt, Used: s.Used})
	}
	resp, err := c.stub.Settle(ctx, req)
	if err != nil {
		return nil, newError("Settle", err)
	}
	out := make([]SettleResult, 0, len(resp.Results))
	for _, r := range resp.Results {
		out = append(out, SettleResult{
			Name: r.Name, Key: r.Key, Returned: r.Returned, Charged: r.Charged,
			Uncharged: r.Uncharged, Value: r.Value, PaidAt: timeOf(r.PaidAt),
			PaidAfter: durationOf(r.PaidAfter),
		})
	}
	return out, nil
}
