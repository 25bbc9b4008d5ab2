#include "server/envoy/envoy_config_loader.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/config/duration_text.h"
#include "server/config/yaml_util.h"
#include "storage/file_util.h"
#include "storage/limit_config.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit {
namespace {

// What one file's parse needs to carry around.
struct ParseContext {
  absl::string_view source;
  std::string domain;
  // Every limit_name of the domain, so that two rules never share statistics.
  absl::flat_hash_set<std::string> limit_names;
  // (key, value) of each level from the domain down to the descriptor being parsed.
  std::vector<std::pair<std::string, std::string>> path;
};

std::string Where(const ParseContext& ctx, const YAML::Node& node) {
  return YamlLocation(ctx.source, node);
}

absl::Status ErrorAt(const ParseContext& ctx, const YAML::Node& node, absl::string_view field,
                     absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Where(ctx, node), ": ", field, ": ", what));
}

absl::StatusOr<std::string> ScalarString(const ParseContext& ctx, const YAML::Node& node,
                                         absl::string_view field) {
  if (!node.IsScalar()) return ErrorAt(ctx, node, field, "must be a string");
  return node.Scalar();
}

absl::StatusOr<bool> ScalarBool(const ParseContext& ctx, const YAML::Node& node,
                                absl::string_view field) {
  const std::string v = node.IsScalar() ? absl::AsciiStrToLower(node.Scalar()) : "";
  if (v == "true" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "no" || v == "off") return false;
  return ErrorAt(ctx, node, field, "must be true or false");
}

absl::StatusOr<uint32_t> ScalarUint32(const ParseContext& ctx, const YAML::Node& node,
                                      absl::string_view field, uint32_t min) {
  uint64_t v = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &v) || v < min ||
      v > std::numeric_limits<uint32_t>::max()) {
    return ErrorAt(ctx, node, field,
                   absl::StrCat("must be a whole number between ", min, " and 4294967295"));
  }
  return static_cast<uint32_t>(v);
}

// Iterates a mapping, rejecting repeated keys; `visit(key, key_node, value_node)`.
template <typename Visit>
absl::Status ForEachKey(const ParseContext& ctx, const YAML::Node& map, absl::string_view field,
                        Visit visit) {
  if (!map.IsMap()) return ErrorAt(ctx, map, field, "must be a mapping");
  absl::flat_hash_set<std::string> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (!seen.insert(key).second) {
      return ErrorAt(ctx, kv.first, field, absl::StrCat("key \"", key, "\" is repeated"));
    }
    if (absl::Status s = visit(key, kv.first, kv.second); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status UnknownKey(const ParseContext& ctx, const YAML::Node& key_node,
                        absl::string_view field, absl::string_view key) {
  return ErrorAt(ctx, key_node, field, absl::StrCat("unknown key \"", key, "\""));
}

// One `rate_limit` block (or one item of `rate_limits`): the rule-wide keys (unlimited, name,
// replaces) into `rl`, the limit into rl.limits (none when unlimited).
absl::Status ParseRateLimit(const ParseContext& ctx, const YAML::Node& node,
                            const std::string& field, EnvoyRateLimit& rl) {
  EnvoyLimit limit;
  std::optional<YAML::Node> unit_node, rpu_node, algorithm_node, burst_node, reserved_node;
  absl::Status s = ForEachKey(
      ctx, node, field,
      [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) -> absl::Status {
        const std::string f = absl::StrCat(field, ".", key);
        if (key == "unit") {
          unit_node = v;
        } else if (key == "requests_per_unit") {
          rpu_node = v;
        } else if (key == "unlimited") {
          absl::StatusOr<bool> b = ScalarBool(ctx, v, f);
          if (!b.ok()) return b.status();
          rl.unlimited = *b;
        } else if (key == "name") {
          absl::StatusOr<std::string> name = ScalarString(ctx, v, f);
          if (!name.ok()) return name.status();
          limit.name = *name;
        } else if (key == "replaces") {
          if (!v.IsSequence()) return ErrorAt(ctx, v, f, "must be a list of {name: ...}");
          for (size_t i = 0; i < v.size(); ++i) {
            const std::string fi = absl::StrCat(f, "[", i, "]");
            std::string name;
            absl::Status st = ForEachKey(ctx, v[i], fi,
                                         [&](const std::string& rk, const YAML::Node& rkn,
                                             const YAML::Node& rv) -> absl::Status {
                                           if (rk != "name") return UnknownKey(ctx, rkn, fi, rk);
                                           absl::StatusOr<std::string> n =
                                               ScalarString(ctx, rv, fi + ".name");
                                           if (!n.ok()) return n.status();
                                           name = *n;
                                           return absl::OkStatus();
                                         });
            if (!st.ok()) return st;
            if (name.empty()) return ErrorAt(ctx, v[i], fi + ".name", "must not be empty");
            rl.replaces.push_back(name);
          }
        } else if (key == "algorithm") {
          algorithm_node = v;
        } else if (key == "burst") {
          burst_node = v;
        } else if (key == "max_reserved") {
          reserved_node = v;
        } else {
          return UnknownKey(ctx, k, field, key);
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;

  for (const std::string& r : rl.replaces) {
    if (!limit.name.empty() && r == limit.name) {
      return ErrorAt(ctx, node, field + ".replaces",
                     absl::StrCat("a limit cannot replace itself (\"", r, "\")"));
    }
  }
  if (rl.unlimited) {
    rl.name = limit.name;
    for (const auto& [n, what] : {std::pair{&unit_node, "unit"},
                                  {&rpu_node, "requests_per_unit"},
                                  {&algorithm_node, "algorithm"},
                                  {&burst_node, "burst"},
                                  {&reserved_node, "max_reserved"}}) {
      if (n->has_value()) {
        return ErrorAt(ctx, **n, absl::StrCat(field, ".", what),
                       "must not be set when unlimited is true");
      }
    }
    return absl::OkStatus();
  }
  if (!unit_node) return ErrorAt(ctx, node, field + ".unit", "required");
  std::optional<EnvoyUnit> unit =
      unit_node->IsScalar() ? ParseEnvoyUnit(unit_node->Scalar()) : std::nullopt;
  if (!unit) {
    return ErrorAt(ctx, *unit_node, field + ".unit",
                   absl::StrCat("invalid unit \"", unit_node->IsScalar() ? unit_node->Scalar() : "",
                                "\" (second, minute, hour, day, week, month or year)"));
  }
  limit.unit = *unit;
  if (!rpu_node) return ErrorAt(ctx, node, field + ".requests_per_unit", "required");
  absl::StatusOr<uint32_t> rpu = ScalarUint32(ctx, *rpu_node, field + ".requests_per_unit", 0);
  if (!rpu.ok()) return rpu.status();
  limit.requests_per_unit = *rpu;
  if (algorithm_node) {
    const std::string a = algorithm_node->IsScalar() ? algorithm_node->Scalar() : "";
    if (a == "token_bucket") {
      limit.algorithm = EnvoyAlgorithm::kTokenBucket;
    } else if (a != "fixed_window") {
      return ErrorAt(ctx, *algorithm_node, field + ".algorithm",
                     absl::StrCat("must be fixed_window or token_bucket, got \"", a, "\""));
    }
  }
  if (burst_node) {
    if (limit.algorithm != EnvoyAlgorithm::kTokenBucket) {
      return ErrorAt(ctx, *burst_node, field + ".burst", "only applies to algorithm: token_bucket");
    }
    absl::StatusOr<uint32_t> b = ScalarUint32(ctx, *burst_node, field + ".burst", 1);
    if (!b.ok()) return b.status();
    limit.burst = *b;
  }
  if (reserved_node) {
    absl::StatusOr<uint32_t> m = ScalarUint32(ctx, *reserved_node, field + ".max_reserved", 0);
    if (!m.ok()) return m.status();
    limit.max_reserved = *m;
  }
  if (rl.limits.empty()) rl.name = limit.name;
  rl.limits.push_back(std::move(limit));
  return absl::OkStatus();
}

// The `rate_limits` list of a descriptor (our extension): 1..kMaxEnvoyLimitsPerRule limits of
// one rule, decided together. An item is a `rate_limit` block without `unlimited`.
absl::Status ParseRateLimits(const ParseContext& ctx, const YAML::Node& node,
                             const std::string& field, EnvoyRateLimit& rl) {
  if (!node.IsSequence() || node.size() == 0) {
    return ErrorAt(ctx, node, field, "must be a non-empty list of rate_limit blocks");
  }
  if (node.size() > kMaxEnvoyLimitsPerRule) {
    return ErrorAt(ctx, node, field,
                   absl::StrCat("at most ", kMaxEnvoyLimitsPerRule, " limits, got ", node.size()));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string fi = absl::StrCat(field, "[", i, "]");
    if (node[i].IsMap() && node[i]["unlimited"]) {
      return ErrorAt(ctx, node[i]["unlimited"], fi + ".unlimited",
                     "not allowed in rate_limits (an unlimited rule is one rate_limit block)");
    }
    if (absl::Status s = ParseRateLimit(ctx, node[i], fi, rl); !s.ok()) return s;
  }
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < rl.limits.size(); ++i) {
    const std::string& n = rl.limits[i].name;
    if (!n.empty() && !names.insert(n).second) {
      return ErrorAt(ctx, node[i], absl::StrCat(field, "[", i, "].name"),
                     absl::StrCat("\"", n, "\" names another limit of this rule too"));
    }
  }
  return absl::OkStatus();
}

// A descriptor's `concurrency` block (our extension): capacity (slots, 1..kMaxSlots) and
// lease_ttl (a duration, 1 ms..1 day; default kDefaultLeaseTtlMicros).
absl::Status ParseConcurrency(const ParseContext& ctx, const YAML::Node& node,
                              const std::string& field, EnvoyRateLimit& rl) {
  EnvoyConcurrency c;
  c.lease_ttl_us = kDefaultLeaseTtlMicros;
  bool has_capacity = false;
  absl::Status s = ForEachKey(
      ctx, node, field,
      [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) -> absl::Status {
        const std::string f = absl::StrCat(field, ".", key);
        if (key == "capacity") {
          absl::StatusOr<uint32_t> n = ScalarUint32(ctx, v, f, 1);
          if (!n.ok()) return n.status();
          if (!IsSlotCount(*n)) {
            return ErrorAt(ctx, v, f, absl::StrCat("must be at most ", kMaxSlots, " slots"));
          }
          c.capacity = *n;
          has_capacity = true;
        } else if (key == "lease_ttl") {
          absl::StatusOr<absl::Duration> d = v.IsScalar()
                                                 ? ParseDurationText(v.Scalar())
                                                 : absl::InvalidArgumentError("must be a duration");
          if (!d.ok()) return ErrorAt(ctx, v, f, d.status().message());
          const int64_t us = absl::ToInt64Microseconds(*d);
          if (us < kMinLeaseTtlMicros || us > kMaxLeaseTtlMicros) {
            return ErrorAt(ctx, v, f, "must be between 1ms and 24h");
          }
          c.lease_ttl_us = us;
        } else {
          return UnknownKey(ctx, k, field, key);
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  if (!has_capacity) return ErrorAt(ctx, node, field + ".capacity", "required");
  rl.concurrency = c;
  return absl::OkStatus();
}

// A YAML value as a google.protobuf.Value, typed as the reference's YAML reader types it:
// plain scalars that read as booleans, numbers or null become those, everything else (and every
// quoted scalar) a string; mappings become structs (keys as written), sequences lists.
void YamlToProtoValue(const YAML::Node& node, google::protobuf::Value* out);

void YamlToProtoStruct(const YAML::Node& map, google::protobuf::Struct* out) {
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
    YamlToProtoValue(kv.second, &(*out->mutable_fields())[key]);
  }
}

void YamlScalarToProtoValue(const YAML::Node& node, google::protobuf::Value* out) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") {  // quoted
    out->set_string_value(text);
    return;
  }
  static constexpr absl::string_view kTrue[] = {"true", "True", "TRUE", "yes", "Yes",
                                                "YES",  "on",   "On",   "ON"};
  static constexpr absl::string_view kFalse[] = {"false", "False", "FALSE", "no", "No",
                                                 "NO",    "off",   "Off",   "OFF"};
  static constexpr absl::string_view kNull[] = {"", "~", "null", "Null", "NULL"};
  auto in = [&text](absl::Span<const absl::string_view> words) {
    return std::find(words.begin(), words.end(), text) != words.end();
  };
  int64_t whole = 0;
  double number = 0;
  if (in(kTrue) || in(kFalse)) {
    out->set_bool_value(in(kTrue));
  } else if (in(kNull)) {
    out->set_null_value(google::protobuf::NULL_VALUE);
  } else if (absl::SimpleAtoi(text, &whole)) {
    out->set_number_value(static_cast<double>(whole));
  } else if (text.find_first_not_of("0123456789+-.eE") == std::string::npos &&
             absl::SimpleAtod(text, &number)) {
    out->set_number_value(number);
  } else {
    out->set_string_value(text);
  }
}

void YamlToProtoValue(const YAML::Node& node, google::protobuf::Value* out) {
  if (node.IsMap()) {
    YamlToProtoStruct(node, out->mutable_struct_value());
  } else if (node.IsSequence()) {
    google::protobuf::ListValue* list = out->mutable_list_value();
    for (const YAML::Node& item : node) YamlToProtoValue(item, list->add_values());
  } else if (node.IsScalar()) {
    YamlScalarToProtoValue(node, out);
  } else {
    out->set_null_value(google::protobuf::NULL_VALUE);
  }
}

// A descriptor's `metadata`: a mapping (null or empty: none).
absl::StatusOr<std::shared_ptr<const google::protobuf::Struct>> ParseMetadata(
    const ParseContext& ctx, const YAML::Node& node, const std::string& field) {
  if (node.IsNull()) return nullptr;
  if (!node.IsMap()) return ErrorAt(ctx, node, field, "must be a mapping");
  auto metadata = std::make_shared<google::protobuf::Struct>();
  YamlToProtoStruct(node, metadata.get());
  if (metadata->fields().empty()) return nullptr;
  return metadata;
}

absl::Status ParseDescriptorList(ParseContext& ctx, const YAML::Node& list,
                                 const std::string& field, const std::string& parent_path,
                                 EnvoyDescriptorList* out);

absl::Status ParseDescriptor(ParseContext& ctx, const YAML::Node& node, const std::string& field,
                             const std::string& parent_path, EnvoyDescriptorList* level) {
  EnvoyDescriptorNode d;
  std::optional<YAML::Node> key_node, rate_limit_node, rate_limits_node, concurrency_node,
      children_node;
  bool shadow_mode = false, detailed_metric = false, quota_mode = false;
  std::optional<YAML::Node> share_threshold_node, metadata_node;
  absl::Status s = ForEachKey(
      ctx, node, field,
      [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) -> absl::Status {
        const std::string f = absl::StrCat(field, ".", key);
        if (key == "key") {
          key_node = v;
          absl::StatusOr<std::string> str = ScalarString(ctx, v, f);
          if (!str.ok()) return str.status();
          d.key = *str;
        } else if (key == "value") {
          absl::StatusOr<std::string> str = ScalarString(ctx, v, f);
          if (!str.ok()) return str.status();
          d.value = *str;
        } else if (key == "rate_limit") {
          rate_limit_node = v;
        } else if (key == "rate_limits") {
          rate_limits_node = v;
        } else if (key == "concurrency") {
          concurrency_node = v;
        } else if (key == "descriptors") {
          children_node = v;
        } else if (key == "shadow_mode" || key == "detailed_metric" || key == "quota_mode") {
          absl::StatusOr<bool> b = ScalarBool(ctx, v, f);
          if (!b.ok()) return b.status();
          (key == "shadow_mode"  ? shadow_mode
           : key == "quota_mode" ? quota_mode
                                 : detailed_metric) = *b;
        } else if (key == "value_to_metric" || key == "share_threshold") {
          absl::StatusOr<bool> b = ScalarBool(ctx, v, f);
          if (!b.ok()) return b.status();
          (key == "value_to_metric" ? d.value_to_metric : d.share_threshold) = *b;
          if (key == "share_threshold") share_threshold_node = v;
        } else if (key == "metadata") {
          metadata_node = v;
        } else {
          return UnknownKey(ctx, k, field, key);
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  if (d.key.empty()) {
    return ErrorAt(ctx, key_node ? *key_node : node, field + ".key", "required, must not be empty");
  }
  if (d.share_threshold && !absl::StrContains(d.value, '*')) {
    return ErrorAt(
        ctx, *share_threshold_node, field + ".share_threshold",
        absl::StrCat("only applies to a wildcard value (one with '*'), got \"", d.value, "\""));
  }
  std::shared_ptr<const google::protobuf::Struct> metadata;
  if (metadata_node) {
    absl::StatusOr<std::shared_ptr<const google::protobuf::Struct>> m =
        ParseMetadata(ctx, *metadata_node, field + ".metadata");
    if (!m.ok()) return m.status();
    metadata = *std::move(m);
  }
  const std::string path =
      absl::StrCat(parent_path, ".", d.key, d.value.empty() ? "" : "_", d.value);
  const size_t index = level->nodes.size();
  const bool wildcard = absl::StrContains(d.value, '*');
  bool fresh;
  if (d.value.empty()) {
    fresh = level->bare.emplace(d.key, index).second;
  } else if (wildcard) {
    fresh = std::none_of(level->wildcards.begin(), level->wildcards.end(), [&](size_t i) {
      return level->nodes[i].key == d.key && level->nodes[i].value == d.value;
    });
    if (fresh) level->wildcards.push_back(index);
  } else {
    fresh = level->exact.emplace(std::make_pair(d.key, d.value), index).second;
  }
  if (!fresh) {
    return ErrorAt(ctx, node, field, absl::StrCat("duplicate descriptor \"", path, "\""));
  }
  if (ctx.path.empty() && d.key == kEnvoyLeaseKey) {
    return ErrorAt(ctx, key_node ? *key_node : node, field + ".key",
                   absl::StrCat("\"", kEnvoyLeaseKey,
                                "\" is reserved for the release descriptor of a concurrency rule"));
  }
  if (rate_limit_node && rate_limits_node) {
    return ErrorAt(ctx, *rate_limits_node, field + ".rate_limits",
                   "a descriptor has rate_limit or rate_limits, not both");
  }
  if (concurrency_node && (rate_limit_node || rate_limits_node)) {
    return ErrorAt(ctx, *concurrency_node, field + ".concurrency",
                   "a descriptor has a rate limit or a concurrency rule, not both");
  }
  if (rate_limit_node || rate_limits_node || concurrency_node) {
    std::optional<EnvoyRateLimit> rl(std::in_place);
    absl::Status parsed =
        rate_limit_node    ? ParseRateLimit(ctx, *rate_limit_node, field + ".rate_limit", *rl)
        : rate_limits_node ? ParseRateLimits(ctx, *rate_limits_node, field + ".rate_limits", *rl)
                           : ParseConcurrency(ctx, *concurrency_node, field + ".concurrency", *rl);
    if (!parsed.ok()) return parsed;
    rl->limit_name = path;
    std::vector<EnvoyEntry> levels;
    for (const auto& [k, v] : ctx.path) levels.push_back(EnvoyEntry{k, v});
    levels.push_back(EnvoyEntry{d.key, d.value});
    rl->state_name = EnvoyStateName(ctx.domain, levels, /*override_limit=*/false);
    rl->shadow_mode = shadow_mode;
    rl->quota_mode = quota_mode;
    rl->detailed_metric = detailed_metric;
    rl->where = Where(ctx, node);
    rl->metadata = std::move(metadata);
    if (absl::Status st = ValidateName(path, "limit name"); !st.ok()) {
      return ErrorAt(ctx, node, field, st.message());
    }
    if (!ctx.limit_names.insert(path).second) {
      return ErrorAt(ctx, node, field,
                     absl::StrCat("limit name \"", path,
                                  "\" is also produced by another descriptor of this domain"));
    }
    d.limit = *std::move(rl);
  }
  if (children_node) {
    ctx.path.emplace_back(d.key, d.value);
    absl::Status st =
        ParseDescriptorList(ctx, *children_node, field + ".descriptors", path, &d.children);
    ctx.path.pop_back();
    if (!st.ok()) return st;
  }
  level->nodes.push_back(std::move(d));
  return absl::OkStatus();
}

absl::Status ParseDescriptorList(ParseContext& ctx, const YAML::Node& list,
                                 const std::string& field, const std::string& parent_path,
                                 EnvoyDescriptorList* out) {
  if (list.IsNull()) return absl::OkStatus();
  if (!list.IsSequence()) return ErrorAt(ctx, list, field, "must be a list of descriptors");
  for (size_t i = 0; i < list.size(); ++i) {
    absl::Status s =
        ParseDescriptor(ctx, list[i], absl::StrCat(field, "[", i, "]"), parent_path, out);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EnvoyDomain> ParseEnvoyDomainYaml(absl::string_view yaml, absl::string_view source) {
  absl::StatusOr<YAML::Node> loaded = LoadYaml(yaml, source);
  if (!loaded.ok()) return loaded.status();
  const YAML::Node& root = *loaded;
  ParseContext ctx{source, "", {}, {}};
  if (root.IsNull()) return ErrorAt(ctx, root, "domain", "required (the file is empty)");
  std::optional<YAML::Node> domain_node, descriptors_node;
  std::shared_ptr<const RlqsDomainConfig> quota_buckets;
  absl::Status s = ForEachKey(
      ctx, root, "document",
      [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) -> absl::Status {
        if (key == "domain") {
          domain_node = v;
        } else if (key == "descriptors") {
          descriptors_node = v;
        } else if (key == "quota_buckets") {
          absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> q =
              ParseRlqsQuotaBuckets(v, source);
          if (!q.ok()) return q.status();
          quota_buckets = *std::move(q);
        } else {
          return ErrorAt(ctx, k, "document", absl::StrCat("unknown key \"", key, "\""));
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  if (!domain_node) return ErrorAt(ctx, root, "domain", "required");
  absl::StatusOr<std::string> domain = ScalarString(ctx, *domain_node, "domain");
  if (!domain.ok()) return domain.status();
  if (absl::Status st = ValidateName(*domain, "domain"); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(ctx, *domain_node), ": ", st.message()));
  }
  ctx.domain = *domain;
  EnvoyDomain out;
  out.name = *domain;
  out.source = std::string(source);
  out.where = Where(ctx, *domain_node);
  out.quota_buckets = std::move(quota_buckets);
  if (descriptors_node) {
    absl::Status st =
        ParseDescriptorList(ctx, *descriptors_node, "descriptors", *domain, &out.descriptors);
    if (!st.ok()) return st;
  }
  return out;
}

absl::StatusOr<std::vector<EnvoyConfigFile>> ReadEnvoyConfigDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("cannot list Envoy config directory ", dir, ": ", ec.message()));
  }
  std::vector<EnvoyConfigFile> files;
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (!absl::EndsWith(name, ".yaml") && !absl::EndsWith(name, ".yml")) continue;
    if (!e.is_regular_file(ec)) continue;
    absl::StatusOr<std::string> bytes = ReadFileToString(e.path().string());
    if (!bytes.ok()) continue;  // removed while listing: the next poll sees the new state
    files.push_back(EnvoyConfigFile{e.path().string(), *std::move(bytes)});
  }
  std::sort(files.begin(), files.end(),
            [](const EnvoyConfigFile& a, const EnvoyConfigFile& b) { return a.path < b.path; });
  return files;
}

absl::StatusOr<EnvoyConfig> BuildEnvoyConfig(absl::Span<const EnvoyConfigFile> files) {
  EnvoyConfig config;
  for (const EnvoyConfigFile& f : files) {
    absl::StatusOr<EnvoyDomain> domain = ParseEnvoyDomainYaml(f.bytes, f.path);
    if (!domain.ok()) return domain.status();
    if (const EnvoyDomain* other = config.FindDomain(domain->name)) {
      return absl::InvalidArgumentError(absl::StrCat(domain->where, ": domain: \"", domain->name,
                                                     "\" is already defined at ", other->where));
    }
    std::string name = domain->name;
    config.domains.emplace(std::move(name), *std::move(domain));
  }
  return config;
}

}  // namespace ratelimit
