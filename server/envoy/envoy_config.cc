#include "server/envoy/envoy_config.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ratelimit {

int64_t EnvoyUnitSeconds(EnvoyUnit unit) {
  constexpr int64_t kDay = 24 * 60 * 60;
  switch (unit) {
    case EnvoyUnit::kSecond:
      return 1;
    case EnvoyUnit::kMinute:
      return 60;
    case EnvoyUnit::kHour:
      return 60 * 60;
    case EnvoyUnit::kDay:
      return kDay;
    case EnvoyUnit::kWeek:
      return 7 * kDay;
    case EnvoyUnit::kMonth:
      return 30 * kDay;
    case EnvoyUnit::kYear:
      return 365 * kDay;
  }
  return 1;
}

std::optional<EnvoyUnit> ParseEnvoyUnit(absl::string_view text) {
  const std::string upper = absl::AsciiStrToUpper(text);
  for (EnvoyUnit u : {EnvoyUnit::kSecond, EnvoyUnit::kMinute, EnvoyUnit::kHour, EnvoyUnit::kDay,
                      EnvoyUnit::kMonth, EnvoyUnit::kYear, EnvoyUnit::kWeek}) {
    if (upper == EnvoyUnitName(u)) return u;
  }
  return std::nullopt;
}

absl::string_view EnvoyUnitName(EnvoyUnit unit) {
  switch (unit) {
    case EnvoyUnit::kSecond:
      return "SECOND";
    case EnvoyUnit::kMinute:
      return "MINUTE";
    case EnvoyUnit::kHour:
      return "HOUR";
    case EnvoyUnit::kDay:
      return "DAY";
    case EnvoyUnit::kWeek:
      return "WEEK";
    case EnvoyUnit::kMonth:
      return "MONTH";
    case EnvoyUnit::kYear:
      return "YEAR";
  }
  return "UNKNOWN";
}

bool EnvoyGlobMatch(absl::string_view pattern, absl::string_view text) {
  // Greedy matching with backtracking to the last `*`: linear in practice, O(n*m) worst case.
  size_t p = 0, t = 0;
  size_t star = absl::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

const EnvoyDescriptorNode* FindAtLevel(const EnvoyDescriptorList& level, const EnvoyEntry& e) {
  if (auto it = level.exact.find(std::make_pair(std::string(e.key), std::string(e.value)));
      it != level.exact.end()) {
    return &level.nodes[it->second];
  }
  for (size_t i : level.wildcards) {
    const EnvoyDescriptorNode& n = level.nodes[i];
    if (n.key == e.key && EnvoyGlobMatch(n.value, e.value)) return &n;
  }
  if (auto it = level.bare.find(e.key); it != level.bare.end()) return &level.nodes[it->second];
  return nullptr;
}

}  // namespace

EnvoyMatch MatchDescriptor(const EnvoyDomain& domain, absl::Span<const EnvoyEntry> entries) {
  EnvoyMatch match;
  absl::InlinedVector<const EnvoyDescriptorNode*, 8> path;
  const EnvoyDescriptorList* level = &domain.descriptors;
  for (size_t i = 0; i < entries.size(); ++i) {
    const EnvoyDescriptorNode* node = FindAtLevel(*level, entries[i]);
    if (node == nullptr) break;
    path.push_back(node);
    if (node->limit && i + 1 == entries.size()) match.limit = &*node->limit;
    if (node->children.nodes.empty()) break;
    level = &node->children;
  }
  if (match.limit == nullptr) return match;
  // A limit applies only at the last entry, so every entry matched a node of `path`.
  bool shared = false, value_to_metric = false;
  for (const EnvoyDescriptorNode* node : path) {
    shared = shared || node->share_threshold;
    value_to_metric = value_to_metric || node->value_to_metric;
  }
  if (shared) {
    match.shared_values.resize(path.size());
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i]->share_threshold) match.shared_values[i] = path[i]->value;
    }
  }
  if (match.limit->detailed_metric) {
    match.stat_key = domain.name;
    for (size_t i = 0; i < path.size(); ++i) {
      absl::StrAppend(
          &match.stat_key, ".", entries[i].key, "_",
          shared && !match.shared_values[i].empty() ? match.shared_values[i] : entries[i].value);
    }
  } else if (value_to_metric) {
    match.stat_key = domain.name;
    for (size_t i = 0; i < path.size(); ++i) {
      const EnvoyDescriptorNode& node = *path[i];
      absl::string_view shown = node.value;  // exact: the value; wildcard: the pattern
      if (node.value_to_metric && !node.share_threshold &&
          (node.value.empty() || absl::StrContains(node.value, '*'))) {
        shown = entries[i].value;
      }
      absl::StrAppend(&match.stat_key, ".", entries[i].key, shown.empty() ? "" : "_", shown);
    }
  } else {
    match.stat_key = match.limit->limit_name;
  }
  return match;
}

namespace {

const EnvoyRateLimit* FindRuleWithStateName(const EnvoyDescriptorList& level,
                                            absl::string_view state_name) {
  for (const EnvoyDescriptorNode& node : level.nodes) {
    if (node.limit && node.limit->state_name == state_name) return &*node.limit;
    if (const EnvoyRateLimit* r = FindRuleWithStateName(node.children, state_name)) return r;
  }
  return nullptr;
}

}  // namespace

absl::Status EnvoyResetTargetConfigured(const EnvoyConfig& config, absl::string_view domain,
                                        absl::string_view state_name, bool override_limit) {
  const EnvoyDomain* d = config.FindDomain(domain);
  if (d == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("name: no Envoy domain \"", domain, "\" in the Envoy configuration"));
  }
  if (override_limit || FindRuleWithStateName(d->descriptors, state_name) != nullptr) {
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("envoy_path: no rule of domain \"", domain,
                                          "\" has this descriptor path (one entry per level, "
                                          "each key with the rule's value, or none for a "
                                          "key-only rule)"));
}

absl::StatusOr<EnvoyResetState> EnvoyResetStateName(
    const EnvoyConfig& config, absl::string_view domain,
    absl::Span<const std::pair<std::string, std::string>> path, bool override_limit) {
  std::vector<EnvoyEntry> entries;
  entries.reserve(path.size());
  for (const auto& [key, value] : path) entries.push_back(EnvoyEntry{key, value});
  EnvoyResetState state{EnvoyStateName(domain, entries, override_limit), {}, false};
  if (absl::Status s = EnvoyResetTargetConfigured(config, domain, state.name, override_limit);
      !s.ok()) {
    return s;
  }
  if (override_limit) {
    // A descriptor's limits keep a counter per unit; the key without a suffix is the counter
    // of an earlier version, deleted with them.
    for (int unit = static_cast<int>(EnvoyUnit::kSecond);
         unit <= static_cast<int>(EnvoyUnit::kWeek); ++unit) {
      state.key_suffixes.push_back(EnvoyOverrideKeySuffix(static_cast<EnvoyUnit>(unit)));
    }
    return state;
  }
  const EnvoyRateLimit* rule =
      FindRuleWithStateName(config.FindDomain(domain)->descriptors, state.name);
  state.concurrency = rule->concurrency.has_value();
  for (size_t i = 1; i < rule->limits.size(); ++i) {
    state.key_suffixes.push_back(EnvoyLimitKeySuffix(i));
  }
  return state;
}

std::string EnvoyOverrideKeySuffix(EnvoyUnit unit) {
  return absl::StrCat("|@", absl::AsciiStrToLower(EnvoyUnitName(unit)));
}

std::string EnvoyLimitKeySuffix(size_t index) {
  return index == 0 ? std::string() : absl::StrCat("|#", index);
}

std::optional<EnvoyStatePath> ParseEnvoyStateName(absl::string_view state_name) {
  if (state_name.empty() || (state_name[0] != 'R' && state_name[0] != 'O')) return std::nullopt;
  EnvoyStatePath out;
  out.override_limit = state_name[0] == 'O';
  absl::string_view rest = state_name.substr(1);
  // One "<decimal length>:<bytes>" part off the front of `rest`.
  auto next = [&rest](std::string& part) {
    const size_t colon = rest.find(':');
    size_t length = 0;
    if (colon == absl::string_view::npos || colon == 0 || colon > 10 ||
        !absl::SimpleAtoi(rest.substr(0, colon), &length) || length > rest.size() - colon - 1) {
      return false;
    }
    part = std::string(rest.substr(colon + 1, length));
    rest.remove_prefix(colon + 1 + length);
    return true;
  };
  if (!next(out.domain)) return std::nullopt;
  while (!rest.empty()) {
    auto& [key, value] = out.path.emplace_back();
    if (!next(key) || !next(value)) return std::nullopt;
  }
  return out;
}

const EnvoyRateLimit* FindEnvoyRule(const EnvoyConfig& config, absl::string_view state_name) {
  const std::optional<EnvoyStatePath> parsed = ParseEnvoyStateName(state_name);
  if (!parsed || parsed->override_limit) return nullptr;
  return FindEnvoyRule(config, parsed->domain, state_name);
}

const EnvoyRateLimit* FindEnvoyRule(const EnvoyConfig& config, absl::string_view domain,
                                    absl::string_view state_name) {
  const EnvoyDomain* found = config.FindDomain(domain);
  return found == nullptr ? nullptr : FindRuleWithStateName(found->descriptors, state_name);
}

std::string EnvoyStateName(absl::string_view domain, absl::Span<const EnvoyEntry> path,
                           bool override_limit) {
  std::string out(1, override_limit ? 'O' : 'R');
  auto append = [&out](absl::string_view part) { absl::StrAppend(&out, part.size(), ":", part); };
  append(domain);
  for (const EnvoyEntry& e : path) {
    append(e.key);
    append(e.value);
  }
  return out;
}

}  // namespace ratelimit
