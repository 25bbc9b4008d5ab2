#ifndef RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_H_
#define RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_H_

// Runtime overrides of configured limits (docs/overrides.md): what an override is, which keys it
// matches, which of several applies, and the limit it makes of a configured one. Plain values and
// pure functions.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "storage/limit_config.h"

namespace ratelimit {

// What an override targets: a limit (source and name), and one key or the keys matching a
// pattern.
struct OverrideTarget {
  LimitSource source = LimitSource::kDefined;
  std::string name;
  // The key, or the pattern when `pattern` is true.
  std::string key;
  bool pattern = false;

  friend bool operator==(const OverrideTarget&, const OverrideTarget&) = default;
};

// Bounds of a pattern: its '*' count and its length (kMaxKeyBytes).
inline constexpr int kMaxPatternWildcards = 8;
// Bounds of the free texts an override records.
inline constexpr size_t kMaxOverrideReasonBytes = 1024;
inline constexpr size_t kMaxOverrideActorBytes = 256;

// What an override does to its keys' limit.
struct OverrideAction {
  enum class Effect : uint8_t { kLimit, kUnlimited, kBlocked };
  Effect effect = Effect::kLimit;
  // kLimit: the fields that replace the configured ones; unset ones keep the configured value.
  std::optional<double> rate;
  std::optional<int64_t> period_us;
  std::optional<double> capacity;
  std::optional<double> max_reserved;

  friend bool operator==(const OverrideAction&, const OverrideAction&) = default;
};

// One override, as stored. A deleted override is kept as a tombstone (`deleted_at_us` set) until
// its target is set again, so that its keys' change back to their limit is computed exactly.
struct Override {
  OverrideTarget target;
  OverrideAction action;
  // Unset: until deleted.
  std::optional<int64_t> expires_at_us;
  std::string reason;
  // Who set it: the caller's actor and the credential that authorised it.
  std::string set_by;
  int64_t set_at_us = 0;
  // What it replaced for its target: the target's previous override, or unset for the
  // configured limit (the limit in force for its keys before `set_at_us`).
  std::optional<OverrideAction> replaced;
  // Set for a tombstone: when it was deleted.
  std::optional<int64_t> deleted_at_us;

  // When it stops applying (deletion or expiry, whichever is first); unset: never.
  std::optional<int64_t> EndsAt() const;
  // Applies at `now_us`: set, not deleted, not expired.
  bool ActiveAt(int64_t now_us) const;

  friend bool operator==(const Override&, const Override&) = default;
};

// Whether `key` matches `pattern`: '*' matches any run of bytes (the empty one too), every other
// byte itself.
bool PatternMatches(absl::string_view pattern, absl::string_view key);

// Whether pattern `a` takes precedence over pattern `b` for a key both match: fewer '*', then a
// longer literal prefix (the bytes before the first '*'), then more literal bytes, then the
// byte-wise smaller pattern. A strict total order on distinct patterns.
bool MorePreciseThan(absl::string_view a, absl::string_view b);

// Checks a pattern: 1..kMaxKeyBytes bytes with 1..kMaxPatternWildcards '*'. INVALID_ARGUMENT
// naming `field` otherwise.
absl::Status ValidatePattern(absl::string_view pattern, absl::string_view field);

// The configured limit `base` with the fields of `action` (kLimit) in place of its own; for an
// unlimited or blocked action, `base` itself. No adjustment is set.
LimitConfig ApplyAction(const LimitConfig& base, const OverrideAction& action);

// Checks that `action` makes a valid limit of `base`: the result passes ValidateLimitConfig, and a
// fixed window's period is not changed; a concurrency limit takes no override (naming
// `prefix` + "target.name"). INVALID_ARGUMENT naming `prefix` + the field otherwise
// ("override.limit.rate: ...").
absl::Status CheckAction(const LimitConfig& base, const OverrideAction& action,
                         absl::string_view prefix);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_H_
