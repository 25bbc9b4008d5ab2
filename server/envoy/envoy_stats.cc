#include "server/envoy/envoy_stats.h"

#include <algorithm>
#include <cmath>

namespace ratelimit {

uint64_t EnvoyNearLimitHits(const EnvoyLimit& rule, const EnvoyOutcome& outcome, uint64_t hits,
                            bool consumed, double near_limit_ratio) {
  const int64_t limit = rule.algorithm == EnvoyAlgorithm::kTokenBucket
                            ? rule.burst.value_or(rule.requests_per_unit)
                            : rule.requests_per_unit;
  const int64_t threshold = static_cast<int64_t>(
      std::floor(static_cast<float>(limit) * static_cast<float>(near_limit_ratio)));
  const int64_t left = static_cast<int64_t>(std::floor(outcome.value + 1e-9));
  const int64_t h = static_cast<int64_t>(hits);
  const int64_t before = !outcome.over && consumed ? limit - left - h : limit - left;
  const int64_t after = before + h;
  if (!outcome.over) {
    if (after <= threshold) return 0;
    return static_cast<uint64_t>(before >= threshold ? h : after - threshold);
  }
  if (before >= limit) return 0;
  return static_cast<uint64_t>(limit - std::max(threshold, before));
}

void EnvoyStats::Record(absl::Span<const EnvoyDescriptorPlan> plan,
                        absl::Span<const EnvoyOutcome> outcomes) {
  using Kind = EnvoyDescriptorPlan::Kind;
  // Whether the request's hits were consumed: no descriptor that is not soft is over, and not
  // every quota descriptor is (EvaluateEnvoyPlan's rules).
  bool consumed = !EnvoyQuotaDenies(plan, outcomes);
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    if ((p.kind == Kind::kLimited || p.kind == Kind::kBlocked || p.kind == Kind::kAcquire) &&
        outcomes[i].over && !p.soft()) {
      consumed = false;
    }
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    if (p.kind == Kind::kNoLimit || p.kind == Kind::kRelease) continue;
    EnvoyRuleCounters& c = counters_[p.stat_key];
    if (p.kind == EnvoyDescriptorPlan::Kind::kRefund) {
      c.negative_hits += p.hits;
      continue;
    }
    c.total_hits += p.hits;
    if (p.kind == Kind::kUnlimited) {
      c.within_limit += p.hits;
      continue;
    }
    if (outcomes[i].over) {
      c.over_limit += p.hits;
      if (p.rule()->shadow_mode) c.shadow_mode += p.hits;
    } else {
      c.within_limit += p.hits;
    }
    if (p.kind == Kind::kLimited) {
      c.near_limit += EnvoyNearLimitHits(p.rule()->limits[outcomes[i].limit], outcomes[i], p.hits,
                                         consumed, near_limit_ratio_);
    }
  }
}

void EnvoyStats::RecordGlobalShadow() {
  absl::MutexLock lock(&mu_);
  ++global_shadow_mode_;
}

void EnvoyStats::RecordDomainNotFound(absl::string_view domain) {
  absl::MutexLock lock(&mu_);
  auto it = domains_not_found_.find(domain);
  if (it == domains_not_found_.end()) {
    // kOtherDomains itself takes the last place.
    const bool full = domains_not_found_.size() + 1 >= kMaxUnknownDomains;
    it = domains_not_found_.try_emplace(full ? absl::string_view(kOtherDomains) : domain, 0).first;
  }
  ++it->second;
}

absl::flat_hash_map<std::string, uint64_t> EnvoyStats::DomainsNotFound() const {
  absl::MutexLock lock(&mu_);
  return domains_not_found_;
}

uint64_t EnvoyStats::global_shadow_mode() const {
  absl::MutexLock lock(&mu_);
  return global_shadow_mode_;
}

absl::flat_hash_map<std::string, EnvoyRuleCounters> EnvoyStats::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace ratelimit
