// The algebra of a limit changed by an override (LimitConfig::Adjustment, docs/overrides.md): a
// key keeps its tokens across the change, exactly.
#include <limits>
#include <optional>

#include "gtest/gtest.h"
#include "storage/algebra.h"
#include "tests/support/adjusted_config.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Adjusted;
using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TokenBucket;

constexpr int64_t kT0 = 1700000000LL * kSecond;
constexpr LimitId kId{"api", "customer-42"};

TEST(AlgebraOverrideTest, RaiseKeepsTheTokensAndRefillsAtTheNewRateFromTheChange) {
  const LimitConfig before = TokenBucket(10, kSecond, 20);  // 10/s, capacity 20
  // 15 taken at t0: 5 left.
  const Decision take = Decide(before, kId, std::nullopt, 15, Mode::kConsume, kT0);
  ASSERT_TRUE(take.allowed);
  ASSERT_DOUBLE_EQ(take.value, 5);
  // Raised at t0 + 0.1 s to 100/s, capacity 200; decided at t0 + 0.2 s.
  const LimitConfig after =
      Adjusted(TokenBucket(100, kSecond, 200), kT0 + 100000, before, before.EffectiveCapacity());
  const Decision d = Decide(after, kId, take.next, 1, Mode::kConsume, kT0 + 200000);
  ASSERT_TRUE(d.allowed);
  // 5 + 0.1 s at 10/s = 6 at the raise (nothing added by the raise), + 0.1 s at 100/s = 16, - 1.
  EXPECT_DOUBLE_EQ(d.value, 15);
  EXPECT_EQ(d.next.ts_us, kT0 + 200000);
  // Without the adjustment the whole 0.2 s would have refilled at the new rate: 5 + 20 - 1.
  const Decision unadjusted =
      DecideUnadjusted(after, kId, take.next, 1, Mode::kConsume, kT0 + 200000);
  EXPECT_DOUBLE_EQ(unadjusted.value, 24);
}

TEST(AlgebraOverrideTest, CutClampsToTheNewCapacityAtTheChange) {
  const LimitConfig before = TokenBucket(100, kSecond, 200);
  const Decision take = Decide(before, kId, std::nullopt, 50, Mode::kConsume, kT0);  // 150 left
  ASSERT_DOUBLE_EQ(take.value, 150);
  // Cut at t0 + 1 s to 1/s, capacity 20; decided 2 s later.
  const LimitConfig after =
      Adjusted(TokenBucket(1, kSecond, 20), kT0 + kSecond, before, before.EffectiveCapacity());
  const Decision d = Decide(after, kId, take.next, 1, Mode::kCheck, kT0 + 3 * kSecond);
  // min(150 + 100, 200) = 200 at the cut, clamped to 20; full since: 20.
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, 20);
  // The 20 left are taken right after the cut; 5 more wait for 5 s at the new rate.
  const Decision big = Decide(after, kId, take.next, 20, Mode::kConsume, kT0 + kSecond);
  ASSERT_TRUE(big.allowed);
  EXPECT_DOUBLE_EQ(big.value, 0);
  const Decision denied = Decide(after, kId, big.next, 5, Mode::kConsume, kT0 + kSecond);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_at_us, kT0 + 6 * kSecond);
}

TEST(AlgebraOverrideTest, StateWrittenAfterTheChangeIsNotAdjustedAgain) {
  const LimitConfig before = TokenBucket(10, kSecond, 20);
  const LimitConfig after =
      Adjusted(TokenBucket(100, kSecond, 200), kT0, before, before.EffectiveCapacity());
  const Decision first = Decide(after, kId, std::nullopt, 190, Mode::kConsume, kT0 + kSecond);
  ASSERT_TRUE(first.allowed);
  EXPECT_DOUBLE_EQ(first.value, 10);
  // Its state is after the change: it refills at the new rate only, and is not clamped to 20.
  const Decision second = Decide(after, kId, first.next, 1, Mode::kConsume, kT0 + 2 * kSecond);
  EXPECT_DOUBLE_EQ(second.value, 109);
}

TEST(AlgebraOverrideTest, DebtIsCarriedAcrossACut) {
  LimitConfig before = TokenBucket(1, kSecond, 10);
  const Decision owe = Decide(before, kId, std::nullopt, 15, Mode::kReserve, kT0);
  ASSERT_TRUE(owe.allowed);
  ASSERT_DOUBLE_EQ(owe.value, -5);
  const LimitConfig after = Adjusted(TokenBucket(1, kSecond, 2), kT0 + kSecond, before, 10);
  const Decision d = Decide(after, kId, owe.next, 1, Mode::kCheck, kT0 + kSecond);
  EXPECT_DOUBLE_EQ(d.value, -4);
}

TEST(AlgebraOverrideTest, FixedWindowKeepsItsCountWhenRaisedAndWhenCut) {
  const int64_t minute = 60 * kSecond;
  const int64_t window = (kT0 / minute) * minute;
  const LimitConfig base = FixedWindow(100, minute);
  const Decision take = Decide(base, kId, std::nullopt, 30, Mode::kConsume, window + kSecond);
  ASSERT_DOUBLE_EQ(take.value, 70);

  LimitConfig raised = FixedWindow(200, minute);
  raised.capacity = 200;
  raised.adjustment = LimitConfig::Adjustment{};
  raised.adjustment->base_capacity = 100;
  const Decision r = Decide(raised, kId, take.next, 10, Mode::kConsume, window + 2 * kSecond);
  ASSERT_TRUE(r.allowed);
  EXPECT_DOUBLE_EQ(r.value, 160);      // 200 - (30 + 10)
  EXPECT_DOUBLE_EQ(r.next.value, 60);  // stored against the configured 100
  // Back to the configured limit in the same window: 40 counted, 60 left.
  EXPECT_DOUBLE_EQ(Decide(base, kId, r.next, 1, Mode::kCheck, window + 3 * kSecond).value, 60);

  LimitConfig cut = FixedWindow(20, minute);
  cut.adjustment = LimitConfig::Adjustment{};
  cut.adjustment->base_capacity = 100;
  const Decision c = Decide(cut, kId, take.next, 1, Mode::kConsume, window + 2 * kSecond);
  EXPECT_FALSE(c.allowed);  // 30 counted > 20: denied until the next window
  EXPECT_DOUBLE_EQ(c.value, 0);
  EXPECT_EQ(c.retry_at_us, window + minute);
  const Decision next = Decide(cut, kId, take.next, 20, Mode::kConsume, window + minute);
  EXPECT_TRUE(next.allowed);
}

TEST(AlgebraOverrideTest, UnlimitedAllowsAndTakesNothing) {
  LimitConfig c = TokenBucket(1, kSecond, 2);
  c.adjustment = LimitConfig::Adjustment{};
  c.adjustment->effect = LimitConfig::Adjustment::Effect::kUnlimited;
  const State s{0.5, kT0, 0};
  const Decision d = Decide(c, kId, s, 1000, Mode::kConsume, kT0 + kSecond);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.next, s);  // unchanged
  const Decision missing = Decide(c, kId, std::nullopt, 1000, Mode::kConsume, kT0);
  EXPECT_TRUE(missing.allowed);
  EXPECT_DOUBLE_EQ(missing.next.value, 2);  // written as the full state it stands for
}

TEST(AlgebraOverrideTest, BlockedDeniesWithoutRetry) {
  LimitConfig c = TokenBucket(1, kSecond, 2);
  c.adjustment = LimitConfig::Adjustment{};
  c.adjustment->effect = LimitConfig::Adjustment::Effect::kBlocked;
  const Decision d = Decide(c, kId, std::nullopt, 1, Mode::kConsume, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kBlocked);
  EXPECT_FALSE(d.retry_at_us.has_value());
}

TEST(AlgebraOverrideTest, StateUnderACutOutlivesGarbageCollection) {
  const LimitConfig before = TokenBucket(10, kSecond, 100);
  const LimitConfig cut = Adjusted(TokenBucket(1, kSecond, 5), kT0, before, 100);
  const Decision d = Decide(cut, kId, std::nullopt, 1, Mode::kConsume, kT0 + kSecond);
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(d.next.full_at_us, std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace ratelimit
