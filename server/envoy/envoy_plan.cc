#include "server/envoy/envoy_plan.h"

namespace ratelimit {

LimitConfig EnvoyLimitConfig(const EnvoyRateLimit& rule) {
  LimitConfig c;
  c.rate = rule.requests_per_unit;
  c.period_us = EnvoyUnitSeconds(rule.unit) * 1000000;
  if (rule.algorithm == EnvoyAlgorithm::kFixedWindow) {
    c.kind = LimitKind::kFixedWindow;
    c.start_us = 0;  // windows aligned to unit boundaries, as the reference's
  } else {
    c.kind = LimitKind::kTokenBucket;
    if (rule.burst) c.capacity = *rule.burst;
  }
  if (rule.max_reserved) c.max_reserved = *rule.max_reserved;
  return c;
}

std::string EnvoyStateKey(absl::Span<const EnvoyEntry> entries) {
  std::string key;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) key.push_back('|');
    for (char c : entries[i].value) {
      if (c == '|' || c == '\\') key.push_back('\\');
      key.push_back(c);
    }
  }
  return key;
}

}  // namespace ratelimit
