#ifndef RATELIMIT_STORAGE_LIMIT_CONFIG_H_
#define RATELIMIT_STORAGE_LIMIT_CONFIG_H_

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace ratelimit {

// kConcurrency: at most `capacity` slots held at once by leases (storage/leases/lease.h); the
// rate-limit algebra never decides it.
enum class LimitKind { kTokenBucket, kFixedWindow, kConcurrency };

// Where a limit's definition comes from. Each source has its own namespace of state names in the
// store, so that no request of one source can read or change a state of another, whatever names
// they use. The values are the namespace's byte in the store's keys (state_codec.h).
enum class LimitSource : uint8_t {
  kDefined = 'd',  // the server's limits file
  kEnvoy = 'e',    // Envoy RLS rules and the limits Envoy sends in descriptors
  kInline = 'i',   // inline configs of ratelimit.v1 requests
};

// "limits_file", "envoy" or "inline", for logs.
absl::string_view LimitSourceName(LimitSource source);

// The source whose namespace byte is `byte` (as the stores' keys hold it); nullopt for any other.
std::optional<LimitSource> LimitSourceOfByte(char byte);

// The definition of a limit. Build one, then call ValidateLimitConfig before handing it to the
// algebra, which assumes a valid config.
struct LimitConfig {
  LimitKind kind = LimitKind::kTokenBucket;
  // Tokens added per period. Finite, > 0.
  double rate = 0;
  // Microseconds. > 0.
  int64_t period_us = 0;
  // Most tokens that can accumulate. Unset means `rate`. Finite, >= 0.
  std::optional<double> capacity;
  // Most tokens reservations may owe. Unset: unbounded; 0: no reservations.
  std::optional<double> max_reserved;
  // Fixed window only: offset of window boundaries from the epoch, in microseconds. Unset: a
  // stable hash of (name, key) modulo the period.
  std::optional<int64_t> start_us;
  // Fraction of the period, 0..1: the largest jitter added to a denied caller's retry_at.
  double jitter = 0;
  // Concurrency only (0 for the other kinds): the TTL of a lease whose request gives none, and
  // the longest TTL a request may give. Microseconds; 1 ms .. kMaxLeaseTtlMicros, and
  // lease_ttl_us <= max_lease_ttl_us. A concurrency limit's `capacity` is its slots (a whole
  // number, 1..kMaxSlots); rate and period are 0.
  int64_t lease_ttl_us = 0;
  int64_t max_lease_ttl_us = 0;

  // Set only for a key whose limit a runtime override changes or changed (storage/overrides,
  // docs/overrides.md "A key's tokens when its limit changes"); unset for every other limit.
  struct Adjustment {
    // What the override does: decide with this config (kLimit), allow everything (kUnlimited)
    // or deny everything (kBlocked); the last two take nothing and leave the state as it is.
    enum class Effect : uint8_t { kLimit, kUnlimited, kBlocked };
    Effect effect = Effect::kLimit;
    // Token bucket: the latest change of this key's limit, at `changed_at_us`, from the token
    // bucket (`before_rate` per `before_period_us`, `before_capacity`). A state written before
    // it is first refilled to that moment under the old limit, then clamped to `capacity`.
    // Unset: no change to account for.
    std::optional<int64_t> changed_at_us;
    double before_rate = 0;
    int64_t before_period_us = 0;
    double before_capacity = 0;
    // Fixed window: the configured capacity, against which the store counts the windows' values,
    // so that the count taken in a window is kept across changes.
    double base_capacity = 0;

    friend bool operator==(const Adjustment&, const Adjustment&) = default;
  };
  std::optional<Adjustment> adjustment = std::nullopt;

  double EffectiveCapacity() const { return capacity.value_or(rate); }

  friend bool operator==(const LimitConfig&, const LimitConfig&) = default;
};

// Documented bounds of every size the service accepts.
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr int kMaxLimitsPerRequest = 16;
inline constexpr double kMaxAmount = 1e15;  // count, rate, capacity, max_reserved
inline constexpr int64_t kMaxPeriodMicros = int64_t{100} * 366 * 24 * 3600 * 1000000;
inline constexpr size_t kMaxRequestBytes = 64 * 1024;
// Concurrency limits: slots, and lease TTLs.
inline constexpr double kMaxSlots = 1e9;
// Whether `n` is a number of slots: a whole number, 1..kMaxSlots (a concurrency limit's capacity,
// a request's count of slots).
inline bool IsSlotCount(double n) {
  return std::isfinite(n) && n >= 1 && n <= kMaxSlots && std::floor(n) == n;
}
inline constexpr int64_t kMinLeaseTtlMicros = 1000;                            // 1 ms
inline constexpr int64_t kMaxLeaseTtlMicros = int64_t{24} * 3600 * 1000000;    // 1 day
inline constexpr int64_t kDefaultLeaseTtlMicros = int64_t{30} * 1000000;       // 30 s
inline constexpr int64_t kDefaultMaxLeaseTtlMicros = int64_t{3600} * 1000000;  // 1 hour

// A concurrency limit's lease TTLs left unset (0) get their defaults: max_lease_ttl_us
// max(lease_ttl_us or kDefaultLeaseTtlMicros, kDefaultMaxLeaseTtlMicros) but at most
// kMaxLeaseTtlMicros, then lease_ttl_us
// min(kDefaultLeaseTtlMicros, max_lease_ttl_us). Other kinds are left as they are.
void FillLeaseTtlDefaults(LimitConfig& config);

// Checks every field of `config`. On failure returns INVALID_ARGUMENT whose message starts with
// `field_prefix` followed by the offending field ("limits[0].config.rate: ...").
absl::Status ValidateLimitConfig(const LimitConfig& config, absl::string_view field_prefix);

// True when `text` holds a control character: ASCII's (below 0x20, or DEL) or, in UTF-8, one of
// U+0080..U+009F (the C1 controls): what names, and the free-text fields an operator's terminal
// prints (a lease's holder), must not carry.
bool ContainsControlCharacter(absl::string_view text);

// Checks a limit name / key / count against the bounds above, with the same message convention;
// the field is named `field` followed by `leaf` (joined only for an error).
absl::Status ValidateName(absl::string_view name, absl::string_view field,
                          absl::string_view leaf = "");
absl::Status ValidateKey(absl::string_view key, absl::string_view field,
                         absl::string_view leaf = "");
absl::Status ValidateCount(double count, absl::string_view field, absl::string_view leaf = "");

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LIMIT_CONFIG_H_
