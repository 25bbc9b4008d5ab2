#include "server/envoy/xds/xds_convert.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "server/envoy/envoy_config_loader.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit {
namespace {

namespace rlsconf = ::ratelimit::config::ratelimit::v3;

// Strings are always double-quoted, so that a value such as "true", "123" or "*" stays a string.
void EmitString(YAML::Emitter& out, const std::string& key, const std::string& value) {
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

void EmitBool(YAML::Emitter& out, const std::string& key) {
  out << YAML::Key << key << YAML::Value << true;
}

void EmitValue(YAML::Emitter& out, const google::protobuf::Value& value);

void EmitStruct(YAML::Emitter& out, const google::protobuf::Struct& s) {
  out << YAML::BeginMap;
  // Sorted, so that the same metadata always gives the same text.
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.fields()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  for (const std::string& k : keys) {
    out << YAML::Key << YAML::DoubleQuoted << k << YAML::Value;
    EmitValue(out, s.fields().at(k));
  }
  out << YAML::EndMap;
}

void EmitValue(YAML::Emitter& out, const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kBoolValue:
      out << value.bool_value();
      break;
    case google::protobuf::Value::kNumberValue: {
      const double d = value.number_value();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.007199254740992e15) {
        out << static_cast<int64_t>(d);
      } else {
        out << d;
      }
      break;
    }
    case google::protobuf::Value::kStringValue:
      out << YAML::DoubleQuoted << value.string_value();
      break;
    case google::protobuf::Value::kStructValue:
      EmitStruct(out, value.struct_value());
      break;
    case google::protobuf::Value::kListValue:
      out << YAML::BeginSeq;
      for (const google::protobuf::Value& v : value.list_value().values()) EmitValue(out, v);
      out << YAML::EndSeq;
      break;
    default:  // null, or no kind
      out << YAML::Null;
  }
}

void EmitPolicy(YAML::Emitter& out, const rlsconf::RateLimitPolicy& p) {
  out << YAML::BeginMap;
  if (p.unit() != rlsconf::UNKNOWN) EmitString(out, "unit", rlsconf::RateLimitUnit_Name(p.unit()));
  if (!p.unlimited() || p.requests_per_unit() != 0) {
    out << YAML::Key << "requests_per_unit" << YAML::Value << p.requests_per_unit();
  }
  if (p.unlimited()) EmitBool(out, "unlimited");
  if (!p.name().empty()) EmitString(out, "name", p.name());
  if (p.replaces_size() > 0) {
    out << YAML::Key << "replaces" << YAML::Value << YAML::BeginSeq;
    for (const rlsconf::RateLimitReplace& r : p.replaces()) {
      out << YAML::BeginMap;
      EmitString(out, "name", r.name());
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

void EmitDescriptors(YAML::Emitter& out,
                     const google::protobuf::RepeatedPtrField<rlsconf::RateLimitDescriptor>& list) {
  out << YAML::Key << "descriptors" << YAML::Value << YAML::BeginSeq;
  for (const rlsconf::RateLimitDescriptor& d : list) {
    out << YAML::BeginMap;
    EmitString(out, "key", d.key());
    if (!d.value().empty()) EmitString(out, "value", d.value());
    if (d.has_rate_limit()) {
      out << YAML::Key << "rate_limit" << YAML::Value;
      EmitPolicy(out, d.rate_limit());
    }
    if (d.shadow_mode()) EmitBool(out, "shadow_mode");
    if (d.detailed_metric()) EmitBool(out, "detailed_metric");
    if (d.quota_mode()) EmitBool(out, "quota_mode");
    if (d.has_metadata() && d.metadata().fields_size() > 0) {
      out << YAML::Key << "metadata" << YAML::Value;
      EmitStruct(out, d.metadata());
    }
    if (d.descriptors_size() > 0) EmitDescriptors(out, d.descriptors());
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

}  // namespace

std::string RateLimitConfigToYaml(const rlsconf::RateLimitConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  EmitString(out, "domain", config.domain());
  if (config.descriptors_size() > 0) EmitDescriptors(out, config.descriptors());
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<EnvoyConfig> BuildEnvoyConfigFromResources(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources) {
  std::vector<EnvoyConfigFile> files;
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < resources.size(); ++i) {
    const google::protobuf::Any& any = resources[i];
    const std::string field = absl::StrCat("resources[", i, "]");
    if (any.type_url() != kRateLimitConfigTypeUrl) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".type_url: \"", any.type_url(),
                                                     "\" is not ", kRateLimitConfigTypeUrl));
    }
    rlsconf::RateLimitConfig config;
    if (!any.UnpackTo(&config)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".value: not a valid RateLimitConfig message"));
    }
    if (!config.name().empty() && !names.insert(config.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name: \"", config.name(), "\" is repeated"));
    }
    files.push_back(
        EnvoyConfigFile{absl::StrCat("xds:", config.name().empty() ? field : config.name()),
                        RateLimitConfigToYaml(config)});
  }
  // The files' loader: each parsed alone, a domain defined twice named with both sources.
  return BuildEnvoyConfig(files);
}

}  // namespace ratelimit
