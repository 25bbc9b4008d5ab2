// Which override applies to a key, and the change a key's state must cross.
#include "storage/overrides/override_index.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TokenBucket;

constexpr int64_t kT0 = 1700000000LL * kSecond;

Override Make(absl::string_view target, bool pattern, double capacity, int64_t set_at) {
  Override o;
  o.target.name = "api";
  o.target.key = std::string(target);
  o.target.pattern = pattern;
  o.action.capacity = capacity;
  o.set_at_us = set_at;
  return o;
}

// The capacity `key` gets at `now`, and the override that gave it ("" for none).
std::pair<double, std::string> Resolve(const OverrideIndex& index, absl::string_view key,
                                       int64_t now = kT0) {
  LimitConfig c = TokenBucket(10, kSecond);
  const Override* o = index.Adjust("api", key, now, c);
  return {c.EffectiveCapacity(), o ? o->target.key : ""};
}

TEST(OverrideIndexTest, ExactKeyBeatsPatternsAndTheMostPrecisePatternWins) {
  auto index = OverrideIndex::Build(
      {Make("*", true, 1, kT0), Make("trial-*", true, 2, kT0), Make("trial-*-eu", true, 3, kT0),
       Make("trial-*-*", true, 4, kT0), Make("trial-7-eu", false, 5, kT0)},
      1);
  EXPECT_EQ(Resolve(*index, "trial-7-eu"), std::make_pair(5.0, std::string("trial-7-eu")));
  EXPECT_EQ(Resolve(*index, "trial-8-eu"), std::make_pair(3.0, std::string("trial-*-eu")));
  EXPECT_EQ(Resolve(*index, "trial-8-us"), std::make_pair(2.0, std::string("trial-*")));
  EXPECT_EQ(Resolve(*index, "free-1"), std::make_pair(1.0, std::string("*")));
  LimitConfig other = TokenBucket(10, kSecond);
  EXPECT_EQ(index->Adjust("web", "trial-7-eu", kT0, other), nullptr);
  EXPECT_FALSE(other.adjustment.has_value());
}

TEST(OverrideIndexTest, EachSourceHasItsOwnOverridesOfAName) {
  Override envoy = Make("k", false, 7, kT0);
  envoy.target.source = LimitSource::kEnvoy;
  auto index = OverrideIndex::Build({Make("k", false, 3, kT0), envoy}, 1);
  EXPECT_EQ(Resolve(*index, "k"), std::make_pair(3.0, std::string("k")));
  LimitConfig c = TokenBucket(10, kSecond);
  ASSERT_NE(index->Adjust(LimitSource::kEnvoy, "api", "k", kT0, c), nullptr);
  EXPECT_EQ(c.EffectiveCapacity(), 7);
  LimitConfig inline_limit = TokenBucket(10, kSecond);
  EXPECT_EQ(index->Adjust(LimitSource::kInline, "api", "k", kT0, inline_limit), nullptr);
}

TEST(OverrideIndexTest, NoOverrideLeavesTheConfigAsItIs) {
  auto index = OverrideIndex::Build({Make("trial-*", true, 2, kT0)}, 1);
  LimitConfig c = TokenBucket(10, kSecond);
  EXPECT_EQ(index->Adjust("api", "free-1", kT0, c), nullptr);
  EXPECT_EQ(c, TokenBucket(10, kSecond));
}

TEST(OverrideIndexTest, AnOverrideCarriesTheLimitItReplacedAndWhen) {
  Override o = Make("k", false, 200, kT0);
  o.action.rate = 100;
  auto index = OverrideIndex::Build({o}, 1);
  LimitConfig c = TokenBucket(10, kSecond, 20);
  ASSERT_NE(index->Adjust("api", "k", kT0 + kSecond, c), nullptr);
  EXPECT_EQ(c.rate, 100);
  ASSERT_TRUE(c.adjustment.has_value());
  EXPECT_EQ(c.adjustment->changed_at_us, kT0);
  EXPECT_EQ(c.adjustment->before_rate, 10);
  EXPECT_EQ(c.adjustment->before_capacity, 20);
  EXPECT_EQ(c.adjustment->base_capacity, 20);
}

TEST(OverrideIndexTest, AnExpiredOverrideStopsApplyingAndItsEndIsTheChange) {
  Override o = Make("k", false, 200, kT0);
  o.expires_at_us = kT0 + 60 * kSecond;
  auto index = OverrideIndex::Build({o}, 1);
  EXPECT_EQ(Resolve(*index, "k", kT0 + 59 * kSecond).first, 200);
  LimitConfig c = TokenBucket(10, kSecond, 20);
  EXPECT_EQ(index->Adjust("api", "k", kT0 + 60 * kSecond, c), nullptr);
  EXPECT_EQ(c.EffectiveCapacity(), 20);
  ASSERT_TRUE(c.adjustment.has_value());
  EXPECT_EQ(c.adjustment->changed_at_us, kT0 + 60 * kSecond);
  EXPECT_EQ(c.adjustment->before_capacity, 200);
}

TEST(OverrideIndexTest, EndOfAHigherRankingOverrideIsTheLatestChange) {
  Override pattern = Make("k*", true, 50, kT0);
  Override exact = Make("k1", false, 200, kT0 + kSecond);
  exact.deleted_at_us = kT0 + 2 * kSecond;
  auto index = OverrideIndex::Build({pattern, exact}, 1);
  LimitConfig c = TokenBucket(10, kSecond, 20);
  const Override* applied = index->Adjust("api", "k1", kT0 + 3 * kSecond, c);
  ASSERT_NE(applied, nullptr);
  EXPECT_EQ(applied->target.key, "k*");
  EXPECT_EQ(c.adjustment->changed_at_us, kT0 + 2 * kSecond);
  EXPECT_EQ(c.adjustment->before_capacity, 200);
}

TEST(OverrideIndexTest, UnlimitedBeforeTheChangeLeavesNothingToCarry) {
  Override o = Make("k", false, 0, kT0);
  o.action = OverrideAction();
  o.action.effect = OverrideAction::Effect::kUnlimited;
  o.deleted_at_us = kT0 + kSecond;
  auto index = OverrideIndex::Build({o}, 1);
  LimitConfig c = TokenBucket(10, kSecond, 20);
  EXPECT_EQ(index->Adjust("api", "k", kT0 + 2 * kSecond, c), nullptr);
  ASSERT_TRUE(c.adjustment.has_value());
  EXPECT_FALSE(c.adjustment->changed_at_us.has_value());
}

TEST(OverrideIndexTest, AnOverrideTheLimitNoLongerAcceptsIsInert) {
  Override o = Make("k", false, 0, kT0);
  o.action.capacity.reset();
  o.action.period_us = 2 * kSecond;  // not for a fixed window
  auto index = OverrideIndex::Build({o}, 1);
  LimitConfig window = ::ratelimit::testing::FixedWindow(10, kSecond);
  EXPECT_EQ(index->Adjust("api", "k", kT0, window), nullptr);
  EXPECT_EQ(window.period_us, kSecond);
}

TEST(OverrideIndexTest, OneMatchAmongFiftyThousandPatternsOnALimit) {
  std::vector<Override> all;
  for (int i = 0; i < 50000; ++i) {
    const std::string pattern = i % 3 == 0   ? absl::StrCat("tenant-", i, "-*")
                                : i % 3 == 1 ? absl::StrCat("*-r", i)
                                             : absl::StrCat("*-m", i, "-*");
    all.push_back(Make(pattern, true, i, kT0));
  }
  auto index = OverrideIndex::Build(std::move(all), 1);
  EXPECT_EQ(Resolve(*index, "tenant-300-user"), std::make_pair(300.0, std::string("tenant-300-*")));
  EXPECT_EQ(Resolve(*index, "user-7-r40000"), std::make_pair(40000.0, std::string("*-r40000")));
  EXPECT_EQ(Resolve(*index, "user-m49997-7"), std::make_pair(49997.0, std::string("*-m49997-*")));
  EXPECT_EQ(Resolve(*index, "user-m49998-7"), std::make_pair(10.0, std::string()));
  EXPECT_EQ(Resolve(*index, "tenant-30-"), std::make_pair(30.0, std::string("tenant-30-*")));
  EXPECT_EQ(Resolve(*index, "tenant-31-"), std::make_pair(10.0, std::string()));
}

// Each level of the precedence decides between two patterns both matching "abc-xyz"; the loser
// applies once the winner is deleted, which is then the key's latest change.
TEST(OverrideIndexTest, TiesAreBrokenAtEachLevelOfThePrecedence) {
  struct Case {
    const char* level;
    std::string winner, loser;
  };
  const Case cases[] = {
      {"fewer '*' beats a longer prefix", "*xyz", "abc*-*z"},
      {"a longer literal prefix beats more literal bytes", "abc-*", "a*-xyz"},
      {"more literal bytes", "ab*xyz", "ab*z"},
      {"the byte-wise smaller pattern", "a*-*z", "a*c*z"},
      {"runs of '*' count one by one", "a*-*z", "a**-*z"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.level);
    for (bool winner_first : {true, false}) {
      Override winner = Make(c.winner, true, 1, kT0);
      Override loser = Make(c.loser, true, 2, kT0);
      auto index = OverrideIndex::Build(winner_first ? std::vector<Override>{winner, loser}
                                                     : std::vector<Override>{loser, winner},
                                        1);
      EXPECT_EQ(Resolve(*index, "abc-xyz"), std::make_pair(1.0, c.winner));
      winner.deleted_at_us = kT0 + kSecond;
      index = OverrideIndex::Build({loser, winner}, 2);
      LimitConfig config = TokenBucket(10, kSecond);
      const Override* applied = index->Adjust("api", "abc-xyz", kT0 + 2 * kSecond, config);
      ASSERT_NE(applied, nullptr);
      EXPECT_EQ(applied->target.key, c.loser);
      EXPECT_EQ(config.adjustment->changed_at_us, kT0 + kSecond);
      EXPECT_EQ(config.adjustment->before_capacity, 1);
    }
  }
}

// What Adjust does, the straightforward way: the exact key, then every pattern matching the key
// (a linear scan), in precedence order.
const Override* ReferenceAdjust(const std::vector<Override>& all, absl::string_view key,
                                int64_t now, LimitConfig& config) {
  std::vector<const Override*> candidates, patterns;
  for (const Override& o : all) {
    if (!o.target.pattern && o.target.key == key) candidates.push_back(&o);
    if (o.target.pattern && PatternMatches(o.target.key, key)) patterns.push_back(&o);
  }
  std::sort(patterns.begin(), patterns.end(), [](const Override* a, const Override* b) {
    return MorePreciseThan(a->target.key, b->target.key);
  });
  candidates.insert(candidates.end(), patterns.begin(), patterns.end());

  const LimitConfig base = config;
  auto valid = [&base](const OverrideAction& a) { return CheckAction(base, a, "").ok(); };
  const Override* active = nullptr;
  // The latest change: when, and the action before it; the first seen wins a tie.
  std::optional<std::pair<int64_t, std::optional<OverrideAction>>> change;
  auto consider = [&change](int64_t at, const std::optional<OverrideAction>& before) {
    if (!change || at > change->first) change.emplace(at, before);
  };
  for (const Override* o : candidates) {
    if (!valid(o->action)) continue;
    if (o->ActiveAt(now)) {
      active = o;
      break;
    }
    consider(*o->EndsAt(), o->action);
  }
  if (active != nullptr) consider(active->set_at_us, active->replaced);
  if (active == nullptr && !change) return nullptr;

  LimitConfig::Adjustment adjustment;
  adjustment.base_capacity = base.EffectiveCapacity();
  if (active != nullptr) {
    config = ApplyAction(base, active->action);
    const auto effect = active->action.effect;
    adjustment.effect =
        effect == OverrideAction::Effect::kLimit       ? LimitConfig::Adjustment::Effect::kLimit
        : effect == OverrideAction::Effect::kUnlimited ? LimitConfig::Adjustment::Effect::kUnlimited
                                                       : LimitConfig::Adjustment::Effect::kBlocked;
  }
  // Set here: an override is in force or one ended.
  const std::optional<OverrideAction>& before = change->second;
  if (!before || (before->effect == OverrideAction::Effect::kLimit && valid(*before))) {
    const LimitConfig b = before ? ApplyAction(base, *before) : base;
    adjustment.changed_at_us = change->first;
    adjustment.before_rate = b.rate;
    adjustment.before_period_us = b.period_us;
    adjustment.before_capacity = b.EffectiveCapacity();
  }
  config.adjustment = adjustment;
  return active;
}

// Random overrides and keys over a small alphabet, so that patterns share prefixes, suffixes and
// middles, and keys match several of them.
class RandomOverrides {
 public:
  explicit RandomOverrides(uint32_t seed) : rng_(seed) {}

  int Uniform(int n) { return static_cast<int>(rng_() % n); }

  std::string Word(int max_size) {
    std::string w(Uniform(max_size + 1), ' ');
    for (char& c : w) c = "ab-"[Uniform(3)];
    return w;
  }
  // "*" alone, or 1..3 '*' between literals (empty ones too: a prefix, a suffix, "**").
  std::string Pattern() {
    if (Uniform(10) == 0) return "*";
    std::string p = Word(3);
    for (int stars = 1 + Uniform(3); stars > 0; --stars) absl::StrAppend(&p, "*", Word(3));
    return p;
  }
  // A key matching `pattern` (each '*' replaced by a word).
  std::string KeyOf(absl::string_view pattern) {
    std::string key;
    for (char c : pattern) c == '*' ? absl::StrAppend(&key, Word(3)) : key.push_back(c);
    return key;
  }
  OverrideAction Action() {
    OverrideAction a;
    switch (Uniform(6)) {
      case 0:
        a.effect = OverrideAction::Effect::kUnlimited;
        break;
      case 1:
        a.effect = OverrideAction::Effect::kBlocked;
        break;
      case 2:  // inert for a fixed window, valid for a token bucket
        a.period_us = 2 * kSecond;
        break;
      case 3:  // sets no field: inert
        break;
      default:
        a.capacity = 1 + Uniform(50);
        if (Uniform(2) == 0) a.rate = 1 + Uniform(50);
    }
    return a;
  }
  // Set at kT0 + 0..99 s; some expire or are deleted in the next 100 s.
  Override Make(std::string target, bool pattern) {
    Override o;
    o.target.name = "api";
    o.target.key = std::move(target);
    o.target.pattern = pattern;
    o.action = Action();
    o.set_at_us = kT0 + Uniform(100) * kSecond;
    if (Uniform(4) == 0) o.expires_at_us = o.set_at_us + Uniform(100) * kSecond;
    if (Uniform(4) == 0) o.deleted_at_us = o.set_at_us + Uniform(100) * kSecond;
    if (Uniform(2) == 0) o.replaced = Action();
    return o;
  }

 private:
  std::mt19937 rng_;
};

TEST(OverrideIndexTest, AdjustsAsALinearScanInPrecedenceOrderDoes) {
  RandomOverrides random(20240601);
  int matched = 0;
  for (int set = 0; set < 400; ++set) {
    // Mostly a few patterns; every tenth set, a thousand, many sharing their ends.
    const int patterns = set % 10 == 0 ? 1000 : 1 + random.Uniform(20);
    std::vector<Override> all;
    absl::flat_hash_set<std::pair<std::string, bool>> targets;
    for (int i = 0; i < patterns; ++i) {
      std::string pattern = random.Pattern();
      if (targets.emplace(pattern, true).second) all.push_back(random.Make(pattern, true));
      if (random.Uniform(3) == 0) {
        std::string key = random.Uniform(2) == 0 ? random.KeyOf(pattern) : random.Word(6);
        if (targets.emplace(key, false).second) all.push_back(random.Make(key, false));
      }
    }
    auto index = OverrideIndex::Build(all, set);
    for (int k = 0; k < 15; ++k) {
      const std::string key = random.Uniform(3) == 0
                                  ? random.Word(9)
                                  : random.KeyOf(all[random.Uniform(all.size())].target.key);
      const int64_t now = kT0 + random.Uniform(200) * kSecond;
      const LimitConfig base =
          random.Uniform(4) == 0 ? FixedWindow(10, kSecond) : TokenBucket(10, kSecond, 20);
      LimitConfig want_config = base, got_config = base;
      const Override* want = ReferenceAdjust(all, key, now, want_config);
      const Override* got = index->Adjust("api", key, now, got_config);
      ASSERT_EQ(got == nullptr, want == nullptr) << "set " << set << " key " << key;
      if (want != nullptr) {
        ASSERT_EQ(got->target, want->target) << "set " << set << " key " << key;
        ++matched;
      }
      ASSERT_EQ(got_config, want_config) << "set " << set << " key " << key;
    }
  }
  EXPECT_GT(matched, 1000);  // the cases exercise the lookup, not only its misses
}

}  // namespace
}  // namespace ratelimit
