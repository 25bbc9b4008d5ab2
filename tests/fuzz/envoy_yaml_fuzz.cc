// Fuzz target: the Envoy YAML configuration loader (server/envoy/envoy_config_loader.h). Any
// input is either a domain whose every rule converts to a valid limit, or INVALID_ARGUMENT naming
// the file; the same domain in two files is refused naming both.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/envoy/envoy_convert.h"
#include "storage/limit_config.h"
#include "tests/fuzz/fuzz_util.h"

namespace ratelimit {
namespace {

void CheckRule(const EnvoyRateLimit& rule) {
  absl::Status s = ValidateName(rule.limit_name, "limit_name");
  FUZZ_CHECK(s.ok(), "rule at %s: %s", rule.where.c_str(), s.ToString().c_str());
  FUZZ_CHECK(rule.unlimited == rule.limits.empty(), "rule at %s: %zu limits, unlimited %d",
             rule.where.c_str(), rule.limits.size(), rule.unlimited);
  FUZZ_CHECK(rule.limits.size() <= kMaxEnvoyLimitsPerRule, "rule at %s: %zu limits",
             rule.where.c_str(), rule.limits.size());
  for (const EnvoyLimit& limit : rule.limits) {
    if (limit.requests_per_unit == 0) continue;
    s = ValidateLimitConfig(EnvoyLimitConfig(limit), "rate_limit.");
    FUZZ_CHECK(s.ok(), "rule at %s: %s", rule.where.c_str(), s.ToString().c_str());
  }
}

void CheckList(const EnvoyDescriptorList& list, int depth) {
  FUZZ_CHECK(depth < 1000, "descriptor tree deeper than 1000 levels");
  for (const auto& [kv, index] : list.exact) {
    FUZZ_CHECK(index < list.nodes.size(), "exact index %zu", index);
  }
  for (const auto& [k, index] : list.bare) {
    FUZZ_CHECK(index < list.nodes.size(), "bare index %zu", index);
  }
  for (size_t index : list.wildcards) {
    FUZZ_CHECK(index < list.nodes.size(), "wildcard index %zu", index);
  }
  for (const EnvoyDescriptorNode& node : list.nodes) {
    if (node.limit) CheckRule(*node.limit);
    CheckList(node.children, depth + 1);
  }
}

void CheckRefusal(const absl::Status& s, absl::string_view file) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, "%s", s.ToString().c_str());
  FUZZ_CHECK(absl::StrContains(s.message(), file), "the error does not name %s: %s",
             std::string(file).c_str(), s.ToString().c_str());
}

}  // namespace
}  // namespace ratelimit

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ratelimit;
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<EnvoyDomain> domain = ParseEnvoyDomainYaml(yaml, "one.yaml");
  if (!domain.ok()) {
    CheckRefusal(domain.status(), "one.yaml");
    return 0;
  }
  FUZZ_CHECK(!domain->name.empty(), "a domain without a name was accepted");
  CheckList(domain->descriptors, 0);

  const std::vector<EnvoyConfigFile> twice = {{"one.yaml", yaml}, {"two.yaml", yaml}};
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfig(twice);
  FUZZ_CHECK(!config.ok(), "domain %s defined twice was accepted", domain->name.c_str());
  CheckRefusal(config.status(), "two.yaml");
  return 0;
}
