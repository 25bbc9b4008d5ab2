#ifndef RATELIMIT_SERVER_CONFIG_YAML_UTIL_H_
#define RATELIMIT_SERVER_CONFIG_YAML_UTIL_H_

// Helpers shared by the YAML configuration parsers (limits file, Envoy directory).

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit {

// Ownership and thread safety: the functions keep no state; a returned YAML::Node owns its
// document. Safe to call from any thread; one node must not be used by two threads at once.

// Parses a YAML document; a syntax error is INVALID_ARGUMENT "<source>:<line>:<column>: <why>".
absl::StatusOr<YAML::Node> LoadYaml(absl::string_view yaml, absl::string_view source);

// "<source>:<line>:<column>" of `node` (1-based), or just `source` when the node has no mark.
std::string YamlLocation(absl::string_view source, const YAML::Node& node);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_CONFIG_YAML_UTIL_H_
