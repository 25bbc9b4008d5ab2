#ifndef RATELIMIT_SERVER_V1_LIMITS_FILE_H_
#define RATELIMIT_SERVER_V1_LIMITS_FILE_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/limit_config.h"

namespace ratelimit {

// Ownership and thread safety: a LimitSet is a value, immutable once parsed and shared
// read-only by the registry; the functions keep no state and are safe to call from any thread.

// Named limit definitions: what a request may name without an inline config.
struct LimitSet {
  absl::flat_hash_map<std::string, LimitConfig> limits;

  // nullptr when `name` is not defined.
  const LimitConfig* Find(absl::string_view name) const {
    auto it = limits.find(name);
    return it == limits.end() ? nullptr : &it->second;
  }
};

// Parses the limits YAML document:
//
//   limits:
//     - name: api                # required, see ValidateName
//       kind: token_bucket       # required: token_bucket | fixed_window
//       rate: 100                # required, tokens per period
//       period: 1s               # required: 1us..100 years (us, ms, s, m, h, d units)
//       capacity: 200            # default: rate
//       max_reserved: 50         # default: unbounded; 0 disables reservations
//       start: 0s                # fixed_window only; default: per-key hash
//       jitter: 0.1              # 0..1, default 0
//     - name: llm_calls
//       kind: concurrency        # at most `capacity` slots held at once (docs/leases.md)
//       capacity: 10             # required: slots, a whole number 1..1e9
//       lease_ttl: 30s           # default 30s (or max_lease_ttl when shorter)
//       max_lease_ttl: 1h        # the longest TTL a request may ask for; default
//                                # max(lease_ttl, 1h); at most 1d
//
// An empty document or `limits: []` defines nothing. Unknown keys, duplicate names and invalid
// values are errors (INVALID_ARGUMENT) naming `source_name`, the line and column, and the field.
absl::StatusOr<LimitSet> ParseLimitsYaml(absl::string_view yaml, absl::string_view source_name);

// The bytes of the limits file at `path`; NOT_FOUND "cannot read limits file <path>" when it
// cannot be read.
absl::StatusOr<std::string> ReadLimitsFile(const std::string& path);

// Reads and parses a file (NOT_FOUND / INVALID_ARGUMENT).
absl::StatusOr<LimitSet> LoadLimitsFile(const std::string& path);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_LIMITS_FILE_H_
