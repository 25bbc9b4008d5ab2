#include "server/config/yaml_util.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ratelimit {

absl::StatusOr<YAML::Node> LoadYaml(absl::string_view yaml, absl::string_view source) {
  try {
    return YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
}

std::string YamlLocation(absl::string_view source, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return std::string(source);
  return absl::StrCat(source, ":", m.line + 1, ":", m.column + 1);
}

absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view text) {
  absl::Duration d;
  if (!text.empty() && text.back() == 'd') {
    double days;
    if (!absl::SimpleAtod(text.substr(0, text.size() - 1), &days)) {
      return absl::InvalidArgumentError(absl::StrCat("not a duration: \"", text, "\""));
    }
    return absl::Hours(24) * days;
  }
  if (text != "0" && absl::ParseDuration(text, &d)) return d;
  return absl::InvalidArgumentError(absl::StrCat(
      "not a duration: \"", text, "\" (write a number with a unit: us, ms, s, m, h, d)"));
}

}  // namespace ratelimit
