#include "server/config/yaml_util.h"

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

}  // namespace ratelimit
