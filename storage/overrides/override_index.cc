#include "storage/overrides/override_index.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"

#include "storage/limiter.h"

namespace ratelimit {

namespace {

// The recent patterns of a limit are rebuilt into its base past max(this, sqrt(|base|)).
constexpr size_t kMinRecentPatterns = 64;

bool PatternOrder(const std::string& a, const std::string& b) { return MorePreciseThan(a, b); }

}  // namespace

std::shared_ptr<const OverrideIndex::PatternLevel> OverrideIndex::MakeLevel(
    std::vector<std::string> patterns) {
  auto level = std::make_shared<PatternLevel>();
  level->patterns = std::move(patterns);
  std::vector<absl::string_view> views(level->patterns.begin(), level->patterns.end());
  level->index = PatternIndex(std::move(views));
  return level;
}

std::shared_ptr<const OverrideIndex> OverrideIndex::Build(std::vector<Override> overrides,
                                                          uint64_t version) {
  std::shared_ptr<OverrideIndex> index(new OverrideIndex());
  index->version_ = version;
  index->size_ = overrides.size();
  struct Parts {
    std::vector<OverrideMap::Record> exact, patterns;
  };
  absl::flat_hash_map<std::string, Parts> parts;
  for (Override& o : overrides) {
    Parts& p = parts[IndexName(o.target.source, o.target.name)];
    auto record = std::make_shared<const Override>(std::move(o));
    (record->target.pattern ? p.patterns : p.exact).push_back(std::move(record));
  }
  const std::shared_ptr<const PatternLevel> none = MakeLevel({});
  for (auto& [name, p] : parts) {
    auto per = std::make_shared<PerLimit>();
    std::vector<std::string> patterns;
    patterns.reserve(p.patterns.size());
    for (const auto& r : p.patterns) patterns.push_back(r->target.key);
    std::sort(patterns.begin(), patterns.end(), PatternOrder);
    per->base = MakeLevel(std::move(patterns));
    per->recent = none;
    per->exact = OverrideMap(std::move(p.exact));
    per->patterns = OverrideMap(std::move(p.patterns));
    index->by_name_.emplace(name, std::move(per));
  }
  return index;
}

std::shared_ptr<const OverrideIndex> OverrideIndex::Apply(
    absl::Span<const OverrideStore::ChangedTarget> changed, uint64_t version) const {
  // Shares every PerLimit until a change touches it; `owned` holds what this edit made.
  std::shared_ptr<OverrideIndex> next(new OverrideIndex(*this));
  next->version_ = version;
  OverrideMap::Owned owned;
  // Patterns new to a limit's PatternIndexes, by index name.
  absl::flat_hash_map<std::string, std::vector<std::string>> added;
  // Whether `level` indexes `pattern` (a pattern matches its own text).
  auto in_level = [](const PatternLevel& level, absl::string_view pattern) {
    if (level.index.empty()) return false;
    for (uint32_t id : level.index.Match(pattern)) {
      if (level.patterns[id] == pattern) return true;
    }
    return false;
  };
  absl::flat_hash_set<std::string> touched;
  for (const OverrideStore::ChangedTarget& c : changed) {
    const std::string name = IndexName(c.target.source, c.target.name);
    std::shared_ptr<PerLimit>& slot = next->by_name_[name];
    if (slot == nullptr) {
      slot = std::make_shared<PerLimit>();
      slot->base = slot->recent = MakeLevel({});
      owned.insert(slot.get());
    } else if (!owned.contains(slot.get())) {
      slot = std::make_shared<PerLimit>(*slot);
      owned.insert(slot.get());
    }
    touched.insert(name);
    PerLimit& per = *slot;
    OverrideMap& map = c.target.pattern ? per.patterns : per.exact;
    const bool had = map.Find(c.target.key) != nullptr;
    if (c.record) {
      map.Put(std::make_shared<const Override>(*c.record), owned);
      if (!had) ++next->size_;
      if (c.target.pattern && !had && !in_level(*per.base, c.target.key) &&
          !in_level(*per.recent, c.target.key)) {
        added[name].push_back(c.target.key);
      }
    } else if (had) {
      map.Erase(c.target.key, owned);
      --next->size_;
    }
  }
  for (const std::string& name : touched) {
    const auto it = next->by_name_.find(name);
    PerLimit& per = *it->second;
    if (per.exact.size() == 0 && per.patterns.size() == 0) {
      next->by_name_.erase(it);
      continue;
    }
    per.exact.Rebalance();
    per.patterns.Rebalance();
    const auto a = added.find(name);
    if (a == added.end()) continue;
    std::vector<std::string>& fresh = a->second;
    const size_t bound =
        std::max(kMinRecentPatterns,
                 static_cast<size_t>(std::sqrt(static_cast<double>(per.base->patterns.size()))));
    if (per.recent->patterns.size() + fresh.size() > bound) {
      // Compaction: one base of every pattern with a record.
      std::vector<std::string> all;
      all.reserve(per.patterns.size());
      per.patterns.ForEach([&all](const Override& o) { all.push_back(o.target.key); });
      std::sort(all.begin(), all.end(), PatternOrder);
      per.base = MakeLevel(std::move(all));
      per.recent = MakeLevel({});
    } else {
      fresh.insert(fresh.end(), per.recent->patterns.begin(), per.recent->patterns.end());
      std::sort(fresh.begin(), fresh.end(), PatternOrder);
      fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
      per.recent = MakeLevel(std::move(fresh));
    }
  }
  return next;
}

void OverrideIndex::ForEach(absl::FunctionRef<void(const Override&)> fn) const {
  for (const auto& [name, per] : by_name_) {
    per->exact.ForEach(fn);
    per->patterns.ForEach(fn);
  }
}

std::vector<Override> OverrideIndex::All() const {
  std::vector<Override> out;
  out.reserve(size_);
  ForEach([&out](const Override& o) { out.push_back(o); });
  std::sort(out.begin(), out.end(), [](const Override& a, const Override& b) {
    if (a.target.source != b.target.source) return a.target.source < b.target.source;
    if (a.target.name != b.target.name) return a.target.name < b.target.name;
    if (a.target.pattern != b.target.pattern) return !a.target.pattern;
    if (a.target.pattern) return MorePreciseThan(a.target.key, b.target.key);
    return a.target.key < b.target.key;
  });
  return out;
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

const Override* OverrideIndex::AdjustIndexed(absl::string_view name, absl::string_view key,
                                             int64_t now_us, LimitConfig& config) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  const PerLimit& per = *it->second;
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
  if (const Override* e = per.exact.Find(key)) found = visit(*e);
  if (!found && per.patterns.size() != 0) {
    // Every pattern the key matches, most precise first: the matches of both levels merged.
    const PatternLevel& base = *per.base;
    const PatternLevel& recent = *per.recent;
    PatternIndex::Matches in_base, in_recent;
    if (!base.index.empty()) in_base = base.index.Match(key);
    if (!recent.index.empty()) in_recent = recent.index.Match(key);
    size_t i = 0, j = 0;
    while (i < in_base.size() || j < in_recent.size()) {
      const bool from_base = j == in_recent.size() ||
                             (i < in_base.size() && MorePreciseThan(base.patterns[in_base[i]],
                                                                    recent.patterns[in_recent[j]]));
      const std::string& pattern =
          from_base ? base.patterns[in_base[i++]] : recent.patterns[in_recent[j++]];
      const Override* o = per.patterns.Find(pattern);  // none: removed since it was indexed
      if (o != nullptr && visit(*o)) break;
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
