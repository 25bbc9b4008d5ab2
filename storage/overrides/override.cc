#include "storage/overrides/override.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "storage/status_util.h"

namespace ratelimit {

std::optional<int64_t> Override::EndsAt() const {
  if (deleted_at_us && expires_at_us) return std::min(*deleted_at_us, *expires_at_us);
  return deleted_at_us ? deleted_at_us : expires_at_us;
}

bool Override::ActiveAt(int64_t now_us) const {
  const std::optional<int64_t> end = EndsAt();
  return !end || now_us < *end;
}

bool PatternMatches(absl::string_view pattern, absl::string_view key) {
  // Greedy matching with backtracking to the last '*': linear in |pattern| * |key| at worst.
  size_t p = 0, k = 0;
  size_t star = absl::string_view::npos, star_k = 0;
  while (k < key.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_k = k;
    } else if (p < pattern.size() && pattern[p] == key[k]) {
      ++p;
      ++k;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      k = ++star_k;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

// (wildcards, -literal prefix, -literal bytes): smaller is more precise.
std::tuple<size_t, int64_t, int64_t> Precision(absl::string_view pattern) {
  const size_t wildcards = static_cast<size_t>(std::count(pattern.begin(), pattern.end(), '*'));
  const size_t prefix = std::min(pattern.find('*'), pattern.size());
  return {wildcards, -static_cast<int64_t>(prefix),
          -static_cast<int64_t>(pattern.size() - wildcards)};
}

}  // namespace

bool MorePreciseThan(absl::string_view a, absl::string_view b) {
  const auto pa = Precision(a);
  const auto pb = Precision(b);
  if (pa != pb) return pa < pb;
  return a < b;
}

absl::Status ValidatePattern(absl::string_view pattern, absl::string_view field) {
  if (pattern.empty()) return InvalidField(field, "must not be empty");
  if (pattern.size() > kMaxKeyBytes) {
    return InvalidField(
        field, absl::StrCat("must be at most ", kMaxKeyBytes, " bytes, got ", pattern.size()));
  }
  const auto wildcards = std::count(pattern.begin(), pattern.end(), '*');
  if (wildcards == 0) {
    return InvalidField(field, "must contain a '*' (an exact key goes in `key`)");
  }
  if (wildcards > kMaxPatternWildcards) {
    return InvalidField(field,
                        absl::StrCat("at most ", kMaxPatternWildcards, " '*', got ", wildcards));
  }
  return absl::OkStatus();
}

LimitConfig ApplyAction(const LimitConfig& base, const OverrideAction& action) {
  LimitConfig c = base;
  c.adjustment.reset();
  if (action.effect != OverrideAction::Effect::kLimit) return c;
  if (action.rate) c.rate = *action.rate;
  if (action.period_us) c.period_us = *action.period_us;
  if (action.capacity) c.capacity = *action.capacity;
  if (action.max_reserved) c.max_reserved = *action.max_reserved;
  return c;
}

absl::Status CheckAction(const LimitConfig& base, const OverrideAction& action,
                         absl::string_view prefix) {
  if (base.kind == LimitKind::kConcurrency) {
    return InvalidField(absl::StrCat(prefix, "target.name"),
                        "is a concurrency limit: overrides adjust rate limits only");
  }
  if (action.effect != OverrideAction::Effect::kLimit) return absl::OkStatus();
  if (!action.rate && !action.period_us && !action.capacity && !action.max_reserved) {
    return InvalidField(absl::StrCat(prefix, "limit"),
                        "sets no field (rate, period, capacity or max_reserved)");
  }
  if (base.kind == LimitKind::kFixedWindow && action.period_us &&
      *action.period_us != base.period_us) {
    return InvalidField(absl::StrCat(prefix, "limit.period"),
                        "a fixed window's period cannot be overridden (its windows would no "
                        "longer line up with their counts)");
  }
  return ValidateLimitConfig(ApplyAction(base, action), absl::StrCat(prefix, "limit."));
}

}  // namespace ratelimit
