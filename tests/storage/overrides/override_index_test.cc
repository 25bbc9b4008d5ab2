// Which override applies to a key, and the change a key's state must cross.
#include "storage/overrides/override_index.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

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

}  // namespace
}  // namespace ratelimit
