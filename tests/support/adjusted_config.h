#ifndef RATELIMIT_TESTS_SUPPORT_ADJUSTED_CONFIG_H_
#define RATELIMIT_TESTS_SUPPORT_ADJUSTED_CONFIG_H_

// Limit configs under a runtime override, for the tests of the algebra and of the Redis
// function library that decide them.

#include <cstdint>
#include <optional>

#include "storage/limit_config.h"

namespace ratelimit::testing {

// `after` under a runtime override (LimitConfig::adjustment): changed at `changed_at` (unset: no
// change to carry) from the token bucket `before`, counted against `base_capacity`, with `effect`.
inline LimitConfig Adjusted(
    LimitConfig after, std::optional<int64_t> changed_at, const LimitConfig& before,
    double base_capacity,
    LimitConfig::Adjustment::Effect effect = LimitConfig::Adjustment::Effect::kLimit) {
  LimitConfig::Adjustment a;
  a.effect = effect;
  a.changed_at_us = changed_at;
  a.before_rate = before.rate;
  a.before_period_us = before.period_us;
  a.before_capacity = before.EffectiveCapacity();
  a.base_capacity = base_capacity;
  after.adjustment = a;
  return after;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_ADJUSTED_CONFIG_H_
