#include "server/rlqs/rlqs_allocator.h"

#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ratelimit {
namespace {

constexpr int64_t kSecond = 1000000;  // DemandEstimator takes microseconds

FairShareSettings NoReserve() {
  FairShareSettings s;
  s.newcomer_reserve = 0;
  return s;
}

double SumRates(const std::vector<FairShare>& shares) {
  double sum = 0;
  for (const FairShare& s : shares) sum += s.rate;
  return sum;
}

double SumBursts(const std::vector<FairShare>& shares) {
  double sum = 0;
  for (const FairShare& s : shares) sum += s.burst;
  return sum;
}

std::vector<std::optional<double>> Demands(std::initializer_list<double> d) {
  return std::vector<std::optional<double>>(d.begin(), d.end());
}

TEST(DivideFairlyTest, NoSubscribersNoShares) {
  EXPECT_TRUE(DivideFairly(100, 100, FairShareSettings(), {}).empty());
}

TEST(DivideFairlyTest, OneSubscriberGetsEverythingButTheReserve) {
  FairShareSettings s;
  s.newcomer_reserve = 0.1;
  std::vector<FairShare> shares = DivideFairly(100, 50, s, Demands({1000}));
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_DOUBLE_EQ(shares[0].rate, 90);
  EXPECT_DOUBLE_EQ(shares[0].burst, 45);
}

TEST(DivideFairlyTest, EqualSplitWhenEveryoneWantsMore) {
  std::vector<FairShare> shares = DivideFairly(100, 40, NoReserve(), Demands({500, 200, 1000, 60}));
  for (const FairShare& s : shares) {
    EXPECT_DOUBLE_EQ(s.rate, 25);
    EXPECT_DOUBLE_EQ(s.burst, 10);
  }
}

TEST(DivideFairlyTest, UnderDemandersGetTheirDemandTheRestIsSplit) {
  // 100 among 4: 5 and 15 are under the equal share; the other two split the 80 left.
  std::vector<FairShare> shares = DivideFairly(100, 100, NoReserve(), Demands({5, 200, 15, 70}));
  EXPECT_DOUBLE_EQ(shares[0].rate, 5);
  EXPECT_DOUBLE_EQ(shares[2].rate, 15);
  EXPECT_DOUBLE_EQ(shares[1].rate, 40);
  EXPECT_DOUBLE_EQ(shares[3].rate, 40);
  EXPECT_NEAR(SumRates(shares), 100, 1e-9);
}

TEST(DivideFairlyTest, CascadingUnderDemanders) {
  // Equal share 25; 20 is under it; then 80/3 = 26.7 and 26 is under that; 54 left for two.
  std::vector<FairShare> shares = DivideFairly(100, 0, NoReserve(), Demands({20, 26, 90, 90}));
  EXPECT_DOUBLE_EQ(shares[0].rate, 20);
  EXPECT_DOUBLE_EQ(shares[1].rate, 26);
  EXPECT_DOUBLE_EQ(shares[2].rate, 27);
  EXPECT_DOUBLE_EQ(shares[3].rate, 27);
}

TEST(DivideFairlyTest, SurplusIsSharedAsHeadroomWhenAllAreSatisfied) {
  std::vector<FairShare> shares = DivideFairly(100, 0, NoReserve(), Demands({10, 20, 30}));
  // 40 left over: 40/3 each on top of the demand.
  EXPECT_NEAR(shares[0].rate, 10 + 40.0 / 3, 1e-9);
  EXPECT_NEAR(shares[1].rate, 20 + 40.0 / 3, 1e-9);
  EXPECT_NEAR(shares[2].rate, 30 + 40.0 / 3, 1e-9);
  EXPECT_NEAR(SumRates(shares), 100, 1e-9);
}

TEST(DivideFairlyTest, ZeroDemandIsAllowedAndGetsOnlyHeadroom) {
  std::vector<FairShare> shares = DivideFairly(100, 0, NoReserve(), Demands({0, 0, 300}));
  EXPECT_DOUBLE_EQ(shares[0].rate, 0);
  EXPECT_DOUBLE_EQ(shares[1].rate, 0);
  EXPECT_DOUBLE_EQ(shares[2].rate, 100);
  // Nobody wants anything: the budget is split equally.
  shares = DivideFairly(90, 0, NoReserve(), Demands({0, 0, 0}));
  for (const FairShare& s : shares) EXPECT_DOUBLE_EQ(s.rate, 30);
}

TEST(DivideFairlyTest, UnknownDemandCountsAsUnbounded) {
  std::vector<std::optional<double>> d = {10.0, std::nullopt, 500.0};
  std::vector<FairShare> shares = DivideFairly(100, 0, NoReserve(), d);
  EXPECT_DOUBLE_EQ(shares[0].rate, 10);
  EXPECT_DOUBLE_EQ(shares[1].rate, 45);
  EXPECT_DOUBLE_EQ(shares[2].rate, 45);
}

TEST(DivideFairlyTest, ReserveIsNeverAssigned) {
  FairShareSettings s;
  s.newcomer_reserve = 0.05;
  std::vector<FairShare> shares = DivideFairly(1000, 200, s, Demands({1, 2, 3}));
  EXPECT_NEAR(SumRates(shares), 950, 1e-9);
  EXPECT_NEAR(SumBursts(shares), 190, 1e-9);
}

TEST(DivideFairlyTest, BurstFollowsTheRates) {
  std::vector<FairShare> shares = DivideFairly(100, 50, NoReserve(), Demands({10, 1000}));
  EXPECT_DOUBLE_EQ(shares[0].rate, 10);
  EXPECT_DOUBLE_EQ(shares[1].rate, 90);
  EXPECT_DOUBLE_EQ(shares[0].burst, 5);
  EXPECT_DOUBLE_EQ(shares[1].burst, 45);
}

TEST(DivideFairlyTest, ZeroGlobalRateAssignsNothing) {
  std::vector<FairShare> shares = DivideFairly(0, 0, NoReserve(), Demands({10, 20}));
  EXPECT_EQ(SumRates(shares), 0);
  EXPECT_EQ(SumBursts(shares), 0);
}

TEST(DivideFairlyTest, SumsNeverExceedTheLimitOnRandomDemands) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> demand(0, 500);
  std::uniform_int_distribution<int> count(1, 60);
  for (int round = 0; round < 2000; ++round) {
    FairShareSettings s;
    s.newcomer_reserve = (round % 3) * 0.05;
    std::vector<std::optional<double>> d(count(rng));
    for (auto& x : d) {
      if (rng() % 7 == 0) continue;  // unknown
      x = (rng() % 5 == 0) ? 0 : demand(rng);
    }
    const double rate = demand(rng) * 4, burst = demand(rng);
    std::vector<FairShare> shares = DivideFairly(rate, burst, s, d);
    const double cap = rate * (1 - s.newcomer_reserve);
    ASSERT_LE(SumRates(shares), cap * (1 + 1e-12) + 1e-9) << "round " << round;
    ASSERT_LE(SumBursts(shares), burst * (1 - s.newcomer_reserve) * (1 + 1e-12) + 1e-9);
    // Max-min: whoever gets less than its demand gets at least as much as anyone else.
    double max_rate = 0;
    for (const FairShare& f : shares) max_rate = std::max(max_rate, f.rate);
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_GE(shares[i].rate, 0);
      if (d[i] && shares[i].rate < *d[i] - 1e-9) {
        ASSERT_NEAR(shares[i].rate, max_rate, 1e-6) << "round " << round << " subscriber " << i;
      }
    }
  }
}

TEST(DivideFairlyTest, FourfoldShiftOfOneSubscriber) {
  // 10 subscribers of a 1000/s bucket; one goes from 20/s to 80/s while the others want 200/s.
  std::vector<std::optional<double>> d(10, 200.0);
  d[3] = 20;
  std::vector<FairShare> before = DivideFairly(1000, 0, NoReserve(), d);
  EXPECT_DOUBLE_EQ(before[3].rate, 20);
  EXPECT_DOUBLE_EQ(before[0].rate, 980.0 / 9);
  d[3] = 80;
  std::vector<FairShare> after = DivideFairly(1000, 0, NoReserve(), d);
  EXPECT_DOUBLE_EQ(after[3].rate, 80);
  EXPECT_DOUBLE_EQ(after[0].rate, 920.0 / 9);
  EXPECT_TRUE(ShareMoved(before[3], after[3], FairShareSettings()));
  EXPECT_FALSE(ShareMoved(before[0], after[0], FairShareSettings()));  // 6% < 10%
}

TEST(DivideFairlyTest, JoinAndLeave) {
  std::vector<std::optional<double>> d = {300.0, 300.0};
  std::vector<FairShare> two = DivideFairly(300, 0, NoReserve(), d);
  EXPECT_DOUBLE_EQ(two[0].rate, 150);
  d.push_back(std::nullopt);  // a newcomer, demand not known yet
  std::vector<FairShare> three = DivideFairly(300, 0, NoReserve(), d);
  for (const FairShare& s : three) EXPECT_DOUBLE_EQ(s.rate, 100);
  d.erase(d.begin());  // the first one leaves
  std::vector<FairShare> again = DivideFairly(300, 0, NoReserve(), d);
  for (const FairShare& s : again) EXPECT_DOUBLE_EQ(s.rate, 150);
}

TEST(DivideFairlyTest, ThousandSubscribers) {
  std::vector<std::optional<double>> d(1000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<double>(i % 50);  // 0..49
  std::vector<FairShare> shares = DivideFairly(10000, 5000, NoReserve(), d);
  // The demands sum to 24500 > 10000: the water level L solves sum(min(d, L)) = 10000.
  EXPECT_NEAR(SumRates(shares), 10000, 1e-6);
  double level = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    if (shares[i].rate < *d[i] - 1e-9) level = shares[i].rate;
  }
  ASSERT_GT(level, 0);
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_NEAR(shares[i].rate, std::min(*d[i], level), 1e-9);
  }
  EXPECT_NEAR(SumBursts(shares), 5000, 1e-6);
}

TEST(ShareMovedTest, Threshold) {
  FairShareSettings s;
  s.reassign_threshold = 0.1;
  EXPECT_FALSE(ShareMoved({100, 0}, {109, 0}, s));
  EXPECT_TRUE(ShareMoved({100, 0}, {111, 0}, s));
  EXPECT_TRUE(ShareMoved({100, 0}, {89, 0}, s));
  EXPECT_TRUE(ShareMoved({0, 0}, {1, 0}, s));
  EXPECT_FALSE(ShareMoved({0, 0}, {0, 0}, s));
}

TEST(DemandEstimatorTest, FirstReportIsTheEstimate) {
  DemandEstimator e;
  EXPECT_FALSE(e.demand().has_value());
  e.AddReport(/*requests=*/50, /*elapsed_us=*/5 * kSecond, 0.7);
  ASSERT_TRUE(e.demand().has_value());
  EXPECT_DOUBLE_EQ(*e.demand(), 10);
}

TEST(DemandEstimatorTest, SmoothsExponentially) {
  DemandEstimator e;
  e.AddReport(100, 1 * kSecond, 0.5);
  e.AddReport(300, 1 * kSecond, 0.5);
  EXPECT_DOUBLE_EQ(*e.demand(), 200);
  e.AddReport(300, 1 * kSecond, 0.5);
  EXPECT_DOUBLE_EQ(*e.demand(), 250);
}

TEST(DemandEstimatorTest, FourfoldShiftConvergesWithinThreeReportsAtTheDefault) {
  DemandEstimator e;
  const double a = FairShareSettings().smoothing;
  e.AddReport(100, 1 * kSecond, a);
  for (int i = 0; i < 3; ++i) e.AddReport(400, 1 * kSecond, a);
  EXPECT_NEAR(*e.demand(), 400, 400 * 0.05);
}

TEST(DemandEstimatorTest, SubSecondReportsAreCarriedOver) {
  DemandEstimator e;
  e.AddReport(30, 0, 1.0);
  EXPECT_FALSE(e.demand().has_value());
  e.AddReport(30, 2 * kSecond, 1.0);
  EXPECT_DOUBLE_EQ(*e.demand(), 30);
}

// An Envoy reporting every half second: its reports' time adds up as their requests do.
TEST(DemandEstimatorTest, SubSecondReportsCarryTheirTime) {
  DemandEstimator halves;
  halves.AddReport(25, kSecond / 2, 1.0);
  EXPECT_FALSE(halves.demand().has_value());
  halves.AddReport(25, kSecond / 2, 1.0);
  ASSERT_TRUE(halves.demand().has_value());
  EXPECT_DOUBLE_EQ(*halves.demand(), 50);

  DemandEstimator uneven;
  uneven.AddReport(25, kSecond / 2, 1.0);
  uneven.AddReport(75, 3 * kSecond / 2, 1.0);
  EXPECT_DOUBLE_EQ(*uneven.demand(), 50) << "100 requests in 2 s";
}

TEST(DemandEstimatorTest, ZeroRequestsIsZeroDemand) {
  DemandEstimator e;
  e.AddReport(0, 5 * kSecond, 0.7);
  EXPECT_DOUBLE_EQ(*e.demand(), 0);
}

TEST(ToWholeSecondTokenBucketTest, WholeRate) {
  EXPECT_EQ(ToWholeSecondTokenBucket({10, 20}), (WholeSecondTokenBucket{20, 10, 1}));
}

TEST(ToWholeSecondTokenBucketTest, FractionalRateUsesALongerInterval) {
  EXPECT_EQ(ToWholeSecondTokenBucket({0.5, 3}), (WholeSecondTokenBucket{3, 1, 2}));
  EXPECT_EQ(ToWholeSecondTokenBucket({10.5, 30}), (WholeSecondTokenBucket{30, 21, 2}));
}

TEST(DistributableTest, WhatIsHeldAndTheReserveOfTheWholeAreSetAsideAndNothingGoesBelowZero) {
  const FairShare left = Distributable(FairShare{100, 20}, FairShare{30, 5}, 0);
  EXPECT_DOUBLE_EQ(left.rate, 70);
  EXPECT_DOUBLE_EQ(left.burst, 15);
  // The reserve is a share of the whole rule, not of what the held shares leave.
  const FairShare reserved = Distributable(FairShare{100, 20}, FairShare{85, 10}, 0.05);
  EXPECT_DOUBLE_EQ(reserved.rate, 10);
  EXPECT_DOUBLE_EQ(reserved.burst, 9);
  EXPECT_DOUBLE_EQ(Distributable(FairShare{100, 20}, FairShare{}, 0.05).rate, 95);
  const FairShare none = Distributable(FairShare{100, 20}, FairShare{150, 20}, 0.05);
  EXPECT_DOUBLE_EQ(none.rate, 0);
  EXPECT_DOUBLE_EQ(none.burst, 0);
  EXPECT_DOUBLE_EQ(Distributable(FairShare{100, 20}, FairShare{97, 0}, 0.05).rate, 0);
  // Out-of-range reserves are clamped.
  EXPECT_DOUBLE_EQ(Distributable(FairShare{100, 20}, FairShare{}, -1).rate, 100);
  EXPECT_DOUBLE_EQ(Distributable(FairShare{100, 20}, FairShare{}, 2).rate, 0);
}

TEST(ToWholeSecondTokenBucketTest, NeverExceedsTheShare) {
  for (double rate = 0; rate < 300; rate += 0.37) {
    const WholeSecondTokenBucket b = ToWholeSecondTokenBucket({rate, rate});
    ASSERT_GE(b.fill_interval_seconds, 1);
    ASSERT_LE(b.fill_interval_seconds, 60);
    const double got = static_cast<double>(b.tokens_per_fill) / b.fill_interval_seconds;
    ASSERT_LE(got, rate + 1e-9);
    if (rate >= 1) {
      ASSERT_GE(got, 0.98 * rate) << rate;
    }
    ASSERT_EQ(b.max_tokens, b.tokens_per_fill > 0 ? std::max(1.0, std::floor(rate)) : 0) << rate;
  }
}

// Envoy's bucket refills continuously, so max_tokens is the burst: a share of 900/s with a burst
// of 180 is sent as 900 per second with at most 180 at once, not raised to a fill of 900.
TEST(ToWholeSecondTokenBucketTest, TheBurstIsTheBucketsSizeEvenBelowOneFill) {
  EXPECT_EQ(ToWholeSecondTokenBucket({900, 180}), (WholeSecondTokenBucket{180, 900, 1}));
  EXPECT_EQ(ToWholeSecondTokenBucket({0.5, 3}), (WholeSecondTokenBucket{3, 1, 2}));
  // A burst below one token would let nothing through: one.
  EXPECT_EQ(ToWholeSecondTokenBucket({450, 0.4}), (WholeSecondTokenBucket{1, 450, 1}));
}

// Below one a minute (a rule of 100 a day, or 1 a second among a hundred Envoys): one token
// every ceil(1 / rate) seconds, which Envoy's TokenBucket takes (max_tokens and tokens_per_fill
// above 0) and which never exceeds the share.
TEST(ToWholeSecondTokenBucketTest, ASlowRateGetsOneTokenEveryLongerInterval) {
  EXPECT_EQ(ToWholeSecondTokenBucket({0.001, 0}), (WholeSecondTokenBucket{1, 1, 1000}));
  EXPECT_EQ(ToWholeSecondTokenBucket({100.0 / 86400, 0.5}), (WholeSecondTokenBucket{1, 1, 864}));
  for (double rate = 1.0 / 86400; rate < 1.0 / 60; rate *= 1.07) {
    const WholeSecondTokenBucket b = ToWholeSecondTokenBucket({rate, 0});
    ASSERT_EQ(b.tokens_per_fill, 1u) << rate;
    ASSERT_GE(b.max_tokens, 1u) << rate;
    ASSERT_LE(b.fill_interval_seconds, 86400) << rate;
    ASSERT_LE(1.0 / static_cast<double>(b.fill_interval_seconds), rate) << rate;
    ASSERT_GE(1.0 / static_cast<double>(b.fill_interval_seconds - 1), rate) << "the shortest";
  }
}

TEST(ToWholeSecondTokenBucketTest, BelowOneADayOrNothingGivesNoToken) {
  for (double rate : {0.0, 1e-6, 1.0 / 86401}) {
    const WholeSecondTokenBucket b = ToWholeSecondTokenBucket({rate, 0});
    EXPECT_EQ(b.tokens_per_fill, 0u) << rate;
    EXPECT_EQ(b.max_tokens, 0u) << rate;
  }
}

}  // namespace
}  // namespace ratelimit
