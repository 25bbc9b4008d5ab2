package ratelimit_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// An override raises one key's limit: decisions name it, other keys keep the configured limit,
// a second set replaces it, and a delete brings the key back; the audit has each change.
func TestOverrideRaisesALimitUntilDeletedAndIsAudited(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithAdminTokenFile(s.tokenFile))
	// Over the configured capacity (5) a count can never fit...
	r, err := c.Consume(ctx(t), one("api", "cust-1", 8))
	must(t, err)
	if r.Reason != ratelimit.CountExceedsCapacity || r.Limits[0].Override != "" {
		t.Fatalf("before the override: %+v", r)
	}
	target := ratelimit.OverrideTarget{Name: "api", Key: "cust-1"}
	made, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target,
		Limit: &ratelimit.OverrideLimit{Capacity: ratelimit.Ptr(10.0)}, Reason: "incident 811",
		Actor: "alice"})
	must(t, err)
	o := made.Override
	if made.Replaced != nil || !reflect.DeepEqual(o.Target, target) || o.Limit == nil ||
		*o.Limit.Capacity != 10 || o.Limit.Rate != nil || o.Limit.Period != 0 || o.Blocked ||
		o.Unlimited || o.SetBy != "alice (token)" || o.SetAt.IsZero() || !o.ExpiresAt.IsZero() {
		t.Fatalf("SetOverride: %+v (limit %+v)", made, o.Limit)
	}
	// ...and under the override it does.
	r, err = c.Consume(ctx(t), one("api", "cust-1", 8))
	must(t, err)
	if !r.Allowed || r.Limits[0].Override != "cust-1" || r.Limits[0].Capacity != 10 {
		t.Fatalf("under the override: %+v", r)
	}
	if r, err = c.Consume(ctx(t), one("api", "cust-2", 8)); err != nil || r.Allowed {
		t.Fatalf("another key: %+v, %v", r, err)
	}

	again, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target,
		Limit: &ratelimit.OverrideLimit{Capacity: ratelimit.Ptr(20.0)}, Reason: "more",
		Actor: "bob"})
	must(t, err)
	if !reflect.DeepEqual(again.Replaced, &made.Override) {
		t.Fatalf("replaced %+v, want %+v", again.Replaced, made.Override)
	}
	got, err := c.GetOverride(ctx(t), target)
	must(t, err)
	if !reflect.DeepEqual(*got, again.Override) {
		t.Fatalf("GetOverride %+v, want %+v", got, again.Override)
	}

	deleted, err := c.DeleteOverride(ctx(t), ratelimit.DeleteOverrideRequest{Target: target,
		Reason: "incident over", Actor: "carol"})
	must(t, err)
	if !reflect.DeepEqual(*deleted, again.Override) {
		t.Fatalf("DeleteOverride %+v, want %+v", deleted, again.Override)
	}
	r, err = c.Consume(ctx(t), one("api", "cust-1", 1))
	must(t, err)
	if r.Limits[0].Override != "" || r.Limits[0].Capacity != 5 {
		t.Fatalf("after the delete: %+v", r)
	}
	if _, err := c.GetOverride(ctx(t), target); status.Code(err) != codes.NotFound {
		t.Fatalf("GetOverride after the delete: %v", err)
	}

	entries, err := c.AllOverrideAudit(ctx(t), ratelimit.ListOverrideAuditRequest{Name: "api",
		PageSize: 2})
	must(t, err)
	type change struct{ action, actor, reason string }
	var changes []change
	for _, e := range entries {
		changes = append(changes, change{e.Action, e.Actor, e.Reason})
		if e.AuthorizedBy != "token" || e.Peer == "" || e.At.IsZero() {
			t.Fatalf("audit entry %+v", e)
		}
	}
	want := []change{{"delete", "carol", "incident over"}, {"set", "bob", "more"},
		{"set", "alice", "incident 811"}}
	if !reflect.DeepEqual(changes, want) {
		t.Fatalf("audit %+v, want %+v", changes, want)
	}
	if entries[0].After != nil || !reflect.DeepEqual(entries[0].Before, &again.Override) ||
		entries[2].Before != nil || !reflect.DeepEqual(entries[2].After, &made.Override) ||
		entries[0].Sequence <= entries[1].Sequence {
		t.Fatalf("audit before/after: %+v", entries)
	}
}

// A blocked key is a denial (reason Blocked, no retry time), not an error; an unlimited one
// takes any count.
func TestBlockedKeyIsDeniedWithReasonBlocked(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithAdminToken(testToken))
	before := time.Now()
	made, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{
		Target:  ratelimit.OverrideTarget{Name: "api", KeyPattern: "leaked-*"},
		Blocked: true, ExpiresIn: 2 * time.Hour, Reason: "keys leaked"})
	must(t, err)
	if !made.Override.Blocked || made.Override.Limit != nil ||
		made.Override.ExpiresAt.Before(before.Add(2*time.Hour).Truncate(time.Microsecond)) ||
		made.Override.ExpiresAt.After(time.Now().Add(2*time.Hour)) {
		t.Fatalf("SetOverride: %+v", made.Override)
	}
	r, err := c.Consume(ctx(t), one("api", "leaked-7", 1))
	must(t, err)
	l := r.Limits[0]
	if r.Allowed || r.Reason != ratelimit.Blocked || r.DeniedBy != 0 || !r.RetryAt.IsZero() ||
		l.Reason != ratelimit.Blocked || !l.RetryAt.IsZero() || l.Override != "leaked-*" ||
		r.Reason.String() != "BLOCKED" {
		t.Fatalf("a blocked key: %+v", r)
	}
	if ok, err := c.Allow(ctx(t), "api", "fine-7"); err != nil || !ok {
		t.Fatalf("a key the pattern does not match: %v, %v", ok, err)
	}
	_, err = c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{
		Target: ratelimit.OverrideTarget{Name: "other", Key: "vip"}, Unlimited: true})
	must(t, err)
	r, err = c.Consume(ctx(t), one("other", "vip", 1000))
	must(t, err)
	if !r.Allowed || r.Limits[0].Override != "vip" {
		t.Fatalf("an unlimited key: %+v", r)
	}
}

func TestOverridesAndTheAuditArePaged(t *testing.T) {
	s := startServer(t)
	c := s.client(ratelimit.WithAdminToken(testToken))
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		_, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{
			Target: ratelimit.OverrideTarget{Name: "other", Key: k},
			Limit:  &ratelimit.OverrideLimit{Rate: ratelimit.Ptr(2.0)}})
		must(t, err)
	}
	_, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{
		Target: ratelimit.OverrideTarget{Name: "api", KeyPattern: "trial-*"},
		Limit:  &ratelimit.OverrideLimit{Rate: ratelimit.Ptr(2.0), Period: time.Minute}})
	must(t, err)
	keys := func(os []ratelimit.Override) (out []string) {
		for _, o := range os {
			out = append(out, o.Target.Key+o.Target.KeyPattern)
		}
		return out
	}
	first, err := c.ListOverrides(ctx(t), ratelimit.ListOverridesRequest{Name: "other",
		PageSize: 2})
	must(t, err)
	if !reflect.DeepEqual(keys(first.Overrides), []string{"k0", "k1"}) ||
		first.NextPageToken == "" {
		t.Fatalf("first page: %+v", first)
	}
	second, err := c.ListOverrides(ctx(t), ratelimit.ListOverridesRequest{Name: "other",
		PageSize: 2, PageToken: first.NextPageToken})
	must(t, err)
	if !reflect.DeepEqual(keys(second.Overrides), []string{"k2", "k3"}) {
		t.Fatalf("second page: %+v", second)
	}
	all, err := c.AllOverrides(ctx(t), ratelimit.ListOverridesRequest{PageSize: 2})
	must(t, err)
	if !reflect.DeepEqual(keys(all), []string{"trial-*", "k0", "k1", "k2", "k3", "k4"}) ||
		all[0].Limit == nil || all[0].Limit.Period != time.Minute {
		t.Fatalf("every override: %+v", all)
	}
	page, err := c.ListOverrideAudit(ctx(t), ratelimit.ListOverrideAuditRequest{PageSize: 4})
	must(t, err)
	if len(page.Entries) != 4 || page.NextPageToken == "" || page.Entries[0].After == nil ||
		page.Entries[0].After.Target.KeyPattern != "trial-*" {
		t.Fatalf("first audit page: %+v", page)
	}
	rest, err := c.ListOverrideAudit(ctx(t), ratelimit.ListOverrideAuditRequest{PageSize: 4,
		PageToken: page.NextPageToken})
	must(t, err)
	if len(rest.Entries) != 2 || rest.NextPageToken != "" || rest.Entries[1].After.Target.Key != "k0" {
		t.Fatalf("last audit page: %+v", rest)
	}
}

func TestOverrideBadInputAndMissingTokenAreRefused(t *testing.T) {
	s := startServer(t)
	t.Setenv(ratelimit.AdminTokenEnv, "")
	c := s.client(ratelimit.WithAdminToken(testToken))
	target := ratelimit.OverrideTarget{Name: "api", Key: "k"}
	var e *ratelimit.Error
	_, err := c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target,
		Limit: &ratelimit.OverrideLimit{Rate: ratelimit.Ptr(-1.0)}})
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument ||
		e.Field != "override.limit.rate" || e.Method != "SetOverride" {
		t.Fatalf("a negative rate: %v", err)
	}
	_, err = c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target})
	if !errors.As(err, &e) || e.Field != "override.effect" {
		t.Fatalf("no effect: %v", err)
	}
	_, err = c.ListOverrides(ctx(t), ratelimit.ListOverridesRequest{PageSize: 5000})
	if !errors.As(err, &e) || e.Field != "page_size" {
		t.Fatalf("a page size over 1000: %v", err)
	}
	_, err = c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{
		Target: ratelimit.OverrideTarget{Name: "nope", Key: "k"}, Blocked: true})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("an undefined limit: %v", err)
	}
	_, err = c.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target, Blocked: true,
		Unlimited: true})
	if err == nil || errors.As(err, &e) {
		t.Fatalf("two effects were not refused by the client: %v", err)
	}

	anonymous := s.client()
	_, err = anonymous.SetOverride(ctx(t), ratelimit.SetOverrideRequest{Target: target,
		Blocked: true})
	if !errors.As(err, &e) || e.Code != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	wrong := s.client(ratelimit.WithAdminToken("wrong"))
	if _, err = wrong.ListOverrideAudit(ctx(t), ratelimit.ListOverrideAuditRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("with a wrong token: %v", err)
	}
	all, err := c.AllOverrides(ctx(t), ratelimit.ListOverridesRequest{})
	must(t, err)
	if len(all) != 0 {
		t.Fatalf("a refused call stored an override: %+v", all)
	}
}
