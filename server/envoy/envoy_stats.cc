#include "server/envoy/envoy_stats.h"

namespace ratelimit {

void EnvoyStats::Record(absl::Span<const EnvoyDescriptorPlan> plan,
                        absl::Span<const EnvoyOutcome> outcomes) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    if (p.kind == EnvoyDescriptorPlan::Kind::kNoLimit) continue;
    EnvoyRuleCounters& c = counters_[p.stat_key];
    if (p.kind == EnvoyDescriptorPlan::Kind::kRefund) {
      c.negative_hits += p.hits;
      continue;
    }
    c.total_hits += p.hits;
    if (p.kind == EnvoyDescriptorPlan::Kind::kUnlimited) {
      c.within_limit += p.hits;
    } else if (outcomes[i].over) {
      c.over_limit += p.hits;
      if (p.rule()->shadow_mode) c.shadow_mode += p.hits;
    } else {
      c.within_limit += p.hits;
    }
  }
}

void EnvoyStats::RecordGlobalShadow() {
  absl::MutexLock lock(&mu_);
  ++global_shadow_mode_;
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
