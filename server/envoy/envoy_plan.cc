#include "server/envoy/envoy_plan.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/leases/lease_id.h"
#include "storage/status_util.h"

namespace ratelimit {

LimitConfig EnvoyLimitConfig(const EnvoyLimit& limit) {
  LimitConfig c;
  c.rate = limit.requests_per_unit;
  c.period_us = EnvoyUnitSeconds(limit.unit) * 1000000;
  if (limit.algorithm == EnvoyAlgorithm::kFixedWindow) {
    c.kind = LimitKind::kFixedWindow;
    c.start_us = 0;  // windows aligned to unit boundaries, as the reference's
  } else {
    c.kind = LimitKind::kTokenBucket;
    if (limit.burst) c.capacity = *limit.burst;
  }
  if (limit.max_reserved) c.max_reserved = *limit.max_reserved;
  return c;
}

LimitConfig EnvoyConcurrencyConfig(const EnvoyConcurrency& concurrency) {
  LimitConfig c;
  c.kind = LimitKind::kConcurrency;
  c.capacity = concurrency.capacity;
  c.lease_ttl_us = concurrency.lease_ttl_us;
  FillLeaseTtlDefaults(c);
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

absl::Status ValidateEnvoyStateKey(absl::string_view key, size_t levels, absl::string_view field) {
  size_t values = 1;
  size_t value_bytes = 0;
  bool empty_value = false;
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] == '|') {
      empty_value = empty_value || value_bytes == 0;
      ++values;
      value_bytes = 0;
      continue;
    }
    if (key[i] == '\\') {
      if (i + 1 == key.size() || (key[i + 1] != '|' && key[i + 1] != '\\')) {
        return InvalidField(field,
                            absl::StrCat("a '\\' escapes only a '|' or a '\\' (byte ", i, ")"));
      }
      ++i;
    }
    ++value_bytes;
  }
  empty_value = empty_value || value_bytes == 0;
  if (values != levels) {
    return InvalidField(
        field, absl::StrCat("the rule has ", levels, levels == 1 ? " level" : " levels",
                            ", so its keys are ", levels,
                            " descriptor values joined by '|' (a '|' or '\\' inside a value "
                            "escaped by '\\'); got ",
                            values));
  }
  if (empty_value) {
    return InvalidField(field, "holds an empty value, which no descriptor entry has");
  }
  return absl::OkStatus();
}

uint32_t EnvoyRemaining(double value) {
  if (!(value > 0)) return 0;
  const double whole = std::floor(value + 1e-9);
  return whole >= std::numeric_limits<uint32_t>::max() ? std::numeric_limits<uint32_t>::max()
                                                       : static_cast<uint32_t>(whole);
}

int64_t EnvoyResetMicros(const EnvoyLimit& limit, double value, int64_t now_us) {
  const int64_t period = EnvoyUnitSeconds(limit.unit) * 1000000;
  if (limit.algorithm == EnvoyAlgorithm::kFixedWindow || limit.requests_per_unit == 0) {
    const int64_t into = ((now_us % period) + period) % period;
    return period - into;
  }
  const double capacity = limit.burst.value_or(limit.requests_per_unit);
  const double missing = capacity - value;
  if (missing <= 0) return 0;
  return static_cast<int64_t>(
      std::ceil(missing * static_cast<double>(period) / limit.requests_per_unit - 1e-6));
}

bool EnvoyQuotaDenies(absl::Span<const EnvoyDescriptorPlan> plan,
                      absl::Span<const EnvoyOutcome> outcomes) {
  using Kind = EnvoyDescriptorPlan::Kind;
  bool denies = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!plan[i].quota || (plan[i].kind != Kind::kLimited && plan[i].kind != Kind::kBlocked &&
                           plan[i].kind != Kind::kAcquire)) {
      continue;
    }
    if (!outcomes[i].over) return false;
    denies = denies || !plan[i].shadow;
  }
  return denies;
}

EnvoyOutcome EnvoyOutcomeOf(const EnvoyRateLimit& rule, absl::Span<const Decision> decisions,
                            int64_t now_us) {
  EnvoyOutcome out;
  out.now_us = now_us;
  bool have = false;
  bool tight_over = false;
  uint32_t tight_remaining = 0;
  int64_t tight_reset = 0;
  for (size_t i = 0; i < decisions.size(); ++i) {
    const Decision& d = decisions[i];
    const bool over = !d.allowed;
    out.over = out.over || over;
    const uint32_t remaining = EnvoyRemaining(d.value);
    const int64_t reset = EnvoyResetMicros(rule.limits[i], d.value, now_us);
    const bool tighter =
        !have || (over && !tight_over) ||
        (over == tight_over &&
         (remaining < tight_remaining || (remaining == tight_remaining && reset > tight_reset)));
    if (!tighter) continue;
    have = true;
    tight_over = over;
    tight_remaining = remaining;
    tight_reset = reset;
    out.value = d.value;
    out.limit = i;
  }
  return out;
}

std::string EnvoyLeaseToken(const LeaseId& lease_id, absl::string_view state_name,
                            absl::string_view key) {
  char digits[LeaseId::kDigits];
  lease_id.WriteDigits(digits);
  return absl::StrCat(absl::string_view(digits, sizeof(digits)), ".",
                      absl::WebSafeBase64Escape(state_name), ".", absl::WebSafeBase64Escape(key));
}

std::optional<EnvoyLeaseRef> ParseEnvoyLeaseToken(absl::string_view token) {
  const std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) return std::nullopt;
  const std::optional<LeaseId> id = LeaseId::Parse(parts[0]);
  if (!id) return std::nullopt;
  EnvoyLeaseRef ref;
  ref.lease_id = *id;
  if (!absl::WebSafeBase64Unescape(parts[1], &ref.state_name) ||
      !absl::WebSafeBase64Unescape(parts[2], &ref.key)) {
    return std::nullopt;
  }
  std::optional<EnvoyStatePath> path = ParseEnvoyStateName(ref.state_name);
  if (!path || path->override_limit || ref.key.empty() || ref.key.size() > kMaxKeyBytes) {
    return std::nullopt;
  }
  ref.domain = std::move(path->domain);
  return ref;
}

}  // namespace ratelimit
