#include "server/rlqs/rlqs_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "server/config/yaml_util.h"

namespace ratelimit {
namespace {

constexpr char kRoot[] = "quota_buckets";
constexpr absl::string_view kRootKeys[] = {"default", "rules"};
constexpr absl::string_view kFairShareKeys[] = {"newcomer_reserve", "reassign_threshold",
                                                "smoothing"};

class Parser {
 public:
  explicit Parser(absl::string_view source) : source_(source) {}

  absl::Status Error(const YAML::Node& node, absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(YamlLocation(source_, node), ": ", field, ": ", what));
  }

  // Iterates a mapping, rejecting repeated and unknown keys (those not in `known`).
  template <typename Visit>
  absl::Status ForEachKey(const YAML::Node& map, absl::string_view field,
                          absl::Span<const absl::string_view> known, Visit visit) {
    if (!map.IsMap()) return Error(map, field, "must be a mapping");
    absl::flat_hash_set<std::string> seen;
    for (const auto& kv : map) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (!seen.insert(key).second) {
        return Error(kv.first, field, absl::StrCat("key \"", key, "\" is repeated"));
      }
      if (known.size() > 0 && std::find(known.begin(), known.end(), key) == known.end()) {
        return Error(kv.first, field, absl::StrCat("unknown key \"", key, "\""));
      }
      if (absl::Status s = visit(key, kv.first, kv.second); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Bool(const YAML::Node& node, absl::string_view field) {
    const std::string v = node.IsScalar() ? absl::AsciiStrToLower(node.Scalar()) : "";
    if (v == "true" || v == "yes" || v == "on") return true;
    if (v == "false" || v == "no" || v == "off") return false;
    return Error(node, field, "must be true or false");
  }

  absl::StatusOr<double> Fraction(const YAML::Node& node, absl::string_view field, double min,
                                  double max, bool min_open) {
    double v = 0;
    if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &v) || !std::isfinite(v) || v < min ||
        (min_open && v == min) || v > max) {
      return Error(
          node, field,
          absl::StrCat("must be a number ", min_open ? "above " : "from ", min, " to ", max));
    }
    return v;
  }

  absl::StatusOr<uint32_t> Uint32(const YAML::Node& node, absl::string_view field, uint32_t min) {
    uint64_t v = 0;
    if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &v) || v < min ||
        v > std::numeric_limits<uint32_t>::max()) {
      return Error(node, field,
                   absl::StrCat("must be a whole number between ", min, " and 4294967295"));
    }
    return static_cast<uint32_t>(v);
  }

  absl::Status FairShare(const YAML::Node& node, const std::string& field, FairShareSettings& out) {
    return ForEachKey(
        node, field, kFairShareKeys,
        [&](const std::string& key, const YAML::Node&, const YAML::Node& v) -> absl::Status {
          const std::string f = absl::StrCat(field, ".", key);
          absl::StatusOr<double> d = key == "newcomer_reserve" ? Fraction(v, f, 0, 0.5, false)
                                     : key == "smoothing"      ? Fraction(v, f, 0, 1, true)
                                                               : Fraction(v, f, 0, 1, false);
          if (!d.ok()) return d.status();
          (key == "newcomer_reserve"     ? out.newcomer_reserve
           : key == "reassign_threshold" ? out.reassign_threshold
                                         : out.smoothing) = *d;
          return absl::OkStatus();
        });
  }

  // The limit keys of a rule or of a default block: requests_per_unit, unit, burst, fair_share,
  // shadow, deny_all (plus `name` and `match` for a rule).
  absl::Status Rule(const YAML::Node& node, const std::string& field, bool is_default,
                    RlqsRule& rule) {
    std::optional<YAML::Node> rpu, unit, burst, match;
    bool deny_all = false;
    static constexpr absl::string_view kDefaultKeys[] = {"requests_per_unit", "unit", "burst",
                                                         "fair_share", "shadow"};
    static constexpr absl::string_view kRuleKeys[] = {
        "name", "match", "requests_per_unit", "unit", "burst", "fair_share", "shadow", "deny_all"};
    absl::Span<const absl::string_view> keys =
        is_default ? absl::MakeConstSpan(kDefaultKeys) : absl::MakeConstSpan(kRuleKeys);
    absl::Status s = ForEachKey(
        node, field, keys,
        [&](const std::string& key, const YAML::Node&, const YAML::Node& v) -> absl::Status {
          const std::string f = absl::StrCat(field, ".", key);
          if (key == "name") {
            if (!v.IsScalar() || v.Scalar().empty()) return Error(v, f, "must be a string");
            rule.name = v.Scalar();
          } else if (key == "match") {
            match = v;
          } else if (key == "requests_per_unit") {
            rpu = v;
          } else if (key == "unit") {
            unit = v;
          } else if (key == "burst") {
            burst = v;
          } else if (key == "fair_share") {
            return FairShare(v, f, rule.fair_share);
          } else {
            absl::StatusOr<bool> b = Bool(v, f);
            if (!b.ok()) return b.status();
            (key == "shadow" ? rule.shadow : deny_all) = *b;
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    rule.where = YamlLocation(source_, node);
    if (!is_default) {
      if (!match) return Error(node, field + ".match", "required");
      s = ForEachKey(*match, field + ".match", {},
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                       const std::string f = absl::StrCat(field, ".match.", key);
                       if (key.empty()) return Error(k, f, "a key must not be empty");
                       if (!v.IsScalar()) return Error(v, f, "must be a string or \"*\"");
                       rule.match.emplace_back(key, v.Scalar());
                       return absl::OkStatus();
                     });
      if (!s.ok()) return s;
      if (rule.match.empty()) return Error(*match, field + ".match", "at least one pair");
      std::sort(rule.match.begin(), rule.match.end());
      if (rule.name.empty()) {
        rule.name = absl::StrJoin(rule.match, ",", absl::PairFormatter("="));
      }
    }
    if (deny_all) {
      rule.action = RlqsRuleAction::kDenyAll;
      if (rpu) return Error(*rpu, field + ".requests_per_unit", "must not be set with deny_all");
      return absl::OkStatus();
    }
    if (!rpu) return Error(node, field + ".requests_per_unit", "required");
    absl::StatusOr<uint32_t> n = Uint32(*rpu, field + ".requests_per_unit", 0);
    if (!n.ok()) return n.status();
    if (!unit) return Error(node, field + ".unit", "required");
    const std::string u = unit->IsScalar() ? absl::AsciiStrToLower(unit->Scalar()) : "";
    const double seconds = u == "second"   ? 1
                           : u == "minute" ? 60
                           : u == "hour"   ? 3600
                           : u == "day"    ? 86400
                                           : 0;
    if (seconds == 0) {
      return Error(*unit, field + ".unit",
                   absl::StrCat("invalid unit \"", u, "\" (second, minute, hour or day)"));
    }
    rule.action = RlqsRuleAction::kLimit;
    rule.rate_per_second = static_cast<double>(*n) / seconds;
    rule.burst = std::max(1.0, std::ceil(rule.rate_per_second));
    if (burst) {
      absl::StatusOr<uint32_t> b = Uint32(*burst, field + ".burst", 1);
      if (!b.ok()) return b.status();
      rule.burst = *b;
    }
    return absl::OkStatus();
  }

  absl::Status Default(const YAML::Node& node, RlqsRule& rule) {
    const std::string field = absl::StrCat(kRoot, ".default");
    rule.name = "default";
    rule.where = YamlLocation(source_, node);
    if (node.IsScalar()) {
      if (node.Scalar() == "allow_all") {
        rule.action = RlqsRuleAction::kAllowAll;
      } else if (node.Scalar() == "deny_all") {
        rule.action = RlqsRuleAction::kDenyAll;
      } else {
        return Error(
            node, field,
            absl::StrCat("must be allow_all, deny_all or a limit, got \"", node.Scalar(), "\""));
      }
      return absl::OkStatus();
    }
    return Rule(node, field, /*is_default=*/true, rule);
  }

 private:
  absl::string_view source_;
};

// (exact pairs, wildcard pairs) of a rule: the larger, the more specific.
std::pair<size_t, size_t> Specificity(const RlqsRule& rule) {
  size_t exact = 0;
  for (const auto& [k, v] : rule.match) exact += v != "*";
  return {exact, rule.match.size() - exact};
}

bool Matches(const RlqsRule& rule, const RlqsBucketKey& bucket) {
  for (const auto& [k, v] : rule.match) {
    auto it =
        std::lower_bound(bucket.begin(), bucket.end(), k,
                         [](const auto& pair, const std::string& key) { return pair.first < key; });
    if (it == bucket.end() || it->first != k) return false;
    if (v != "*" && v != it->second) return false;
  }
  return true;
}

}  // namespace

const RlqsRule& RlqsDomainConfig::Match(const RlqsBucketKey& bucket) const {
  const RlqsRule* best = nullptr;
  for (const RlqsRule& r : rules) {
    if (!Matches(r, bucket)) continue;
    if (best == nullptr || Specificity(r) > Specificity(*best)) best = &r;
  }
  return best ? *best : default_rule;
}

absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> ParseRlqsQuotaBuckets(
    const YAML::Node& node, absl::string_view source) {
  Parser p(source);
  auto config = std::make_shared<RlqsDomainConfig>();
  config->default_rule.name = "default";
  std::optional<YAML::Node> rules;
  absl::Status s = p.ForEachKey(
      node, kRoot, kRootKeys,
      [&](const std::string& key, const YAML::Node&, const YAML::Node& v) -> absl::Status {
        if (key == "default") return p.Default(v, config->default_rule);
        rules = v;
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  if (rules && !rules->IsNull()) {
    const std::string field = absl::StrCat(kRoot, ".rules");
    if (!rules->IsSequence()) return p.Error(*rules, field, "must be a list of rules");
    absl::flat_hash_set<std::string> names;
    for (size_t i = 0; i < rules->size(); ++i) {
      const std::string fi = absl::StrCat(field, "[", i, "]");
      RlqsRule rule;
      if (absl::Status st = p.Rule((*rules)[i], fi, /*is_default=*/false, rule); !st.ok()) {
        return st;
      }
      if (!names.insert(rule.name).second || rule.name == "default") {
        return p.Error((*rules)[i], fi + ".name",
                       absl::StrCat("\"", rule.name, "\" names another rule too"));
      }
      for (const RlqsRule& other : config->rules) {
        if (other.match == rule.match) {
          return p.Error((*rules)[i], fi + ".match",
                         absl::StrCat("the same pairs as the rule at ", other.where));
        }
      }
      config->rules.push_back(std::move(rule));
    }
  }
  return std::shared_ptr<const RlqsDomainConfig>(std::move(config));
}

}  // namespace ratelimit
