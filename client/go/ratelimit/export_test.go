package ratelimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
)

// Hooks for the tests of package ratelimit_test.

// SetLeaseOpQueued makes c (WithLeaseStream) call f after each op it queues on its lease stream,
// with the number of ops queued and not yet taken by the sender. Set it before the first op.
func SetLeaseOpQueued(c *Client, f func(n int)) { c.leases.queued = f }

// ExtendAsHeartbeat is Extend as a held lease's heartbeat sends it: waiting for the connection.
func ExtendAsHeartbeat(ctx context.Context, c *Client, ref LeaseRef, ttl time.Duration) (
	*ExtendResult, error) {
	return c.extend(ctx, ref, ttl, grpc.WaitForReady(true))
}
