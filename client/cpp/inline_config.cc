#include "client/cpp/inline_config.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cpp/cli_util.h"
#include "client/cpp/proto_time.h"

namespace ratelimit {
namespace {

// `text` as a Duration into `out`; INVALID_ARGUMENT naming `flag` when it is no duration.
absl::Status SetDuration(const std::string& text, absl::string_view flag,
                         google::protobuf::Duration* out) {
  absl::StatusOr<absl::Duration> d = ParseDurationFlag(flag, text);
  if (!d.ok()) return d.status();
  SetProtoDuration(*d, out);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<v1::LimitConfig>> InlineConfigOf(const InlineConfigFlags& flags) {
  if (flags.kind.empty()) {
    // A config flag without --kind was dropped unseen: the call went to the limits file's limit
    // of that name, or was refused for a limit it does not define.
    const char* given = flags.rate != 0                ? "--rate"
                        : !flags.period.empty()        ? "--period"
                        : flags.capacity               ? "--capacity"
                        : flags.max_reserved           ? "--max_reserved"
                        : !flags.lease_ttl.empty()     ? "--lease_ttl"
                        : !flags.max_lease_ttl.empty() ? "--max_lease_ttl"
                                                       : nullptr;
    if (given == nullptr) return std::nullopt;
    return absl::InvalidArgumentError(absl::StrCat(
        given, ": an inline config needs --kind (token_bucket, fixed_window or concurrency)"));
  }
  v1::LimitConfig c;
  const bool rate_kind = flags.kind == "token_bucket" || flags.kind == "fixed_window";
  if (flags.kind == "token_bucket") {
    c.set_kind(v1::TOKEN_BUCKET);
  } else if (flags.kind == "fixed_window") {
    c.set_kind(v1::FIXED_WINDOW);
  } else if (flags.kind == "concurrency") {
    c.set_kind(v1::CONCURRENCY);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kind must be token_bucket, fixed_window or concurrency, got \"", flags.kind, "\""));
  }
  // Every field given is sent, those that do not belong to the kind too: the server names them
  // rather than the command dropping them unseen. A rate limit needs its period.
  if (flags.rate != 0) c.set_rate(flags.rate);
  if (rate_kind && flags.period.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--period: required with --kind=", flags.kind, " (\"1s\", \"1m\", ...)"));
  }
  if (rate_kind || !flags.period.empty()) {
    if (absl::Status s = SetDuration(flags.period, "--period", c.mutable_period()); !s.ok()) {
      return s;
    }
  }
  if (flags.capacity) c.set_capacity(*flags.capacity);
  if (flags.max_reserved) c.set_max_reserved(*flags.max_reserved);
  if (!flags.lease_ttl.empty()) {
    if (absl::Status s = SetDuration(flags.lease_ttl, "--lease_ttl", c.mutable_lease_ttl());
        !s.ok()) {
      return s;
    }
  }
  if (!flags.max_lease_ttl.empty()) {
    if (absl::Status s =
            SetDuration(flags.max_lease_ttl, "--max_lease_ttl", c.mutable_max_lease_ttl());
        !s.ok()) {
      return s;
    }
  }
  return c;
}

}  // namespace ratelimit
