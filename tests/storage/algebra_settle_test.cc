// The settle rules of storage/algebra, on explicit times: refunds, charges, windows, debt.
#include <algorithm>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

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
  const Settled s = Settle(c, kId, take.next, 60, 20, kT0, kT0, take.value);
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
  const Settled s = Settle(c, kId, take.next, 60, 0, kT0, kT0 + 30 * kSecond, take.value);
  EXPECT_DOUBLE_EQ(s.returned, 30);
  EXPECT_DOUBLE_EQ(s.value, 100);
}

TEST(SettleTest, TokenBucketRefundAfterFullRefillGainsNothing) {
  const LimitConfig c = TokenBucket(100, 100 * kSecond);
  const Decision take = Decide(c, kId, std::nullopt, 60, Mode::kConsume, kT0);
  const Settled s = Settle(c, kId, take.next, 60, 0, kT0, kT0 + 90 * kSecond, take.value);
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
  const Settled s =
      Settle(c, kId, take.next, 8, 3, start + kSecond, start + 30 * kSecond, take.value);
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
  const Settled s =
      Settle(c, kId, other.next, 8, 0, start + kSecond, start + 62 * kSecond, take.value);
  EXPECT_DOUBLE_EQ(s.returned, 0);
  EXPECT_DOUBLE_EQ(s.value, 4);
}

TEST(SettleTest, ChargeGoesIntoDebtAndSaysWhenPaid) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);  // 1 token/s, capacity 10
  const Decision take = Decide(c, kId, std::nullopt, 10, Mode::kReserve, kT0);
  ASSERT_TRUE(take.allowed);
  const Settled s = Settle(c, kId, take.next, 10, 15, kT0, kT0, take.value);
  EXPECT_DOUBLE_EQ(s.charged, 5);
  EXPECT_DOUBLE_EQ(s.uncharged, 0);
  EXPECT_DOUBLE_EQ(s.value, -5);
  ASSERT_TRUE(s.paid_at_us.has_value());
  EXPECT_EQ(*s.paid_at_us, kT0 + 5 * kSecond);
}

TEST(SettleTest, ChargePastMaxReservedIsCappedAndReportedUncharged) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond, std::nullopt, /*max_reserved=*/4);
  const Decision take = Decide(c, kId, std::nullopt, 8, Mode::kConsume, kT0);  // 2 left
  const Settled s = Settle(c, kId, take.next, 8, 20, kT0, kT0, take.value);
  EXPECT_DOUBLE_EQ(s.charged, 6);  // down to -4
  EXPECT_DOUBLE_EQ(s.uncharged, 6);
  EXPECT_DOUBLE_EQ(s.value, -4);
  ASSERT_TRUE(s.paid_at_us.has_value());
  EXPECT_EQ(*s.paid_at_us, kT0 + 4 * kSecond);
}

TEST(SettleTest, ChargeWithNoRoomChargesNothing) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond, std::nullopt, /*max_reserved=*/0);
  const Settled s = Settle(c, kId, State{0, kT0, 0}, 1, 3, kT0, kT0, 0.0);
  EXPECT_DOUBLE_EQ(s.charged, 0);
  EXPECT_DOUBLE_EQ(s.uncharged, 2);
  EXPECT_DOUBLE_EQ(s.value, 0);
}

TEST(SettleTest, ExactUseChangesNothing) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);
  const Settled s = Settle(c, kId, State{3, kT0, 0}, 5, 5, kT0, kT0, 3.0);
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
  const Settled s = Settle(c, kId, second.next, 6, 0, kT0, kT0 + kSecond, second.value);
  EXPECT_DOUBLE_EQ(s.returned, 6);
  EXPECT_DOUBLE_EQ(s.value, 1);
  EXPECT_FALSE(s.paid_at_us.has_value());
}

// The contract of a refund: the balance never ends above what it would be had the take been of
// `used` tokens only. Refill the bucket without the take would have lost to its capacity is not
// given back (the example of the contract in storage/algebra.h).
TEST(SettleTest, TokenBucketRefundNeverExceedsTheBucketWithoutTheTake) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);  // 1 token/s, capacity 10
  const Decision a = Decide(c, kId, std::nullopt, 5, Mode::kConsume, kT0);          // 10 -> 5
  const Decision b = Decide(c, kId, a.next, 6, Mode::kConsume, kT0 + 3 * kSecond);  // 8 -> 2
  ASSERT_TRUE(b.allowed);
  const Settled cancel = Settle(c, kId, b.next, 5, 0, kT0, kT0 + 3 * kSecond, a.value);
  // Without A's take the bucket stays at 10 (capped) and B leaves 4.
  const Decision b_alone = Decide(c, kId, std::nullopt, 6, Mode::kConsume, kT0 + 3 * kSecond);
  EXPECT_DOUBLE_EQ(b_alone.value, 4);
  EXPECT_DOUBLE_EQ(cancel.value, 4);
  EXPECT_DOUBLE_EQ(cancel.returned, 2);
}

// The same contract over many random histories: a take of `taken` (A), other callers' takes and
// reservations at random times, then A settles `used`. The settled balance is never above the
// balance of the same history in which A took `used` in the first place, and equals it when
// nobody else took anything.
TEST(SettleTest, TokenBucketRefundIsBoundedByTheHistoryWithASmallerTake) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond, std::nullopt, /*max_reserved=*/20);
  std::mt19937_64 rng(20261128);
  auto uniform = [&rng](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  for (int run = 0; run < 2000; ++run) {
    const double start_value = uniform(-5, 10);
    const std::optional<State> start = State{start_value, kT0, 0};
    const double taken = uniform(0.5, 8);
    const double used = uniform(0, taken);
    const int others = static_cast<int>(uniform(0, 4));
    std::vector<std::pair<int64_t, double>> later;  // (time, count) of the others' takes
    int64_t t = kT0;
    for (int i = 0; i < others; ++i) {
      t += static_cast<int64_t>(uniform(0, 6) * kSecond);
      later.emplace_back(t, uniform(0.5, 6));
    }
    const int64_t settle_at = t + static_cast<int64_t>(uniform(0, 6) * kSecond);
    // The history after a first take of `first_take` (none when 0); the others' takes apply
    // where `apply` says (all when null), and which of them were allowed is written to `applied`.
    auto history = [&](double first_take, const std::vector<bool>* apply,
                       std::vector<bool>* applied) {
      std::optional<State> s = start;
      double after_take = start_value;
      if (first_take > 0) {
        const Decision d = Decide(c, kId, start, first_take, Mode::kReserve, kT0);
        EXPECT_TRUE(d.allowed);
        s = d.next;
        after_take = d.value;
      }
      for (size_t i = 0; i < later.size(); ++i) {
        if (apply != nullptr && !(*apply)[i]) continue;
        const Decision o = Decide(c, kId, s, later[i].second, Mode::kReserve, later[i].first);
        if (applied != nullptr) applied->push_back(o.allowed);
        if (o.allowed) s = o.next;
      }
      return std::make_pair(after_take, s);
    };
    std::vector<bool> allowed;
    const auto [after_take, with_take] = history(taken, nullptr, &allowed);
    const Settled settled = Settle(c, kId, with_take, taken, used, kT0, settle_at, after_take);
    // The same history (the same takes of the others allowed) with a first take of `used`: the
    // balance is higher there, so every take allowed above is allowed again.
    std::vector<bool> allowed_again;
    const std::optional<State> with_small = history(used, &allowed, &allowed_again).second;
    for (bool a : allowed_again) ASSERT_TRUE(a);
    const double bound =
        Decide(c, kId, with_small, 1, Mode::kCheck, settle_at).value;  // the balance
    EXPECT_LE(settled.value, bound + 1e-9) << "run " << run;
    if (others == 0 || !std::count(allowed.begin(), allowed.end(), true)) {
      EXPECT_NEAR(settled.value, bound, 1e-9) << "run " << run;
    }
  }
}

// A version 1 receipt carries no value_after: the refund is capped at capacity only.
TEST(SettleTest, WithoutValueAfterTheRefundIsCappedAtCapacityOnly) {
  const LimitConfig c = TokenBucket(10, 10 * kSecond);
  const Decision a = Decide(c, kId, std::nullopt, 5, Mode::kConsume, kT0);
  const Decision b = Decide(c, kId, a.next, 6, Mode::kConsume, kT0 + 3 * kSecond);
  const Settled cancel = Settle(c, kId, b.next, 5, 0, kT0, kT0 + 3 * kSecond, std::nullopt);
  EXPECT_DOUBLE_EQ(cancel.value, 7);
}

}  // namespace
}  // namespace ratelimit
