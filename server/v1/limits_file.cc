#include "server/v1/limits_file.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/config/duration_text.h"
#include "server/config/yaml_util.h"
#include "storage/file_util.h"

namespace ratelimit {
namespace {

absl::Status ErrorAt(absl::string_view source, const YAML::Node& node, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(YamlLocation(source, node), ": ", msg));
}

absl::StatusOr<double> ScalarDouble(absl::string_view source, const YAML::Node& node,
                                    absl::string_view field) {
  double v;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &v)) {
    return ErrorAt(source, node, absl::StrCat(field, ": must be a number"));
  }
  return v;
}

absl::StatusOr<int64_t> ScalarDurationMicros(absl::string_view source, const YAML::Node& node,
                                             absl::string_view field) {
  if (!node.IsScalar()) return ErrorAt(source, node, absl::StrCat(field, ": must be a duration"));
  absl::StatusOr<absl::Duration> d = ParseDurationText(node.Scalar());
  if (!d.ok()) return ErrorAt(source, node, absl::StrCat(field, ": ", d.status().message()));
  return absl::ToInt64Microseconds(*d);
}

absl::StatusOr<std::pair<std::string, LimitConfig>> ParseLimit(absl::string_view source,
                                                               const YAML::Node& node,
                                                               size_t index) {
  const std::string field = absl::StrCat("limits[", index, "]");
  if (!node.IsMap()) return ErrorAt(source, node, absl::StrCat(field, ": must be a mapping"));
  std::string name;
  bool has_kind = false, has_rate = false, has_period = false;
  LimitConfig c;
  // Each key's value, so that an error found once the entry is read points at its field's line.
  std::map<std::string, YAML::Node> values;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>("");
    const YAML::Node& v = kv.second;
    values[key] = v;
    const std::string f = absl::StrCat(field, ".", key);
    if (key == "name") {
      if (!v.IsScalar()) return ErrorAt(source, v, absl::StrCat(f, ": must be a string"));
      name = v.Scalar();
    } else if (key == "kind") {
      const std::string kind = v.IsScalar() ? v.Scalar() : "";
      if (kind == "token_bucket") {
        c.kind = LimitKind::kTokenBucket;
      } else if (kind == "fixed_window") {
        c.kind = LimitKind::kFixedWindow;
      } else if (kind == "concurrency") {
        c.kind = LimitKind::kConcurrency;
      } else {
        return ErrorAt(
            source, v,
            absl::StrCat(f, ": must be token_bucket, fixed_window or concurrency, got \"", kind,
                         "\""));
      }
      has_kind = true;
    } else if (key == "rate") {
      absl::StatusOr<double> d = ScalarDouble(source, v, f);
      if (!d.ok()) return d.status();
      c.rate = *d;
      has_rate = true;
    } else if (key == "period") {
      absl::StatusOr<int64_t> us = ScalarDurationMicros(source, v, f);
      if (!us.ok()) return us.status();
      c.period_us = *us;
      has_period = true;
    } else if (key == "capacity") {
      absl::StatusOr<double> d = ScalarDouble(source, v, f);
      if (!d.ok()) return d.status();
      c.capacity = *d;
    } else if (key == "max_reserved") {
      absl::StatusOr<double> d = ScalarDouble(source, v, f);
      if (!d.ok()) return d.status();
      c.max_reserved = *d;
    } else if (key == "start") {
      absl::StatusOr<int64_t> us = ScalarDurationMicros(source, v, f);
      if (!us.ok()) return us.status();
      c.start_us = *us;
    } else if (key == "lease_ttl" || key == "max_lease_ttl") {
      absl::StatusOr<int64_t> us = ScalarDurationMicros(source, v, f);
      if (!us.ok()) return us.status();
      // The config keeps 0 for "not given" (the defaults); a 0 written here is no TTL at all.
      if (*us < kMinLeaseTtlMicros) {
        return ErrorAt(source, v,
                       absl::StrCat(f, ": must be at least 1ms (leave it out for the default)"));
      }
      (key == "lease_ttl" ? c.lease_ttl_us : c.max_lease_ttl_us) = *us;
    } else if (key == "jitter") {
      absl::StatusOr<double> d = ScalarDouble(source, v, f);
      if (!d.ok()) return d.status();
      c.jitter = *d;
    } else {
      return ErrorAt(source, kv.first, absl::StrCat(field, ": unknown key \"", key, "\""));
    }
  }
  // An error naming "limits[i].<key>" is at that key's value when the entry has it.
  auto at_field = [&](const absl::Status& s) {
    const absl::string_view message = s.message();
    const std::string prefix = absl::StrCat(field, ".");
    if (absl::StartsWith(message, prefix)) {
      const absl::string_view rest = message.substr(prefix.size());
      const auto it = values.find(std::string(rest.substr(0, rest.find(':'))));
      if (it != values.end()) return ErrorAt(source, it->second, message);
    }
    return ErrorAt(source, node, message);
  };
  if (absl::Status s = ValidateName(name, absl::StrCat(field, ".name")); !s.ok()) {
    return at_field(s);
  }
  if (!has_kind) return ErrorAt(source, node, absl::StrCat(field, ".kind: required"));
  if (c.kind == LimitKind::kConcurrency) {
    FillLeaseTtlDefaults(c);
  } else if (!has_rate)
    return ErrorAt(source, node, absl::StrCat(field, ".rate: required"));
  if (c.kind != LimitKind::kConcurrency && !has_period) {
    return ErrorAt(source, node, absl::StrCat(field, ".period: required"));
  }
  if (absl::Status s = ValidateLimitConfig(c, absl::StrCat(field, ".")); !s.ok()) {
    return at_field(s);
  }
  return std::make_pair(std::move(name), c);
}

}  // namespace

absl::StatusOr<LimitSet> ParseLimitsYaml(absl::string_view yaml, absl::string_view source) {
  absl::StatusOr<YAML::Node> loaded = LoadYaml(yaml, source);
  if (!loaded.ok()) return loaded.status();
  const YAML::Node& root = *loaded;
  LimitSet set;
  if (root.IsNull()) return set;
  if (!root.IsMap()) return ErrorAt(source, root, "the document must be a mapping with `limits`");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>("");
    if (key != "limits") {
      return ErrorAt(source, kv.first, absl::StrCat("unknown key \"", key, "\""));
    }
    const YAML::Node& list = kv.second;
    if (list.IsNull()) continue;
    if (!list.IsSequence()) return ErrorAt(source, list, "limits: must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      auto parsed = ParseLimit(source, list[i], i);
      if (!parsed.ok()) return parsed.status();
      if (!set.limits.emplace(parsed->first, parsed->second).second) {
        return ErrorAt(
            source, list[i],
            absl::StrCat("limits[", i, "].name: \"", parsed->first, "\" is defined twice"));
      }
    }
  }
  return set;
}

absl::StatusOr<std::string> ReadLimitsFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(absl::StrCat("cannot read limits file ", path));
  }
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("limits file: ", bytes.status().message()));
  }
  return bytes;
}

absl::StatusOr<LimitSet> LoadLimitsFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadLimitsFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseLimitsYaml(*bytes, path);
}

}  // namespace ratelimit
