#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_STATS_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_STATS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/envoy/envoy_plan.h"

namespace ratelimit {

// Per-rule counters of the Envoy API, named like the reference's
// (ratelimit.service.rate_limit.<stat key>.<counter>), each counting hits. A plain value: not
// synchronized, copied out of EnvoyStats.
struct EnvoyRuleCounters {
  uint64_t total_hits = 0;
  uint64_t over_limit = 0;     // hits of over-limit verdicts (shadow ones included)
  uint64_t within_limit = 0;   // hits of within-limit verdicts
  uint64_t shadow_mode = 0;    // hits of over-limit verdicts reported OK because of shadow_mode
  uint64_t negative_hits = 0;  // hits given back (is_negative_hits refunds); not in total_hits

  friend bool operator==(const EnvoyRuleCounters&, const EnvoyRuleCounters&) = default;
};

// Counters by statistics key (the rule's limit name; per value with detailed_metric).
//
// Ownership: owns its counters; Snapshot() returns a copy.
// Thread safety: thread-safe.
class EnvoyStats {
 public:
  // Counts one evaluated request. REQUIRES: outcomes.size() == plan.size().
  void Record(absl::Span<const EnvoyDescriptorPlan> plan, absl::Span<const EnvoyOutcome> outcomes);

  absl::flat_hash_map<std::string, EnvoyRuleCounters> Snapshot() const;

  // Counts one request answered OK only because of the server's shadow mode (the reference's
  // global_shadow_mode statistic).
  void RecordGlobalShadow();
  uint64_t global_shadow_mode() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, EnvoyRuleCounters> counters_ ABSL_GUARDED_BY(mu_);
  uint64_t global_shadow_mode_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_STATS_H_
