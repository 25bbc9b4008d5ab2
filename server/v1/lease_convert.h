#ifndef RATELIMIT_SERVER_V1_LEASE_CONVERT_H_
#define RATELIMIT_SERVER_V1_LEASE_CONVERT_H_

// Concurrency limits at the API's edge (docs/leases.md): Acquire, Release, Extend and ListLeases
// requests validated and resolved to a LeaseOp (storage/leases/lease.h), and outcomes converted
// back. Pure functions; errors are INVALID_ARGUMENT naming the field (NOT_FOUND for a name that is
// neither defined nor given a config, PERMISSION_DENIED for an inline config on a server that
// refuses them), as for the rate-limit calls (convert.h).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/v1/convert.h"
#include "server/v1/limits_file.h"
#include "storage/leases/lease.h"
#include "storage/limiter.h"

namespace ratelimit {

// Bounds of the lease calls' own fields.
inline constexpr size_t kMaxLeaseRequestIdBytes = 128;
inline constexpr size_t kMaxHolderBytes = 256;

// An Acquire, resolved: its limits in request order (the concurrency limit among them), and the
// lease op on the concurrency limit's key.
struct AcquirePlan {
  LimitRequests limits;
  // Index of the concurrency limit in `limits`.
  size_t concurrency = 0;
  LeaseOp lease;
};

// Validates and resolves an Acquire: 1..16 limits of which exactly one is a concurrency limit
// (its count a whole number of slots, 1..1e9), the others rate limits; ttl within 1 ms ..
// max_lease_ttl (unset: the limit's lease_ttl); request_id and holder within their bounds.
// `lease_id` is the id the lease gets if the acquire takes slots (LeaseId::New). Fills `plan` (a
// fresh one) where it is, since an AcquirePlan is costly to move; on an error `plan` holds part
// of the request.
absl::Status AcquireFromProto(const v1::AcquireRequest& request, const LimitSet& defined,
                              InlineLimits inline_limits, LeaseId lease_id, AcquirePlan& plan);

// An Acquire answered with the lease of an earlier acquire with the same request_id
// (LeaseDecision::replayed): OK when it asks for what that one did (its count and holder; the
// lease keeps no more of the request), else INVALID_ARGUMENT naming request_id.
absl::Status CheckSameAcquire(const LeaseOp& acquire, const Lease& replayed);

// Release, Extend and ListLeases: the concurrency key they name (a limit of the limits file, or
// an inline config), and for the first two the lease id (32 lowercase hex digits).
absl::StatusOr<LeaseOp> ReleaseFromProto(const v1::ReleaseRequest& request, const LimitSet& defined,
                                         InlineLimits inline_limits);
absl::StatusOr<LeaseOp> ExtendFromProto(const v1::ExtendRequest& request, const LimitSet& defined,
                                        InlineLimits inline_limits);
// The page it asks for is the op's list_limit (page_size; 0: kDefaultLeasePageSize) and
// list_after (the place page_token names). A token belongs to its key: another key's, or another
// limit's, is INVALID_ARGUMENT naming page_token, as is any text no listing gave.
inline constexpr int kDefaultLeasePageSize = 100;
inline constexpr int kMaxLeasePageSize = 1000;
absl::StatusOr<LeaseOp> ListLeasesFromProto(const v1::ListLeasesRequest& request,
                                            const LimitSet& defined, InlineLimits inline_limits);

// A concurrency decision as one limit's Decision of a verdict: allowed and reason as decided,
// `value` the free slots, retry_at when enough free.
Decision LeaseAsDecision(const LeaseDecision& lease);

void LeaseToProto(const Lease& lease, const StateKey& key, v1::Lease* out);

// The answer to an Acquire: per-limit results (the concurrency limit's value its free slots),
// the deciding denial and its retry_at as RateLimitResponse has them, and the lease when allowed.
// Reads plan.limits only: the caller may have moved plan.lease into its store operation.
void AcquireToProto(const AcquirePlan& plan, const LeaseOutcome& outcome, v1::AcquireResponse* out);

// The answers to Release, Extend and ListLeases.
void ReleaseToProto(const LeaseDecision& decision, v1::ReleaseResponse* out);
void ExtendToProto(const LeaseOp& op, const LeaseDecision& decision, v1::ExtendResponse* out);
// ListLeases: the decision's held leases (the page its op listed: LeaseOp::list_after and
// list_limit), and the next page's token when more follow.
void ListLeasesToProto(const LeaseOp& op, const LeaseDecision& decision,
                       v1::ListLeasesResponse* out);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_LEASE_CONVERT_H_
