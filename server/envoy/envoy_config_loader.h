#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_CONFIG_LOADER_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_CONFIG_LOADER_H_

// Loads the envoyproxy/ratelimit YAML configuration: a directory of files, one domain each.
//
//   domain: messaging                 # required, unique across files
//   quota_buckets: {...}              # RLQS budgets (server/rlqs/rlqs_config.h)
//   descriptors:
//     - key: message_type             # required
//       value: marketing              # optional; `*` matches any run of characters
//       shadow_mode: false            # over-limit verdicts are reported OK
//       quota_mode: false             # over limit only matters when every quota descriptor is
//       detailed_metric: false        # statistics per request value, at every level
//       value_to_metric: false        # statistics show the request's value at this level
//       share_threshold: false        # `*` values only: every matching value shares one counter
//       metadata: {any: map}          # returned in dynamic_metadata when the descriptor passes
//       rate_limit:                   # optional
//         unit: day                   # second|minute|hour|day|week|month|year (any case)
//         requests_per_unit: 5        # 0..4294967295; 0 blocks
//         unlimited: false            # true: no unit, never limits
//         name: marketing             # target of other limits' replaces
//         replaces: [{name: other}]   # drop the named limits when this one also applies
//         algorithm: fixed_window     # extension: fixed_window (default) | token_bucket
//         burst: 10                   # extension, token_bucket only: capacity (default rpu)
//         max_reserved: 0             # extension: debt one large request may leave
//       rate_limits:                  # extension, instead of rate_limit: 1..8 limits of one
//         - {unit: second, requests_per_unit: 10}  # rule, all-or-nothing (no `unlimited`;
//         - {unit: day, requests_per_unit: 10000}  # limit i > 0 counts under its own key)
//       descriptors: [...]            # nested levels, same form
//
// Every error is INVALID_ARGUMENT "<file>:<line>:<column>: <field>: <what>", where field is a
// path such as descriptors[0].rate_limit.unit. Unknown and repeated keys are errors.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/envoy/envoy_config.h"

namespace ratelimit {

// Ownership and thread safety: the functions keep no state; results are returned by value and
// owned by the caller. Safe to call from any thread (ReadEnvoyConfigDir reads the directory as
// it is at the time of the call).

// Parses one file's contents; `source` names it in errors.
absl::StatusOr<EnvoyDomain> ParseEnvoyDomainYaml(absl::string_view yaml, absl::string_view source);

// One configuration file: its path and contents.
struct EnvoyConfigFile {
  std::string path;
  std::string bytes;

  friend bool operator==(const EnvoyConfigFile&, const EnvoyConfigFile&) = default;
};

// Reads the configuration files of `dir`: regular files (or links to them) named *.yaml or
// *.yml, not starting with '.', sorted by name. Not recursive, so Kubernetes ConfigMap mounts
// (..data links) work. NOT_FOUND when `dir` cannot be listed.
absl::StatusOr<std::vector<EnvoyConfigFile>> ReadEnvoyConfigDir(const std::string& dir);

// Parses every file into one configuration. A domain defined twice is an error naming both
// files. No files: no domains (every descriptor is then OK).
absl::StatusOr<EnvoyConfig> BuildEnvoyConfig(absl::Span<const EnvoyConfigFile> files);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_CONFIG_LOADER_H_
