package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"ratelimit.dev/client/go/ratelimit"
)

// work stands for the job the README's example runs while it holds its slot.
var work = func(ctx context.Context) error { return ctx.Err() }

func runJob(ctx context.Context, c *ratelimit.Client, tenant string) error {
	lease, err := c.Acquire(ctx, ratelimit.AcquireRequest{
		Limits: []ratelimit.Limit{{Name: "jobs", Key: tenant, Config: &ratelimit.Config{
			Kind: ratelimit.Concurrency, Capacity: ratelimit.Ptr(5.0)}}}, // or a limits-file name
		Holder: "worker-1",
	})
	var denied *ratelimit.AcquireDeniedError
	if errors.As(err, &denied) {
		return fmt.Errorf("no free slot, retry in %v", denied.Result.RetryAfter)
	}
	if err != nil {
		return err
	}
	defer lease.Release(context.Background())
	return work(lease.Context()) // at most 5 at once per tenant; cancelled if the lease is lost
}

// The README's lease example is runJob above, verbatim.
func TestTheReadmeLeaseExampleIsRunJob(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	must(t, err)
	block := regexp.MustCompile("(?s)<!-- test: lease example[^\n]*\n```go\n(.*?)```").
		FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no lease example block")
	}
	source, err := os.ReadFile("readme_lease_test.go")
	must(t, err)
	if !strings.Contains(string(source), string(block[1])) {
		t.Fatalf("the README's lease example is not runJob of readme_lease_test.go:\n%s", block[1])
	}
}

func TestTheReadmeLeaseExampleHoldsAndReleasesASlot(t *testing.T) {
	f := newFakeLeases(0)
	c, err := ratelimit.Dial(serveLeases(t, f))
	must(t, err)
	defer c.Close()
	var during uint64
	work = func(ctx context.Context) error { during = f.held("jobs", "t1"); return ctx.Err() }
	defer func() { work = func(ctx context.Context) error { return ctx.Err() } }()
	must(t, runJob(ctx(t), c, "t1"))
	if during != 1 || f.held("jobs", "t1") != 0 || f.acquires[0].Holder != "worker-1" {
		t.Fatalf("held %d during the work, %d after", during, f.held("jobs", "t1"))
	}
	for i := 0; i < 5; i++ {
		_, err := c.TryAcquire(ctx(t), ratelimit.AcquireRequest{Limits: []ratelimit.Limit{{
			Name: "jobs", Key: "t1", Config: &ratelimit.Config{Kind: ratelimit.Concurrency,
				Capacity: ratelimit.Ptr(5.0)}}}})
		must(t, err)
	}
	if err := runJob(ctx(t), c, "t1"); err == nil ||
		!strings.HasPrefix(err.Error(), "no free slot, retry in ") {
		t.Fatalf("runJob with the 5 slots held: %v", err)
	}
}
