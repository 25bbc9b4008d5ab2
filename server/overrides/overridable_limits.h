#ifndef RATELIMIT_SERVER_OVERRIDES_OVERRIDABLE_LIMITS_H_
#define RATELIMIT_SERVER_OVERRIDES_OVERRIDABLE_LIMITS_H_

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/envoy/envoy_config.h"
#include "server/v1/limits_file.h"
#include "storage/limit_config.h"
#include "storage/overrides/override.h"

namespace ratelimit {

// The configured limits that runtime overrides adjust, as one snapshot: the limits file's limits
// (LIMITS_FILE, by name) and the Envoy configuration's descriptor rules (ENVOY, by the rule's
// state name; an override adjusts a rule's first limit). An override whose limit is not here is
// inert (docs/overrides.md).
//
// Thread safety: immutable; thread-safe.
class OverridableLimits {
 public:
  // `envoy` is null when the server does not serve the Envoy API.
  OverridableLimits(std::shared_ptr<const LimitSet> file, std::shared_ptr<const EnvoyConfig> envoy)
      : file_(std::move(file)), envoy_(std::move(envoy)) {}

  // The configured limit that overrides of (`source`, `name`) adjust, or nullopt.
  std::optional<LimitConfig> Find(LimitSource source, absl::string_view name) const;

  // OK when `target` names a configured limit, else NOT_FOUND naming `field` (the limits file's
  // name, or for an Envoy rule its domain or descriptor path).
  absl::Status RequireDefined(const OverrideTarget& target, absl::string_view field) const;

 private:
  std::shared_ptr<const LimitSet> file_;
  std::shared_ptr<const EnvoyConfig> envoy_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OVERRIDES_OVERRIDABLE_LIMITS_H_
