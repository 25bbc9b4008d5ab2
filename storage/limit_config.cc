#include "storage/limit_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

// A finite amount in [min, kMaxAmount]; `strictly_positive` excludes zero.
// Errors name `field` followed by `leaf`.
absl::Status CheckAmount(double v, bool strictly_positive, absl::string_view field,
                         absl::string_view leaf) {
  if (!std::isfinite(v)) return InvalidField(field, leaf, absl::StrCat("must be finite, got ", v));
  if (strictly_positive ? v <= 0 : v < 0) {
    return InvalidField(
        field, leaf, absl::StrCat(strictly_positive ? "must be > 0" : "must be >= 0", ", got ", v));
  }
  if (v > kMaxAmount) return InvalidField(field, leaf, absl::StrCat("must be <= 1e15, got ", v));
  return absl::OkStatus();
}

}  // namespace

absl::string_view LimitSourceName(LimitSource source) {
  switch (source) {
    case LimitSource::kDefined:
      return "limits_file";
    case LimitSource::kEnvoy:
      return "envoy";
    case LimitSource::kInline:
      return "inline";
  }
  return "unknown";
}

std::optional<LimitSource> LimitSourceOfByte(char byte) {
  const auto source = static_cast<LimitSource>(byte);
  switch (source) {
    case LimitSource::kDefined:
    case LimitSource::kEnvoy:
    case LimitSource::kInline:
      return source;
  }
  return std::nullopt;
}

namespace {

// A concurrency limit: slots and lease TTLs; every rate field unset.
absl::Status ValidateConcurrencyConfig(const LimitConfig& c, absl::string_view prefix) {
  if (!c.capacity.has_value()) {
    return InvalidField(prefix, "capacity", "is required for a concurrency limit (its slots)");
  }
  const double slots = *c.capacity;
  if (!IsSlotCount(slots)) {
    return InvalidField(
        prefix, "capacity",
        absl::StrFormat("must be a whole number of slots, 1..1e9, got %.15g", slots));
  }
  if (c.rate != 0) return InvalidField(prefix, "rate", "must be unset for a concurrency limit");
  if (c.period_us != 0) {
    return InvalidField(prefix, "period", "must be unset for a concurrency limit");
  }
  if (c.max_reserved.has_value()) {
    return InvalidField(prefix, "max_reserved", "must be unset for a concurrency limit");
  }
  if (c.start_us.has_value()) return InvalidField(prefix, "start", "only applies to fixed windows");
  if (c.jitter != 0) return InvalidField(prefix, "jitter", "must be unset for a concurrency limit");
  if (c.max_lease_ttl_us < kMinLeaseTtlMicros || c.max_lease_ttl_us > kMaxLeaseTtlMicros) {
    return InvalidField(prefix, "max_lease_ttl", "must be between 1ms and 1 day");
  }
  if (c.lease_ttl_us < kMinLeaseTtlMicros || c.lease_ttl_us > c.max_lease_ttl_us) {
    return InvalidField(prefix, "lease_ttl",
                        absl::StrCat("must be between 1ms and max_lease_ttl (",
                                     absl::FormatDuration(absl::Microseconds(c.max_lease_ttl_us)),
                                     "; max_lease_ttl is at most 1 day), got ",
                                     absl::FormatDuration(absl::Microseconds(c.lease_ttl_us))));
  }
  return absl::OkStatus();
}

}  // namespace

void FillLeaseTtlDefaults(LimitConfig& c) {
  if (c.kind != LimitKind::kConcurrency) return;
  if (c.max_lease_ttl_us == 0) {
    // At most the bound: a lease_ttl past it is then refused naming lease_ttl, the field given.
    c.max_lease_ttl_us =
        std::min(std::max(c.lease_ttl_us != 0 ? c.lease_ttl_us : kDefaultLeaseTtlMicros,
                          kDefaultMaxLeaseTtlMicros),
                 kMaxLeaseTtlMicros);
  }
  if (c.lease_ttl_us == 0) c.lease_ttl_us = std::min(kDefaultLeaseTtlMicros, c.max_lease_ttl_us);
}

absl::Status ValidateLimitConfig(const LimitConfig& c, absl::string_view prefix) {
  if (c.kind == LimitKind::kConcurrency) return ValidateConcurrencyConfig(c, prefix);
  if (c.lease_ttl_us != 0) {
    return InvalidField(prefix, "lease_ttl", "only applies to concurrency limits");
  }
  if (c.max_lease_ttl_us != 0) {
    return InvalidField(prefix, "max_lease_ttl", "only applies to concurrency limits");
  }
  // Field names are joined only for an error: a valid config, the common case, builds none.
  if (auto s = CheckAmount(c.rate, true, prefix, "rate"); !s.ok()) return s;
  if (c.period_us <= 0) return InvalidField(prefix, "period", "must be > 0 (at least 1us)");
  if (c.period_us > kMaxPeriodMicros) {
    return InvalidField(prefix, "period", "must be at most 100 years");
  }
  if (c.capacity.has_value()) {
    if (auto s = CheckAmount(*c.capacity, false, prefix, "capacity"); !s.ok()) return s;
  }
  if (c.max_reserved.has_value()) {
    if (auto s = CheckAmount(*c.max_reserved, false, prefix, "max_reserved"); !s.ok()) return s;
  }
  if (c.start_us.has_value()) {
    if (c.kind != LimitKind::kFixedWindow) {
      return InvalidField(prefix, "start", "only applies to fixed windows");
    }
    if (*c.start_us < 0 || *c.start_us > kMaxPeriodMicros) {
      return InvalidField(prefix, "start", "must be between 0 and 100 years");
    }
  }
  if (!(c.jitter >= 0 && c.jitter <= 1)) {
    return InvalidField(prefix, "jitter", absl::StrCat("must be in [0, 1], got ", c.jitter));
  }
  return absl::OkStatus();
}

bool ContainsControlCharacter(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return true;
    // U+0080..U+009F in UTF-8: a terminal acts on these too (U+009B starts an escape sequence).
    if (c == 0xc2 && i + 1 < text.size()) {
      const auto next = static_cast<unsigned char>(text[i + 1]);
      if (next >= 0x80 && next <= 0x9f) return true;
    }
  }
  return false;
}

absl::Status ValidateName(absl::string_view name, absl::string_view field, absl::string_view leaf) {
  if (name.empty()) return InvalidField(field, leaf, "must not be empty");
  if (name.size() > kMaxNameBytes) {
    return InvalidField(
        field, leaf, absl::StrCat("must be at most ", kMaxNameBytes, " bytes, got ", name.size()));
  }
  if (ContainsControlCharacter(name)) {
    return InvalidField(field, leaf, "must not contain control characters");
  }
  return absl::OkStatus();
}

absl::Status ValidateKey(absl::string_view key, absl::string_view field, absl::string_view leaf) {
  if (key.empty()) {
    return InvalidField(field, leaf,
                        "must not be empty (use a fixed key such as \"global\" for a limit "
                        "shared by all callers)");
  }
  if (key.size() > kMaxKeyBytes) {
    return InvalidField(field, leaf,
                        absl::StrCat("must be at most ", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status ValidateCount(double count, absl::string_view field, absl::string_view leaf) {
  return CheckAmount(count, true, field, leaf);
}

}  // namespace ratelimit
