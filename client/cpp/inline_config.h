#ifndef RATELIMIT_CLIENT_CPP_INLINE_CONFIG_H_
#define RATELIMIT_CLIENT_CPP_INLINE_CONFIG_H_

// The inline config the `ratelimit` command line sends with a request when --kind is given
// (consume, check, reserve: a rate limit; acquire, release, extend, leases: a concurrency
// limit), from its flags. The server judges the values; only what cannot be sent (a duration
// that does not parse, an unknown kind) is refused here.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {

struct InlineConfigFlags {
  std::string kind;  // token_bucket, fixed_window or concurrency; empty: no inline config
  double rate = 0;
  std::string period;  // a duration ("1s"); required for the rate kinds
  std::optional<double> capacity;
  std::optional<double> max_reserved;
  std::string lease_ttl;      // concurrency: a duration; empty: the server's default
  std::string max_lease_ttl;  // concurrency: a duration; empty: the server's default
};

// The config, nullopt without --kind and its flags, or INVALID_ARGUMENT naming the flag (a config
// flag without --kind, a rate kind without --period, a value that does not parse).
absl::StatusOr<std::optional<v1::LimitConfig>> InlineConfigOf(const InlineConfigFlags& flags);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CPP_INLINE_CONFIG_H_
