#include "storage/overrides/override_index.h"

#include <algorithm>

#include "storage/limiter.h"

namespace ratelimit {

std::shared_ptr<const OverrideIndex> OverrideIndex::Build(std::vector<Override> overrides,
                                                          uint64_t version) {
  std::shared_ptr<OverrideIndex> index(new OverrideIndex());
  index->version_ = version;
  std::sort(overrides.begin(), overrides.end(), [](const Override& a, const Override& b) {
    if (a.target.name != b.target.name) return a.target.name < b.target.name;
    if (a.target.pattern != b.target.pattern) return !a.target.pattern;
    if (a.target.pattern) return MorePreciseThan(a.target.key, b.target.key);
    return a.target.key < b.target.key;
  });
  index->all_ = std::move(overrides);
  for (const Override& o : index->all_) {
    if (o.target.source != LimitSource::kDefined && o.target.source != LimitSource::kEnvoy) {
      continue;
    }
    PerLimit& per = index->by_name_[o.target.source == LimitSource::kDefined
                                        ? o.target.name
                                        : IndexName(o.target.source, o.target.name)];
    if (o.target.pattern) {
      per.patterns.push_back(&o);  // in precedence order: all_ is sorted
    } else {
      per.exact.emplace(o.target.key, &o);
    }
  }
  for (auto& [name, per] : index->by_name_) {
    std::vector<absl::string_view> keys;
    keys.reserve(per.patterns.size());
    for (const Override* o : per.patterns) keys.push_back(o->target.key);
    per.pattern_index = PatternIndex(std::move(keys));
  }
  return index;
}

namespace {

// The latest change of a key's limit seen so far: when, and the action in force before it
// (unset: the configured limit).
struct Change {
  int64_t at_us = 0;
  std::optional<OverrideAction> before;
  bool seen = false;

  void Consider(int64_t at, const std::optional<OverrideAction>& was) {
    if (seen && at <= at_us) return;
    seen = true;
    at_us = at;
    before = was;
  }
};

}  // namespace

const Override* OverrideIndex::Adjust(absl::string_view name, absl::string_view key, int64_t now_us,
                                      LimitConfig& config) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  const PerLimit& per = it->second;
  const LimitConfig base = config;
  auto valid = [&base](const OverrideAction& action) { return CheckAction(base, action, "").ok(); };
  // The override in force, and the ends of those that ranked above it (they applied to the key
  // until they ended). Those ranking below it never applied while it was in force.
  const Override* active = nullptr;
  Change change;
  auto visit = [&](const Override& o) {
    if (!valid(o.action)) return false;  // inert
    if (o.ActiveAt(now_us)) {
      active = &o;
      return true;
    }
    change.Consider(*o.EndsAt(), o.action);
    return false;
  };
  bool found = false;
  if (const auto e = per.exact.find(key); e != per.exact.end()) found = visit(*e->second);
  if (!found && !per.pattern_index.empty()) {
    // Every pattern the key matches, most precise first.
    for (uint32_t i : per.pattern_index.Match(key)) {
      if (visit(*per.patterns[i])) break;
    }
  }
  if (active != nullptr) change.Consider(active->set_at_us, active->replaced);
  if (active == nullptr && !change.seen) return nullptr;

  LimitConfig::Adjustment adjustment;
  adjustment.base_capacity = base.EffectiveCapacity();
  if (active != nullptr) {
    config = ApplyAction(base, active->action);
    switch (active->action.effect) {
      case OverrideAction::Effect::kLimit:
        adjustment.effect = LimitConfig::Adjustment::Effect::kLimit;
        break;
      case OverrideAction::Effect::kUnlimited:
        adjustment.effect = LimitConfig::Adjustment::Effect::kUnlimited;
        break;
      case OverrideAction::Effect::kBlocked:
        adjustment.effect = LimitConfig::Adjustment::Effect::kBlocked;
        break;
    }
  }
  // An unlimited or blocked limit before the change left the state as it was: nothing to carry.
  const bool frozen_before =
      change.before && change.before->effect != OverrideAction::Effect::kLimit;
  if (change.seen && !frozen_before && (!change.before || valid(*change.before))) {
    const LimitConfig before = change.before ? ApplyAction(base, *change.before) : base;
    adjustment.changed_at_us = change.at_us;
    adjustment.before_rate = before.rate;
    adjustment.before_period_us = before.period_us;
    adjustment.before_capacity = before.EffectiveCapacity();
  }
  config.adjustment = adjustment;
  return active;
}

void ApplyOverrides(const OverrideIndex& index, int64_t now_us, absl::Span<LimitRequest> limits) {
  if (index.empty()) return;
  for (LimitRequest& l : limits) {
    if (l.source != LimitSource::kDefined) continue;
    if (const Override* o = index.Adjust(l.name, l.key, now_us, l.config)) {
      l.override_target = o->target.key;
    }
  }
}

}  // namespace ratelimit
