#include "bench/local_quota.h"

#include <algorithm>
#include <cmath>

namespace ratelimit::bench {
namespace {

constexpr double kMicrosPerSecond = 1e6;

}  // namespace

void LocalQuota::Apply(const BucketAction& action, int64_t now_us) {
  if (action.has_abandon_action()) {
    kind_ = Kind::kNone;
    max_ = 0;
    return;
  }
  if (!action.has_quota_assignment_action()) return;
  const auto& assignment = action.quota_assignment_action();
  const envoy::type::v3::RateLimitStrategy& strategy = assignment.rate_limit_strategy();
  Kind kind;
  if (strategy.has_token_bucket()) {
    kind = Kind::kTokenBucket;
  } else if (strategy.has_blanket_rule()) {
    kind = strategy.blanket_rule() == envoy::type::v3::RateLimitStrategy::DENY_ALL
               ? Kind::kDenyAll
               : Kind::kAllowAll;
  } else {
    return;  // RequestsPerTimeUnit, or no strategy: not enforced
  }
  // Envoy reads the time to live in whole seconds.
  expires_us_ = now_us + assignment.assignment_time_to_live().seconds() *
                             static_cast<int64_t>(kMicrosPerSecond);
  if (kind == Kind::kTokenBucket) {
    const envoy::type::v3::TokenBucket& bucket = strategy.token_bucket();
    const int64_t fill_seconds = bucket.fill_interval().seconds();
    const double rate = fill_seconds > 0 ? static_cast<double>(bucket.tokens_per_fill().value()) /
                                               static_cast<double>(fill_seconds)
                                         : 0;
    const double max = bucket.max_tokens();
    Refill(now_us);
    // The same bucket again keeps its tokens; a changed one keeps its remaining/max ratio; the
    // first one starts full.
    tokens_ = kind_ == Kind::kTokenBucket && max_ > 0 ? tokens_ / max_ * max : max;
    rate_ = rate;
    max_ = max;
    refilled_us_ = now_us;
  }
  kind_ = kind;
}

uint64_t LocalQuota::Admit(uint64_t requests, int64_t now_us) {
  if (!HasAssignment(now_us)) {
    admitted_without_assignment_ += requests;
    return requests;
  }
  switch (kind_) {
    case Kind::kAllowAll:
      return requests;
    case Kind::kDenyAll:
      return 0;
    case Kind::kTokenBucket: {
      Refill(now_us);
      const uint64_t allowed =
          std::min<uint64_t>(requests, static_cast<uint64_t>(std::floor(std::max(0.0, tokens_))));
      tokens_ -= static_cast<double>(allowed);
      return allowed;
    }
    case Kind::kNone:
      break;
  }
  return requests;
}

bool LocalQuota::HasAssignment(int64_t now_us) const {
  return kind_ != Kind::kNone && now_us < expires_us_;
}

double LocalQuota::AssignedRate(int64_t now_us) const {
  return HasAssignment(now_us) && kind_ == Kind::kTokenBucket ? rate_ : 0;
}

void LocalQuota::Refill(int64_t now_us) {
  if (kind_ == Kind::kTokenBucket && now_us > refilled_us_) {
    tokens_ = std::min(
        max_, tokens_ + rate_ * static_cast<double>(now_us - refilled_us_) / kMicrosPerSecond);
  }
  refilled_us_ = std::max(refilled_us_, now_us);
}

}  // namespace ratelimit::bench
