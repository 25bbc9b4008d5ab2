// Every line of the algebra (README "Semantics"), on explicit times: no clock, no store.
#include "storage/algebra.h"

#include <cstring>

#include "gtest/gtest.h"
#include "tests/support/algebra_vectors.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::AlgebraVector;
using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::kAlgebraVectors;
using ::ratelimit::testing::kMinute;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::kVectorId;
using ::ratelimit::testing::TokenBucket;

constexpr int64_t kT0 = 1700000000LL * kSecond;
constexpr LimitId kId{"api", "user-1"};

// ---- Token bucket -------------------------------------------------------------------------

TEST(TokenBucketTest, MissingStateIsFullAndConsumes) {
  const Decision d = Decide(TokenBucket(10, kSecond), kId, std::nullopt, 1, Mode::kConsume, kT0);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, 9);
  EXPECT_EQ(d.next.ts_us, kT0);
  EXPECT_DOUBLE_EQ(d.next.value, 9);
  EXPECT_FALSE(d.retry_at_us.has_value());
}

TEST(TokenBucketTest, RefillsContinuouslyWithElapsedTime) {
  // 10 per second: 250 ms adds 2.5 tokens.
  const Decision d =
      Decide(TokenBucket(10, kSecond), kId, State{5, kT0, 0}, 1, Mode::kConsume, kT0 + kSecond / 4);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, 6.5);
  EXPECT_EQ(d.next.ts_us, kT0 + kSecond / 4);
}

TEST(TokenBucketTest, RefillStopsAtCapacity) {
  const Decision d =
      Decide(TokenBucket(10, kSecond, 4), kId, State{1, kT0, 0}, 1, Mode::kConsume, kT0 + kMinute);
  EXPECT_DOUBLE_EQ(d.value, 3);  // min(1 + 600, 4) - 1
}

TEST(TokenBucketTest, CapacityDefaultsToRate) {
  const Decision d = Decide(TokenBucket(7, kSecond), kId, std::nullopt, 1, Mode::kConsume, kT0);
  EXPECT_DOUBLE_EQ(d.value, 6);
}

TEST(TokenBucketTest, DeniesWithRetryAtWhenTheBalanceIsBackToCount) {
  // 0.5 tokens, need 1: 0.5 more at 10/s is 50 ms.
  const Decision d =
      Decide(TokenBucket(10, kSecond), kId, State{0.5, kT0, 0}, 1, Mode::kConsume, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kInsufficientTokens);
  EXPECT_DOUBLE_EQ(d.value, 0.5);  // nothing taken
  ASSERT_TRUE(d.retry_at_us.has_value());
  EXPECT_EQ(*d.retry_at_us, kT0 + 50000);
  // At retry_at the same request is allowed.
  const Decision later =
      Decide(TokenBucket(10, kSecond), kId, State{0.5, kT0, 0}, 1, Mode::kConsume, *d.retry_at_us);
  EXPECT_TRUE(later.allowed);
  EXPECT_NEAR(later.value, 0, 1e-9);
}

TEST(TokenBucketTest, ClockSteppingBackRefillsNothingAndKeepsTs) {
  const Decision d = Decide(TokenBucket(10, kSecond), kId, State{5, kT0, 0}, 1, Mode::kConsume,
                            kT0 - 10 * kSecond);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, 4);
  EXPECT_EQ(d.next.ts_us, kT0);  // ts never moves backwards
}

TEST(TokenBucketTest, ReserveThreeTokensFiveGoesToMinusTwoAndWaitsTwoTokens) {
  // The example: 3 tokens at 1 per second, reserve 5 -> value -2, run in 2 s.
  const LimitConfig c = TokenBucket(1, kSecond, 3);
  const Decision d = Decide(c, kId, State{3, kT0, 0}, 5, Mode::kReserve, kT0);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, -2);
  EXPECT_DOUBLE_EQ(d.next.value, -2);
  ASSERT_TRUE(d.retry_at_us.has_value());
  EXPECT_EQ(*d.retry_at_us, kT0 + 2 * kSecond);
}

TEST(TokenBucketTest, ReservationWithinBalanceRunsNow) {
  const Decision d =
      Decide(TokenBucket(1, kSecond, 3), kId, State{3, kT0, 0}, 2, Mode::kReserve, kT0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.retry_at_us, kT0);
}

TEST(TokenBucketTest, MaxReservedRefusesDeeperDebtAndSaysWhenItFits) {
  const LimitConfig c = TokenBucket(1, kSecond, 3, /*max_reserved=*/1);
  const Decision d = Decide(c, kId, State{2, kT0, 0}, 4, Mode::kReserve, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kMaxReservedExceeded);
  EXPECT_DOUBLE_EQ(d.value, 2);
  // Debt would be 2 > 1: one more token (1 s) makes it fit.
  EXPECT_EQ(d.retry_at_us, kT0 + kSecond);
  const Decision later = Decide(c, kId, State{2, kT0, 0}, 4, Mode::kReserve, kT0 + kSecond);
  EXPECT_TRUE(later.allowed);
  EXPECT_DOUBLE_EQ(later.value, -1);
}

TEST(TokenBucketTest, MaxReservedZeroMeansNoReservations) {
  const LimitConfig c = TokenBucket(1, kSecond, 3, /*max_reserved=*/0);
  const Decision d = Decide(c, kId, State{3, kT0, 0}, 4, Mode::kReserve, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(d.retry_at_us.has_value());
  const Decision shallow = Decide(c, kId, State{1, kT0, 0}, 2, Mode::kReserve, kT0);
  EXPECT_FALSE(shallow.allowed);
  EXPECT_EQ(shallow.reason, DenyReason::kMaxReservedExceeded);
  EXPECT_EQ(shallow.retry_at_us, kT0 + kSecond);
}

TEST(TokenBucketTest, ConsumeNeverGoesNegative) {
  const Decision d =
      Decide(TokenBucket(1, kSecond, 3), kId, State{2, kT0, 0}, 3, Mode::kConsume, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_at_us, kT0 + kSecond);
}

TEST(TokenBucketTest, CountAboveCapacityIsDeniedWithoutARetryAt) {
  const Decision d = Decide(TokenBucket(10, kSecond), kId, std::nullopt, 11, Mode::kConsume, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(d.retry_at_us.has_value());
}

TEST(TokenBucketTest, CountAboveCapacityPlusMaxReservedIsNeverReservable) {
  const LimitConfig c = TokenBucket(10, kSecond, 10, 5);
  EXPECT_EQ(Decide(c, kId, std::nullopt, 16, Mode::kReserve, kT0).reason,
            DenyReason::kCountExceedsCapacity);
  EXPECT_TRUE(Decide(c, kId, std::nullopt, 15, Mode::kReserve, kT0).allowed);
}

TEST(TokenBucketTest, CountAboveCapacityCanBeReservedWhenUnbounded) {
  const Decision d = Decide(TokenBucket(10, kSecond), kId, std::nullopt, 25, Mode::kReserve, kT0);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, -15);
  EXPECT_EQ(d.retry_at_us, kT0 + 1500000);
}

TEST(TokenBucketTest, LaterCallersWaitBehindTheDebt) {
  const LimitConfig c = TokenBucket(1, kSecond, 3);
  // -2 at kT0; one second later the balance is -1, so 1 token is 2 s away.
  const Decision d = Decide(c, kId, State{-2, kT0, 0}, 1, Mode::kConsume, kT0 + kSecond);
  EXPECT_FALSE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, -1);
  EXPECT_EQ(d.retry_at_us, kT0 + 3 * kSecond);
}

TEST(TokenBucketTest, CheckAnswersLikeConsumeAndReportsTheCurrentValue) {
  const LimitConfig c = TokenBucket(10, kSecond);
  const Decision allowed = Decide(c, kId, State{5, kT0, 0}, 1, Mode::kCheck, kT0);
  EXPECT_TRUE(allowed.allowed);
  EXPECT_DOUBLE_EQ(allowed.value, 5);
  const Decision denied = Decide(c, kId, State{0.5, kT0, 0}, 1, Mode::kCheck, kT0);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_at_us, kT0 + 50000);
}

TEST(TokenBucketTest, FullAtIsWhenTheBucketHasRefilled) {
  const LimitConfig c = TokenBucket(10, kSecond);
  // The moment it is full, plus a microsecond of margin.
  EXPECT_EQ(FullAt(c, State{5, kT0, 0}), kT0 + kSecond / 2 + 1);
  EXPECT_EQ(FullAt(c, State{10, kT0, 0}), kT0);
  EXPECT_EQ(FullAt(c, State{-10, kT0, 0}), kT0 + 2 * kSecond + 1);
  const Decision d = Decide(c, kId, std::nullopt, 4, Mode::kConsume, kT0);
  EXPECT_EQ(d.next.full_at_us, kT0 + 400000 + 1);
}

// ---- Jitter -------------------------------------------------------------------------------

TEST(JitterTest, DeterministicPerKeyAndBoundedByTheFraction) {
  LimitConfig c = TokenBucket(1, kSecond, 1);
  c.jitter = 0.5;
  const Decision a = Decide(c, {"api", "k1"}, State{0, kT0, 0}, 1, Mode::kConsume, kT0);
  const Decision again = Decide(c, {"api", "k1"}, State{0, kT0, 0}, 1, Mode::kConsume, kT0);
  ASSERT_TRUE(a.retry_at_us.has_value());
  EXPECT_EQ(a.retry_at_us, again.retry_at_us);
  EXPECT_GE(*a.retry_at_us, kT0 + kSecond);
  EXPECT_LT(*a.retry_at_us, kT0 + kSecond + kSecond / 2);
  // Across many keys the offsets spread over the range.
  int64_t lo = INT64_MAX, hi = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    const int64_t at =
        *Decide(c, {"api", key}, State{0, kT0, 0}, 1, Mode::kConsume, kT0).retry_at_us;
    lo = std::min(lo, at - kT0 - kSecond);
    hi = std::max(hi, at - kT0 - kSecond);
  }
  EXPECT_LT(lo, kSecond / 20);
  EXPECT_GT(hi, kSecond / 2 - kSecond / 20);
}

TEST(JitterTest, NeverAppliedToReservations) {
  LimitConfig c = TokenBucket(1, kSecond, 3);
  c.jitter = 1;
  const Decision d = Decide(c, kId, State{3, kT0, 0}, 5, Mode::kReserve, kT0);
  EXPECT_EQ(d.retry_at_us, kT0 + 2 * kSecond);
}

// ---- Fixed window -------------------------------------------------------------------------

constexpr int64_t kWs = 28333333LL * kMinute;  // a minute boundary near kT0

TEST(FixedWindowTest, MissingStateStartsFullInTheCurrentWindow) {
  const Decision d =
      Decide(FixedWindow(10, kMinute), kId, std::nullopt, 1, Mode::kConsume, kWs + 30 * kSecond);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, 9);
  EXPECT_EQ(d.next.ts_us, kWs);
}

TEST(FixedWindowTest, ExhaustedWindowRetriesAtTheNextBoundary) {
  const Decision d = Decide(FixedWindow(10, kMinute), kId, State{0, kWs, 0}, 1, Mode::kConsume,
                            kWs + 30 * kSecond);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_at_us, kWs + kMinute);
}

TEST(FixedWindowTest, BoundaryIsExact) {
  const LimitConfig c = FixedWindow(10, kMinute);
  EXPECT_FALSE(Decide(c, kId, State{0, kWs, 0}, 1, Mode::kConsume, kWs + kMinute - 1).allowed);
  const Decision d = Decide(c, kId, State{0, kWs, 0}, 1, Mode::kConsume, kWs + kMinute);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, 9);
  EXPECT_EQ(d.next.ts_us, kWs + kMinute);
}

TEST(FixedWindowTest, UnusedTokensAccumulateUpToCapacity) {
  const LimitConfig c = FixedWindow(10, kMinute, 0, /*capacity=*/25);
  const Decision d = Decide(c, kId, State{5, kWs, 0}, 1, Mode::kConsume, kWs + 3 * kMinute + 1);
  EXPECT_DOUBLE_EQ(d.value, 24);  // min(5 + 3*10, 25) - 1
  EXPECT_EQ(d.next.ts_us, kWs + 3 * kMinute);
}

TEST(FixedWindowTest, StartOffsetsTheBoundaries) {
  const LimitConfig c = FixedWindow(10, kMinute, /*start=*/15 * kSecond);
  const Decision d = Decide(c, kId, std::nullopt, 1, Mode::kConsume, kWs + 10 * kSecond);
  EXPECT_EQ(d.next.ts_us, kWs - 45 * kSecond);
  // A start larger than the period is taken modulo the period.
  const LimitConfig c2 = FixedWindow(10, kMinute, 75 * kSecond);
  EXPECT_EQ(Decide(c2, kId, std::nullopt, 1, Mode::kConsume, kWs + 10 * kSecond).next.ts_us,
            kWs - 45 * kSecond);
}

TEST(FixedWindowTest, DefaultStartIsAStablePerKeyHash) {
  const LimitConfig c = FixedWindow(10, kMinute, std::nullopt);
  const int64_t a = WindowStart(c, {"api", "a"});
  EXPECT_EQ(a, WindowStart(c, {"api", "a"}));
  EXPECT_GE(a, 0);
  EXPECT_LT(a, kMinute);
  int distinct = 0;
  for (int i = 0; i < 20; ++i) distinct += WindowStart(c, {"api", std::to_string(i)}) != a;
  EXPECT_GE(distinct, 18);
  const Decision d = Decide(c, {"api", "a"}, std::nullopt, 1, Mode::kConsume, kWs);
  EXPECT_EQ((d.next.ts_us - a) % kMinute, 0);
  EXPECT_LE(d.next.ts_us, kWs);
  EXPECT_GT(d.next.ts_us, kWs - kMinute);
}

TEST(FixedWindowTest, ClockSteppingBackAddsNoWindow) {
  const Decision d =
      Decide(FixedWindow(10, kMinute), kId, State{3, kWs, 0}, 1, Mode::kConsume, kWs - 2 * kMinute);
  EXPECT_DOUBLE_EQ(d.value, 2);
  EXPECT_EQ(d.next.ts_us, kWs);
}

TEST(FixedWindowTest, ReservationRunsInTheWindowThatPaysTheDebt) {
  const Decision d =
      Decide(FixedWindow(10, kMinute), kId, State{2, kWs, 0}, 25, Mode::kReserve, kWs + kSecond);
  EXPECT_TRUE(d.allowed);
  EXPECT_DOUBLE_EQ(d.value, -23);
  EXPECT_EQ(d.retry_at_us, kWs + 3 * kMinute);  // ceil(23 / 10) windows
}

TEST(FixedWindowTest, CountAboveCapacityIsDeniedWithoutARetryAt) {
  const Decision d = Decide(FixedWindow(10, kMinute), kId, std::nullopt, 11, Mode::kConsume, kWs);
  EXPECT_EQ(d.reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(d.retry_at_us.has_value());
}

TEST(FixedWindowTest, FullAtIsTheFirstBoundaryWithEnoughWindows) {
  const LimitConfig c = FixedWindow(10, kMinute, 0, 25);
  EXPECT_EQ(FullAt(c, State{4, kWs, 0}), kWs + 3 * kMinute + 1);  // ceil(21 / 10) windows
  EXPECT_EQ(FullAt(c, State{25, kWs, 0}), kWs);
}

// ---- The shared vectors ---------------------------------------------------------------------
// tests/support/algebra_vectors.h: exact answers worked out by hand, which the Redis function
// library must give too (tests/storage/redis/redis_lua_test.cc).

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(AlgebraVectorsTest, DecideGivesEachVectorItsExactAnswer) {
  for (const AlgebraVector& v : kAlgebraVectors) {
    SCOPED_TRACE(v.name);
    const Decision d = Decide(v.config, kVectorId, v.current, v.count, v.mode, v.now_us);
    EXPECT_EQ(d.allowed, v.allowed);
    EXPECT_EQ(d.reason, v.reason);
    EXPECT_TRUE(SameBits(d.value, v.value)) << d.value << " vs " << v.value;
    EXPECT_EQ(d.retry_at_us, v.retry_at_us);
    // A vector's `next` is set exactly when the decision writes a state.
    ASSERT_EQ(v.next.has_value(), v.allowed && v.mode != Mode::kCheck);
    if (v.next) {
      EXPECT_TRUE(SameBits(d.next.value, v.next->value)) << d.next.value << " vs " << v.next->value;
      EXPECT_EQ(d.next.ts_us, v.next->ts_us);
      EXPECT_EQ(d.next.full_at_us, v.next->full_at_us);
      EXPECT_TRUE(SameBits(d.next.counted_against, v.next->counted_against))
          << d.next.counted_against << " vs " << v.next->counted_against;
    }
  }
}

}  // namespace
}  // namespace ratelimit
