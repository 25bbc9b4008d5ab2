#include "server/envoy/envoy_overrides.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ratelimit {
namespace {

constexpr EnvoyUnit kUnitsByLength[] = {EnvoyUnit::kSecond, EnvoyUnit::kMinute, EnvoyUnit::kHour,
                                        EnvoyUnit::kDay,    EnvoyUnit::kWeek,   EnvoyUnit::kMonth,
                                        EnvoyUnit::kYear};

uint32_t RoundDown(double v) {
  if (!(v > 0)) return 0;
  if (v >= static_cast<double>(std::numeric_limits<uint32_t>::max())) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(std::floor(v));
}

}  // namespace

EnvoyLimit EnvoyReportedLimit(const EnvoyLimit& configured, const LimitConfig& adjusted) {
  EnvoyLimit out = configured;
  const bool window = configured.algorithm == EnvoyAlgorithm::kFixedWindow;
  if (window && !(adjusted.EffectiveCapacity() >= 1)) {
    // No window ever holds a whole request: reported as a blocking rule is.
    out.requests_per_unit = 0;
    return out;
  }
  // What a period admits for as long as it lasts: a window refills `rate` but holds at most its
  // capacity; a bucket refills `rate` (its capacity is the burst, reported below).
  const double per_period =
      window ? std::min(adjusted.rate, adjusted.EffectiveCapacity()) : adjusted.rate;
  const double period_s = static_cast<double>(adjusted.period_us) / 1e6;
  // Units no shorter than the configured one, shortest first.
  const auto* first =
      std::find(std::begin(kUnitsByLength), std::end(kUnitsByLength), configured.unit);
  if (first == std::end(kUnitsByLength)) first = std::begin(kUnitsByLength);
  out.unit = configured.unit;
  out.requests_per_unit = 0;
  for (const auto* u = std::begin(kUnitsByLength); u != std::end(kUnitsByLength); ++u) {
    if (EnvoyUnitSeconds(*u) * 1000000 == adjusted.period_us) {
      out.unit = *u;
      out.requests_per_unit = RoundDown(per_period);
      break;
    }
  }
  for (const auto* u = first; out.requests_per_unit == 0 && u != std::end(kUnitsByLength); ++u) {
    const uint32_t n = RoundDown(per_period * static_cast<double>(EnvoyUnitSeconds(*u)) / period_s);
    if (n >= 1) {
      out.unit = *u;
      out.requests_per_unit = n;
    }
  }
  if (out.requests_per_unit == 0) out.requests_per_unit = 1;  // slower than one a year
  if (configured.algorithm == EnvoyAlgorithm::kTokenBucket) {
    out.burst = std::max<uint32_t>(1, RoundDown(adjusted.EffectiveCapacity()));
  }
  if (adjusted.max_reserved) {
    out.max_reserved = RoundDown(*adjusted.max_reserved);
  } else {
    out.max_reserved.reset();
  }
  return out;
}

size_t ApplyEnvoyOverrides(const OverrideIndex& index, int64_t now_us,
                           absl::Span<EnvoyDescriptorPlan> plan) {
  using Kind = EnvoyDescriptorPlan::Kind;
  if (index.empty()) return 0;
  size_t decided = 0;
  for (EnvoyDescriptorPlan& p : plan) {
    // Limits Envoy sent in a descriptor are not configured rules: no override targets them.
    if ((p.kind != Kind::kLimited && p.kind != Kind::kRefund) || p.config_rule == nullptr ||
        p.override_rule || p.requests.empty()) {
      continue;
    }
    const EnvoyRateLimit& rule = *p.config_rule;
    LimitRequest& first = p.requests.front();
    // The first limit's key has no suffix (EnvoyLimitKeySuffix(0)): it is the joined values.
    const Override* o =
        index.Adjust(LimitSource::kEnvoy, rule.state_name, first.key, now_us, first.config);
    if (o == nullptr) continue;
    ++decided;
    p.runtime_override = o->target.key;
    switch (o->action.effect) {
      case OverrideAction::Effect::kUnlimited:
        // A refund too is answered as an unlimited rule answers it, and gives nothing back.
        p.kind = Kind::kUnlimited;
        p.requests.clear();
        break;
      case OverrideAction::Effect::kBlocked: {
        p.kind = p.kind == Kind::kRefund ? Kind::kNoLimit : Kind::kBlocked;
        p.requests.clear();
        // Reported as a blocking rule is: 0 requests per unit.
        EnvoyRateLimit reported = rule;
        reported.limits.front().requests_per_unit = 0;
        p.override_rule = std::move(reported);
        break;
      }
      case OverrideAction::Effect::kLimit: {
        first.override_target = o->target.key;
        EnvoyRateLimit reported = rule;
        reported.limits.front() = EnvoyReportedLimit(rule.limits.front(), first.config);
        p.override_rule = std::move(reported);
        break;
      }
    }
  }
  return decided;
}

}  // namespace ratelimit
