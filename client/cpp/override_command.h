#ifndef RATELIMIT_CLIENT_CPP_OVERRIDE_COMMAND_H_
#define RATELIMIT_CLIENT_CPP_OVERRIDE_COMMAND_H_

// `ratelimit override set|get|list|delete|audit`: the requests the command line makes of the
// OverrideService, and how its answers are printed. Apart from main, so that each is tested on
// its own.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {

// The command line of an override command (flags not given are unset or empty).
struct OverrideFlags {
  // LIMITS_FILE, or ENVOY (then `name` is the domain and envoy_path the rule).
  v1::LimitSource source = v1::LIMITS_FILE;
  // --envoy_path: one level per item, "key" or "key=value".
  std::vector<std::string> envoy_path;
  std::string name;
  std::string key;
  std::string key_pattern;
  std::optional<double> rate;
  std::string period;  // a duration ("1s", "1m"); empty: unset
  std::optional<double> capacity;
  std::optional<double> max_reserved;
  bool unlimited = false;
  bool blocked = false;
  std::string expires_in;  // a duration from now; empty: never
  std::string reason;
  std::string actor;
  int32_t page_size = 0;
  std::string page_token;
};

// The target named by --source, --name, --envoy_path and --key or --key_pattern (the server
// checks them).
v1::OverrideTarget OverrideTargetOf(const OverrideFlags& flags);

// SetOverride of --unlimited, --blocked, or the limit fields given; INVALID_ARGUMENT naming the
// flag for a duration that does not parse or flags that contradict each other.
absl::StatusOr<v1::SetOverrideRequest> SetOverrideOf(const OverrideFlags& flags, absl::Time now);

// One line per override:
//   api key customer-42: rate=100 capacity=200 until 2026-11-28T12:00:00Z, by alice (token):
//   incident 811
std::string FormatOverride(const v1::Override& o);
// One line per audit entry: "#7 2026-11-28T10:00:00Z set api key k by token (alice): reason".
std::string FormatAuditEntry(const v1::OverrideAuditEntry& e);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CPP_OVERRIDE_COMMAND_H_
