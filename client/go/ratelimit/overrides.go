package ratelimit

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// OverrideTarget names what an override applies to: a limit and exactly one of Key (one key,
// matched exactly) or KeyPattern (the keys matching it: '*' matches any run of bytes).
type OverrideTarget struct {
	// Source is LimitsFile (the default) or Envoy.
	Source Source
	// Name is the limit's name in the limits file (the domain for Source Envoy).
	Name       string
	Key        string
	KeyPattern string
	// EnvoyPath is the rule's descriptor path, for Source Envoy only (values empty).
	EnvoyPath []EnvoyPathEntry
}

// OverrideLimit is the new limit of an override: a field left nil (or a zero Period) keeps the
// configured value.
type OverrideLimit struct {
	Rate        *float64
	Period      time.Duration
	Capacity    *float64
	MaxReserved *float64
}

// Override is an override as the server stores it. Exactly one of Limit, Unlimited (every
// request allowed, nothing taken) and Blocked (every request denied with Blocked) is set.
type Override struct {
	Target    OverrideTarget
	Limit     *OverrideLimit
	Unlimited bool
	Blocked   bool
	// ExpiresAt is when the override ends by itself; zero: never.
	ExpiresAt time.Time
	Reason    string
	// SetBy is the caller's actor and the credential that authorised it ("alice (token)"),
	// SetAt when it was set.
	SetBy string
	SetAt time.Time
	// Expired: it has ended but was not deleted. Inert: its limit is no longer in the limits
	// file, so it changes no decision.
	Expired bool
	Inert   bool
}

// SetOverrideRequest creates or replaces the override of Target. Give exactly one effect:
// Limit, Unlimited or Blocked. ExpiresAt, or ExpiresIn from now, ends it by itself (neither:
// never; not both). Reason and Actor (who the caller says it is) go to the audit history.
type SetOverrideRequest struct {
	Target    OverrideTarget
	Limit     *OverrideLimit
	Unlimited bool
	Blocked   bool
	ExpiresAt time.Time
	ExpiresIn time.Duration
	Reason    string
	Actor     string
}

// SetOverrideResult is the override as stored and the one it replaced (nil when the target had
// none).
type SetOverrideResult struct {
	Override Override
	Replaced *Override
}

// DeleteOverrideRequest deletes the override of Target; Reason and Actor go to the audit
// history.
type DeleteOverrideRequest struct {
	Target OverrideTarget
	Reason string
	Actor  string
}

// ListOverridesRequest asks for one page of the overrides of Source (LimitsFile by default),
// of the limit Name or of every limit when it is empty. PageSize is 1..1000, or 0 for the
// server's default (100); PageToken is the previous page's NextPageToken (empty: the first).
type ListOverridesRequest struct {
	Source    Source
	Name      string
	PageSize  int32
	PageToken string
}

// OverridePage is one page of overrides, in (name, target) order, expired ones included.
// NextPageToken is empty after the last page.
type OverridePage struct {
	Overrides     []Override
	NextPageToken string
}

// ListOverrideAuditRequest asks for one page of the audit history, of the limit Name or of
// every limit; paged as ListOverridesRequest.
type ListOverrideAuditRequest struct {
	Name      string
	PageSize  int32
	PageToken string
}

// OverrideAuditEntry is one change of the overrides.
type OverrideAuditEntry struct {
	// Sequence increases with each change.
	Sequence uint64
	At       time.Time
	// Action is "set" or "delete".
	Action string
	// AuthorizedBy is the credential that authorised the change: "token" or "identity <SAN>".
	AuthorizedBy string
	// Actor is who the caller said it was, Peer its address.
	Actor  string
	Peer   string
	Reason string
	// Before is nil for a new override, After nil for a deletion.
	Before *Override
	After  *Override
}

// OverrideAuditPage is one page of the audit history, newest first.
type OverrideAuditPage struct {
	Entries       []OverrideAuditEntry
	NextPageToken string
}

// errManyEffects is SetOverride's answer to a request with more than one effect.
var errManyEffects = errors.New(
	"ratelimit: SetOverride: give one of Limit, Unlimited and Blocked")

// SetOverride creates the override of req.Target, or replaces it (docs/overrides.md).
// Administrative: sends the admin token, like Reset. A bad field is an *Error with code
// InvalidArgument naming it ("override.limit.rate"); a limit name the limits file does not
// define, NotFound. Never retried.
func (c *Client) SetOverride(ctx context.Context, req SetOverrideRequest) (*SetOverrideResult,
	error) {
	effects := 0
	for _, set := range []bool{req.Limit != nil, req.Unlimited, req.Blocked} {
		if set {
			effects++
		}
	}
	if effects > 1 {
		return nil, errManyEffects
	}
	if !req.ExpiresAt.IsZero() && req.ExpiresIn != 0 {
		return nil, errors.New("ratelimit: SetOverride: give ExpiresAt or ExpiresIn, not both")
	}
	o := &pb.Override{Target: targetToProto(req.Target), Reason: req.Reason}
	switch {
	case req.Limit != nil:
		l := &pb.OverrideLimit{Rate: req.Limit.Rate, Capacity: req.Limit.Capacity,
			MaxReserved: req.Limit.MaxReserved}
		if req.Limit.Period != 0 {
			l.Period = durationpb.New(req.Limit.Period)
		}
		o.Effect = &pb.Override_Limit{Limit: l}
	case req.Unlimited:
		o.Effect = &pb.Override_Unlimited{Unlimited: true}
	case req.Blocked:
		o.Effect = &pb.Override_Blocked{Blocked: true}
	}
	expires := req.ExpiresAt
	if req.ExpiresIn != 0 {
		expires = time.Now().Add(req.ExpiresIn)
	}
	if !expires.IsZero() {
		o.ExpiresAt = timestamppb.New(expires)
	}
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	resp, err := c.overrides.SetOverride(ctx, &pb.SetOverrideRequest{Override: o, Actor: req.Actor})
	if err != nil {
		return nil, newError("SetOverride", err)
	}
	return &SetOverrideResult{Override: overrideOf(resp.Override),
		Replaced: optionalOverride(resp.Replaced)}, nil
}

// GetOverride returns the override of t (an expired one too); an *Error with code NotFound
// when it has none.
func (c *Client) GetOverride(ctx context.Context, t OverrideTarget) (*Override, error) {
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	resp, err := c.overrides.GetOverride(ctx, &pb.GetOverrideRequest{Target: targetToProto(t)})
	if err != nil {
		return nil, newError("GetOverride", err)
	}
	o := overrideOf(resp.Override)
	return &o, nil
}

// DeleteOverride deletes the override of req.Target and returns it: its keys go back to the
// configured limit. An *Error with code NotFound when it has none.
func (c *Client) DeleteOverride(ctx context.Context, req DeleteOverrideRequest) (*Override,
	error) {
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	resp, err := c.overrides.DeleteOverride(ctx, &pb.DeleteOverrideRequest{
		Target: targetToProto(req.Target), Reason: req.Reason, Actor: req.Actor})
	if err != nil {
		return nil, newError("DeleteOverride", err)
	}
	o := overrideOf(resp.Deleted)
	return &o, nil
}

// ListOverrides returns one page of overrides.
func (c *Client) ListOverrides(ctx context.Context, req ListOverridesRequest) (*OverridePage,
	error) {
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	resp, err := c.overrides.ListOverrides(ctx, &pb.ListOverridesRequest{
		Source: pb.LimitSource(req.Source), Name: req.Name, PageSize: req.PageSize,
		PageToken: req.PageToken})
	if err != nil {
		return nil, newError("ListOverrides", err)
	}
	page := &OverridePage{Overrides: make([]Override, 0, len(resp.Overrides)),
		NextPageToken: resp.NextPageToken}
	for _, o := range resp.Overrides {
		page.Overrides = append(page.Overrides, overrideOf(o))
	}
	return page, nil
}

// AllOverrides returns every override ListOverrides would page through from req.PageToken,
// one call per page of req.PageSize (each with its own deadline).
func (c *Client) AllOverrides(ctx context.Context, req ListOverridesRequest) ([]Override, error) {
	var all []Override
	for {
		page, err := c.ListOverrides(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Overrides...)
		if page.NextPageToken == "" {
			return all, nil
		}
		req.PageToken = page.NextPageToken
	}
}

// ListOverrideAudit returns one page of the audit history of the overrides, newest first.
func (c *Client) ListOverrideAudit(ctx context.Context, req ListOverrideAuditRequest) (
	*OverrideAuditPage, error) {
	ctx, cancel := c.adminContext(ctx)
	defer cancel()
	resp, err := c.overrides.ListOverrideAudit(ctx, &pb.ListOverrideAuditRequest{
		Name: req.Name, PageSize: req.PageSize, PageToken: req.PageToken})
	if err != nil {
		return nil, newError("ListOverrideAudit", err)
	}
	page := &OverrideAuditPage{Entries: make([]OverrideAuditEntry, 0, len(resp.Entries)),
		NextPageToken: resp.NextPageToken}
	for _, e := range resp.Entries {
		page.Entries = append(page.Entries, OverrideAuditEntry{
			Sequence: e.Sequence, At: timeOf(e.At), Action: e.Action,
			AuthorizedBy: e.AuthorizedBy, Actor: e.Actor, Peer: e.Peer, Reason: e.Reason,
			Before: optionalOverride(e.Before), After: optionalOverride(e.After),
		})
	}
	return page, nil
}

// AllOverrideAudit returns every audit entry ListOverrideAudit would page through from
// req.PageToken, newest first, one call per page.
func (c *Client) AllOverrideAudit(ctx context.Context, req ListOverrideAuditRequest) (
	[]OverrideAuditEntry, error) {
	var all []OverrideAuditEntry
	for {
		page, err := c.ListOverrideAudit(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Entries...)
		if page.NextPageToken == "" {
			return all, nil
		}
		req.PageToken = page.NextPageToken
	}
}

func targetToProto(t OverrideTarget) *pb.OverrideTarget {
	out := &pb.OverrideTarget{Source: pb.LimitSource(t.Source), Name: t.Name, Key: t.Key,
		KeyPattern: t.KeyPattern}
	for _, e := range t.EnvoyPath {
		out.EnvoyPath = append(out.EnvoyPath, &pb.EnvoyPathEntry{Key: e.Key, Value: e.Value})
	}
	return out
}

func overrideOf(o *pb.Override) Override {
	t := o.GetTarget()
	out := Override{
		Target: OverrideTarget{Source: Source(t.GetSource()), Name: t.GetName(), Key: t.GetKey(),
			KeyPattern: t.GetKeyPattern()},
		Unlimited: o.GetUnlimited(), Blocked: o.GetBlocked(), ExpiresAt: timeOf(o.GetExpiresAt()),
		Reason: o.GetReason(), SetBy: o.GetSetBy(), SetAt: timeOf(o.GetSetAt()),
		Expired: o.GetExpired(), Inert: o.GetInert(),
	}
	for _, e := range t.GetEnvoyPath() {
		out.Target.EnvoyPath = append(out.Target.EnvoyPath,
			EnvoyPathEntry{Key: e.GetKey(), Value: e.GetValue()})
	}
	if l := o.GetLimit(); l != nil {
		out.Limit = &OverrideLimit{Rate: l.Rate, Period: durationOf(l.Period),
			Capacity: l.Capacity, MaxReserved: l.MaxReserved}
	}
	return out
}

func optionalOverride(o *pb.Override) *Override {
	if o == nil {
		return nil
	}
	out := overrideOf(o)
	return &out
}
