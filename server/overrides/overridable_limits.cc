#include "server/overrides/overridable_limits.h"

#include "absl/strings/str_cat.h"
#include "server/envoy/envoy_plan.h"

namespace ratelimit {

std::optional<LimitConfig> OverridableLimits::Find(LimitSource source,
                                                   absl::string_view name) const {
  switch (source) {
    case LimitSource::kDefined:
      if (const LimitConfig* c = file_->Find(name)) return *c;
      return std::nullopt;
    case LimitSource::kEnvoy: {
      if (envoy_ == nullptr) return std::nullopt;
      const EnvoyRateLimit* rule = FindEnvoyRule(*envoy_, name);
      if (rule == nullptr || rule->limits.empty()) return std::nullopt;
      const EnvoyLimit& first = rule->limits.front();
      if (first.requests_per_unit == 0) return std::nullopt;  // a blocking rule has no rate
      return EnvoyLimitConfig(first);
    }
    case LimitSource::kInline:
      break;
  }
  return std::nullopt;
}

absl::Status OverridableLimits::RequireDefined(const OverrideTarget& target,
                                               absl::string_view field) const {
  if (Find(target.source, target.name)) return absl::OkStatus();
  if (target.source != LimitSource::kEnvoy) {
    return absl::NotFoundError(
        absl::StrCat(field, ".name: no limit \"", target.name, "\" in the limits file"));
  }
  if (envoy_ == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        field, ".source: this server does not serve the Envoy API (no Envoy configuration)"));
  }
  const std::optional<EnvoyStatePath> path = ParseEnvoyStateName(target.name);
  if (!path || envoy_->FindDomain(path->domain) == nullptr) {
    return absl::NotFoundError(absl::StrCat(field, ".name: no Envoy domain \"",
                                            path ? path->domain : "", "\" in the configuration"));
  }
  const EnvoyRateLimit* rule = FindEnvoyRule(*envoy_, target.name);
  if (rule == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        field, ".envoy_path: no rule of domain \"", path->domain,
        "\" has this descriptor path (one entry per level, each key with the rule's value, or "
        "none for a key-only rule)"));
  }
  return absl::NotFoundError(absl::StrCat(field, ".envoy_path: the rule ", rule->limit_name,
                                          " has no rate to override (it is unlimited, "
                                          "blocks every request, or is a concurrency rule)"));
}

}  // namespace ratelimit
