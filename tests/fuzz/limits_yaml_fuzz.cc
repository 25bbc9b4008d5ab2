// Fuzz target: the limits YAML parser (server/limits_file.h). Any input is either a set of limits
// that all pass validation, or INVALID_ARGUMENT naming the source; never a crash or a hang.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "server/config/duration_text.h"
#include "server/config/yaml_util.h"
#include "server/v1/limits_file.h"
#include "storage/limit_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ratelimit;
  const absl::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<LimitSet> parsed = ParseLimitsYaml(yaml, "fuzz.yaml");
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               parsed.status().ToString().c_str());
    FUZZ_CHECK(absl::StartsWith(parsed.status().message(), "fuzz.yaml"),
               "the error does not name the file: %s", parsed.status().ToString().c_str());
  } else {
    for (const auto& [name, config] : parsed->limits) {
      absl::Status s = ValidateName(name, "name");
      FUZZ_CHECK(s.ok(), "accepted %s", s.ToString().c_str());
      s = ValidateLimitConfig(config, name + ".");
      FUZZ_CHECK(s.ok(), "accepted %s", s.ToString().c_str());
      FUZZ_CHECK(parsed->Find(name) == &config, "Find(%s)", name.c_str());
    }
  }
  // The period syntax on its own.
  absl::StatusOr<absl::Duration> d = ParseDurationText(yaml);
  if (!d.ok()) {
    FUZZ_CHECK(d.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               d.status().ToString().c_str());
  }
  return 0;
}
