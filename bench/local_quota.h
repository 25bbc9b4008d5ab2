#ifndef RATELIMIT_BENCH_LOCAL_QUOTA_H_
#define RATELIMIT_BENCH_LOCAL_QUOTA_H_

// What Envoy's rate_limit_quota filter enforces locally for one bucket, as its quota client does
// (docs/envoy.md, "Rate Limit Quota Service"): the assignment it holds from the RLQS server and
// the fallbacks when it holds none.
//
// - No assignment yet, or the assignment's time to live has run out: every request is allowed
//   (the filter's default no-assignment and expired-assignment behaviour; counted apart, so a
//   benchmark can show how much was admitted without an assignment).
// - ALLOW_ALL / DENY_ALL: every request allowed / denied.
// - TokenBucket: refilled continuously at tokens_per_fill / fill_interval (whole seconds, as
//   Envoy reads it; a fill_interval under 1 s is a rate of 0) up to max_tokens; a request takes
//   one token. The first bucket starts full; the same bucket sent again keeps its tokens (an
//   extension); a changed one starts at the old remaining/max ratio.
// - AbandonAction: forgets the assignment (back to no assignment).
// - A strategy Envoy does not enforce (RequestsPerTimeUnit) is ignored, as Envoy does.
//
// Time is passed in (microseconds on any monotonic clock). A value type; not thread-safe.

#include <cstdint>

#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"

namespace ratelimit::bench {

class LocalQuota {
 public:
  using BucketAction = envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse::BucketAction;

  // Applies one action received at `now_us`.
  void Apply(const BucketAction& action, int64_t now_us);

  // Decides `requests` arriving at `now_us`; returns how many are allowed (the rest are denied).
  uint64_t Admit(uint64_t requests, int64_t now_us);

  // Whether an assignment is in force at `now_us` (held and not expired).
  bool HasAssignment(int64_t now_us) const;
  // The token rate of the assignment in force at `now_us`, requests per second; 0 when none is
  // or it is not a token bucket.
  double AssignedRate(int64_t now_us) const;
  // Requests allowed so far without an assignment in force (no assignment or expired).
  uint64_t admitted_without_assignment() const { return admitted_without_assignment_; }

 private:
  enum class Kind { kNone, kAllowAll, kDenyAll, kTokenBucket };

  void Refill(int64_t now_us);

  Kind kind_ = Kind::kNone;
  int64_t expires_us_ = 0;
  double rate_ = 0;    // tokens per second
  double max_ = 0;     // max_tokens
  double tokens_ = 0;  // as of refilled_us_
  int64_t refilled_us_ = 0;
  uint64_t admitted_without_assignment_ = 0;
};

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_LOCAL_QUOTA_H_
