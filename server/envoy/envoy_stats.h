#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_STATS_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_STATS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
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
  uint64_t near_limit = 0;     // hits that took the count past the near-limit threshold, within
                               // the limit (EnvoyNearLimitHits)
  uint64_t negative_hits = 0;  // hits given back (is_negative_hits refunds); not in total_hits

  friend bool operator==(const EnvoyRuleCounters&, const EnvoyRuleCounters&) = default;
};

// The reference's near_limit count for one descriptor: with L the limit (requests_per_unit;
// a token bucket's burst) and T = floor(L * near_limit_ratio) (in single precision, as the
// reference), "used" is L minus the whole tokens left (for a fixed window, the window's count;
// for a token bucket, what is missing from a full bucket). A within-limit verdict counts the hits
// that brought "used" past T (all `hits` when it was past T already); an over-limit verdict
// counts those that landed in (max(T, used before), L], none when the limit was reached before.
// `consumed`: whether the request consumed its hits (EnvoyEvaluatePlan allowed it), so that an
// allowed outcome's value is the balance after them; otherwise values are balances before them.
uint64_t EnvoyNearLimitHits(const EnvoyLimit& rule, const EnvoyOutcome& outcome, uint64_t hits,
                            bool consumed, double near_limit_ratio);

// Counters by statistics key (the rule's limit name; see MatchDescriptor for detailed_metric and
// value_to_metric).
//
// Ownership: owns its counters; Snapshot() returns a copy.
// Thread safety: thread-safe.
class EnvoyStats {
 public:
  // `near_limit_ratio`: the reference's NEAR_LIMIT_RATIO. REQUIRES: in (0, 1].
  explicit EnvoyStats(double near_limit_ratio = 0.8) : near_limit_ratio_(near_limit_ratio) {}

  // Counts one evaluated request. REQUIRES: outcomes.size() == plan.size().
  void Record(absl::Span<const EnvoyDescriptorPlan> plan, absl::Span<const EnvoyOutcome> outcomes);

  absl::flat_hash_map<std::string, EnvoyRuleCounters> Snapshot() const;

  // Counts one request answered OK only because of the server's shadow mode (the reference's
  // global_shadow_mode statistic).
  void RecordGlobalShadow();
  uint64_t global_shadow_mode() const;

  // Counts one request for a domain the Envoy configuration does not define (answered OK with no
  // limit, as the reference answers it; its domain_not_found statistic). The first
  // kMaxUnknownDomains domains are counted apart, later ones together under kOtherDomains, so
  // that callers cannot grow the counters without bound.
  static constexpr size_t kMaxUnknownDomains = 64;
  static constexpr char kOtherDomains[] = "(other)";
  void RecordDomainNotFound(absl::string_view domain);
  absl::flat_hash_map<std::string, uint64_t> DomainsNotFound() const;

 private:
  const double near_limit_ratio_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, EnvoyRuleCounters> counters_ ABSL_GUARDED_BY(mu_);
  uint64_t global_shadow_mode_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, uint64_t> domains_not_found_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_STATS_H_
