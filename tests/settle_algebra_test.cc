// The settle rules of storage/algebra, on explicit times: refunds, charges, windows, debt.
#include "gtest/gtest.h"
#include "storage/algebra.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TokenBucket;

constexpr int64_t kT0 = 1700000000LL * kSecond;
constexpr LimitId kId{"llm", "tenant-1"};

TEST(SettleTest, TokenBucketRefundGivesBackTheUnusedPart) {
  const LimitConfig c = TokenBucket(100, 100 * kSecond);  // 1 token/s, capacity 100
  const Decision take = Decide(c, kId, std::nullopt, 60, Mode::kConsume, kT0);
  ASSERT_TRUE(take.allowed);
  const Settled s = Settle(c, kId, take.next, 60, 20, kT0, kT0);
  EXPECT_DOUBLE_EQ(s.returned, 40);
  EXPECT_DOUBLE_EQ(s.value, 80);
  EXPECT_DOUBLE_EQ(s.next.value, 80);
  EXPECT_DOUBLE_EQ(s.charged, 0);
  EXPECT_FALSE(s.paid_at_us.has_value());
}

TEST(SettleTest, TokenBucketRefundNeverLiftsAboveCapacity) {
  const LimitConfig c = TokenBucket(100, 100 * kSecond);
  const Decision take = Decide(c, kId, std::nullopt, 60, Mode::kConsume, kT0);
  // 30 s later the bucket holds 70; without the take it would hold 100.
  const Settled s = Settle(c, kId, take.next, 60, 0, kT0, kT0 + 30 * kSecond);
  EXPECT_DOUBLE_EQ(s.returned, 30);
  EXPECT_DOUBLE_EQ(s.value, 100);
}

TEST(SettleTest, TokenBucketRefundAfterFullRefillGainsNothing) {
  const LimitConfig c = TokenBucket(100, 100 * kSecond);
  const Decision take = Decide(c, kId, std::nullopt, 60, Mode::kConsume, kT0);
  const Settled s = Settle(c, kId, take.next, 60, 0, kT0, kT0 + 90 * kSecond);
  EXPECT_DOUBLE_EQ(s.returned, 0);
  EXPECT_DOUBLE_EQ(s.value, 100);
  // A later consume sees exactly capacity: the refund minted nothing.
  const Decision after = Decide(c, kId, s.next, 100, Mode::kConsume, kT0 + 90 * kSecond);
  EXPECT_TRUE(after.allowed);
  EXPECT_DOUBLE_EQ(after.value, 0);
}

TEST(SettleTest, FixedWindowRefundInSameWindow) {
  const LimitConfig c = FixedWindow(10, 60 * kSecond);
  const int64_t start = (kT0 / (60 * kSecond)) * 60 * kSecond;
  const Decision take = Decide(c, kId, std::nullopt, 8, Mode::kConsume, start + kSecond);
  ASSERT_TRUE(take.allowed);
  const Settled s = Settle(c, kId, take.next, 8, 3, start + kSecond, start + 30 * kSecond);
  EXPECT_DOUBLE_EQ(s.returned, 5);
  EXPECT_DOUBLE_EQ(s.value, 7);
}

TEST(SettleTest, FixedWindowRefundInALaterWindowHasNoEffect) {
  const LimitConfig c = FixedWindow(10, 60 * kSecond);
  const int64_t start = (kT0 / (60 * kSecond)) * 60 * kSecond;
  const Decision take = Decide(c, kId, std::nullopt, 8, Mode::kConsume, start + kSecond);
  // The next window has opened and been drawn down to 4 by another caller.
  const Decision other = Decide(c, kId, take.next, 6, Mode::kConsume, start + 61 * kSecond);
  ASSERT_TRUE(other.allowed);
  const Settled s = Settle(c, kId, other.next, 8, 0, start + kSecond, start + 62 * kSecond);
  EXPECT_DOUBLE_EQ(s.returned, 0);
  EXPECT_DOUBLE_EQ(s.value, 4);
}

TEST(SettleTest, ChargeGoesIntoDebtAndSaysWhenPaid) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);  // 1 token/s, capacity 10
  const Decision take = Decide(c, kId, std::nullopt, 10, Mode::kReserve, kT0);
  ASSERT_TRUE(take.allowed);
  const Settled s = Settle(c, kId, take.next, 10, 15, kT0, kT0);
  EXPECT_DOUBLE_EQ(s.charged, 5);
  EXPECT_DOUBLE_EQ(s.uncharged, 0);
  EXPECT_DOUBLE_EQ(s.value, -5);
  ASSERT_TRUE(s.paid_at_us.has_value());
  EXPECT_EQ(*s.paid_at_us, kT0 + 5 * kSecond);
}

TEST(SettleTest, ChargePastMaxReservedIsCappedAndReportedUncharged) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond, std::nullopt, /*max_reserved=*/4);
  const Decision take = Decide(c, kId, std::nullopt, 8, Mode::kConsume, kT0);  // 2 left
  const Settled s = Settle(c, kId, take.next, 8, 20, kT0, kT0);
  EXPECT_DOUBLE_EQ(s.charged, 6);  // down to -4
  EXPECT_DOUBLE_EQ(s.uncharged, 6);
  EXPECT_DOUBLE_EQ(s.value, -4);
  ASSERT_TRUE(s.paid_at_us.has_value());
  EXPECT_EQ(*s.paid_at_us, kT0 + 4 * kSecond);
}

TEST(SettleTest, ChargeWithNoRoomChargesNothing) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond, std::nullopt, /*max_reserved=*/0);
  const Settled s = Settle(c, kId, State{0, kT0, 0}, 1, 3, kT0, kT0);
  EXPECT_DOUBLE_EQ(s.charged, 0);
  EXPECT_DOUBLE_EQ(s.uncharged, 2);
  EXPECT_DOUBLE_EQ(s.value, 0);
}

TEST(SettleTest, ExactUseChangesNothing) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);
  const Settled s = Settle(c, kId, State{3, kT0, 0}, 5, 5, kT0, kT0);
  EXPECT_DOUBLE_EQ(s.returned, 0);
  EXPECT_DOUBLE_EQ(s.charged, 0);
  EXPECT_DOUBLE_EQ(s.value, 3);
}

TEST(SettleTest, CancellingAReservationInDebtPaysItBack) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);
  const Decision first = Decide(c, kId, std::nullopt, 10, Mode::kReserve, kT0);
  const Decision second = Decide(c, kId, first.next, 6, Mode::kReserve, kT0);
  ASSERT_TRUE(second.allowed);
  ASSERT_DOUBLE_EQ(second.value, -6);
  const Settled s = Settle(c, kId, second.next, 6, 0, kT0, kT0 + kSecond);
  EXPECT_DOUBLE_EQ(s.returned, 6);
  EXPECT_DOUBLE_EQ(s.value, 1);
  EXPECT_FALSE(s.paid_at_us.has_value());
}

}  // namespace
}  // namespace ratelimit
