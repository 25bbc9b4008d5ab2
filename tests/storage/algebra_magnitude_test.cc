// The algebra's invariants at every magnitude the service accepts, and its time arithmetic at
// the edges of the int64 range (README "Semantics").
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/algebra.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kSecond;

constexpr int64_t kT0 = 1700000000LL * kSecond;  // 2023-11-14
constexpr int64_t kDay = 86400 * kSecond;
constexpr int64_t kYear = 365 * kDay;
constexpr LimitId kId{"api", "user-1"};

LimitConfig Config(LimitKind kind, double rate, int64_t period_us, std::optional<double> capacity,
                   std::optional<double> max_reserved) {
  LimitConfig c;
  c.kind = kind;
  c.rate = rate;
  c.period_us = period_us;
  c.capacity = capacity;
  c.max_reserved = max_reserved;
  if (kind == LimitKind::kFixedWindow) c.start_us = 0;
  EXPECT_TRUE(ValidateLimitConfig(c, "").ok());
  return c;
}

// ---- Window starts before the epoch (100-year window, start 60 years) --------------------

LimitConfig CenturyWindow() {
  LimitConfig c = Config(LimitKind::kFixedWindow, 10, 100 * kYear, {}, {});
  c.start_us = 60 * kYear;
  return c;
}

TEST(AlgebraOverflowTest, WindowStartingBeforeTheEpochGetsAFiniteFullAt) {
  const LimitConfig c = CenturyWindow();
  const Decision d = Decide(c, kId, std::nullopt, 1, Mode::kConsume, kT0);
  ASSERT_TRUE(d.allowed);
  // The window containing 2023 runs from 1930 (60 - 100 years) to 2030.
  EXPECT_EQ(d.next.ts_us, -40 * kYear);
  EXPECT_EQ(d.next.full_at_us, 60 * kYear + 1);
}

TEST(AlgebraOverflowTest, WindowStartingBeforeTheEpochGivesTheNextBoundaryAsRetryAt) {
  const LimitConfig c = CenturyWindow();
  const Decision drained = Decide(c, kId, std::nullopt, 10, Mode::kConsume, kT0);
  ASSERT_TRUE(drained.allowed);
  const Decision denied = Decide(c, kId, drained.next, 1, Mode::kConsume, kT0);
  ASSERT_FALSE(denied.allowed);
  ASSERT_TRUE(denied.retry_at_us.has_value());
  EXPECT_EQ(*denied.retry_at_us, 60 * kYear);
  const Decision reserved = Decide(c, kId, drained.next, 5, Mode::kReserve, kT0);
  ASSERT_TRUE(reserved.allowed);
  EXPECT_EQ(*reserved.retry_at_us, 60 * kYear);
}

// Any `now` in the int64 range: the window start is at or before now, less than a period back
// (or clamped at the smallest time), and nothing overflows (checked by the UBSan build).
TEST(AlgebraOverflowTest, WindowArithmeticHoldsForAnyNow) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> nows = {kMin, kMin + 1, kMin + 100 * kYear, -kT0,     -1,  0,
                                     1,    kT0,      kMax - 100 * kYear, kMax - 1, kMax};
  std::vector<LimitConfig> configs = {CenturyWindow(),
                                      Config(LimitKind::kFixedWindow, 5, kSecond, {}, {}),
                                      Config(LimitKind::kTokenBucket, 5, kSecond, {}, {})};
  LimitConfig hashed = CenturyWindow();
  hashed.start_us.reset();
  configs.push_back(hashed);
  for (const LimitConfig& c : configs) {
    for (int64_t now : nows) {
      SCOPED_TRACE(::testing::Message() << "now " << now << " period " << c.period_us);
      const Decision d = Decide(c, kId, std::nullopt, 5, Mode::kConsume, now);
      ASSERT_TRUE(d.allowed);
      EXPECT_LE(d.next.ts_us, now);
      if (d.next.ts_us != kMin) {
        EXPECT_LT(static_cast<__int128>(now) - d.next.ts_us, c.period_us);
      }
      EXPECT_GE(d.next.full_at_us, d.next.ts_us);
      // A later decision on the stored state, at the same time and at the far end of time.
      for (int64_t later : {now, kMax}) {
        const Decision again = Decide(c, kId, d.next, 5, Mode::kReserve, later);
        if (again.retry_at_us) {
          EXPECT_GE(*again.retry_at_us, later);
        }
      }
    }
  }
}

// ---- Invariants at every magnitude --------------------------------------------------------

struct Magnitude {
  LimitKind kind;
  double rate;
  int64_t period_us;
};

std::string Name(const ::testing::TestParamInfo<Magnitude>& info) {
  std::string rate = std::to_string(static_cast<long double>(info.param.rate));
  for (char& ch : rate) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return std::string(info.param.kind == LimitKind::kTokenBucket ? "bucket" : "window") + "_rate" +
         rate + "_period" + std::to_string(info.param.period_us);
}

class AlgebraMagnitudeTest : public ::testing::TestWithParam<Magnitude> {};

// A walk of consumes and reservations across many periods, checking after every decision:
//  - a denial with a retry_at names a time after now, and a retry then succeeds;
//  - a reservation's retry_at is when its debt is paid: the balance is >= 0 then;
//  - a stored state's full_at is never before it is full: refilled at full_at it is at capacity.
TEST_P(AlgebraMagnitudeTest, RetryAtAndFullAtKeepTheirPromises) {
  const Magnitude m = GetParam();
  const double capacity = m.rate;
  const LimitConfig c = Config(m.kind, m.rate, m.period_us, capacity, capacity);
  const std::vector<double> fractions = {1.0, 0.37, 1e-3, 1.0 / 3, 0.999999, 1e-9, 0.5};
  std::optional<State> state;
  int64_t now = kT0 + 12345;
  int checked_retries = 0;
  for (int step = 0; step < 60; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step << " now " << now);
    const double fraction = fractions[step % fractions.size()];
    double count = capacity * fraction;
    if (count < 1 && capacity >= 1 && step % 3 == 0) count = 1;  // whole tokens too
    const Mode mode = step % 4 == 3 ? Mode::kReserve : Mode::kConsume;
    const Decision d = Decide(c, kId, state, count, mode, now);
    if (!d.allowed && d.retry_at_us) {
      EXPECT_GT(*d.retry_at_us, now) << "denied count " << count;
      const Decision retry = Decide(c, kId, state, count, mode, *d.retry_at_us);
      EXPECT_TRUE(retry.allowed) << "retry at retry_at of count " << count;
      ++checked_retries;
    }
    if (d.allowed && mode == Mode::kReserve) {
      ASSERT_TRUE(d.retry_at_us.has_value());
      EXPECT_GE(*d.retry_at_us, now);
      if (d.value < 0) {
        EXPECT_GT(*d.retry_at_us, now);
        const Decision paid = Decide(c, kId, d.next, count, Mode::kCheck, *d.retry_at_us);
        EXPECT_GE(paid.value, 0) << "balance at a reservation's retry_at";
      }
    }
    if (d.allowed && mode != Mode::kCheck) {
      state = d.next;
      ASSERT_GE(state->full_at_us, state->ts_us);
      if (state->full_at_us != std::numeric_limits<int64_t>::max()) {
        const Decision full = Decide(c, kId, state, count, Mode::kCheck, state->full_at_us);
        EXPECT_EQ(full.value, capacity) << "balance at full_at";
      }
    }
    // Several decisions at one time, small steps inside a window, sometimes a jump of periods.
    if (step % 5 == 4) {
      now += m.period_us * 2 + 7;
    } else if (step % 2 == 0) {
      now += std::max<int64_t>(1, m.period_us / 7);
    }
  }
  EXPECT_GT(checked_retries, 0);
}

std::vector<Magnitude> Magnitudes() {
  std::vector<Magnitude> out;
  for (LimitKind kind : {LimitKind::kTokenBucket, LimitKind::kFixedWindow}) {
    for (double rate : {1e-6, 1e-3, 0.1, 1.0, 7.0, 1e3, 1e6, 1e9, 1e12, 1e15}) {
      for (int64_t period : {int64_t{1}, kSecond, kDay, 100 * kYear}) {
        out.push_back({kind, rate, period});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllMagnitudes, AlgebraMagnitudeTest, ::testing::ValuesIn(Magnitudes()),
                         Name);

// The reported case: a fixed window of 1e12 per day, drained; a denied Consume must not be told
// to retry at the start of today, nor a reservation to run before its debt is paid.
TEST(AlgebraMagnitudeTest, LargeDailyWindowRetriesAtTheNextDay) {
  const LimitConfig c = Config(LimitKind::kFixedWindow, 1e12, kDay, {}, {});
  const int64_t now = kT0 + 13 * 3600 * kSecond;
  const int64_t today = now - now % kDay;
  const Decision drained = Decide(c, kId, std::nullopt, 1e12, Mode::kConsume, now);
  ASSERT_TRUE(drained.allowed);
  const Decision denied = Decide(c, kId, drained.next, 1, Mode::kConsume, now);
  ASSERT_FALSE(denied.allowed);
  EXPECT_EQ(*denied.retry_at_us, today + kDay);
  const Decision reserved = Decide(c, kId, drained.next, 1, Mode::kReserve, now);
  ASSERT_TRUE(reserved.allowed);
  EXPECT_EQ(*reserved.retry_at_us, today + kDay);
  EXPECT_EQ(reserved.next.full_at_us, today + 2 * kDay + 1);
}

}  // namespace
}  // namespace ratelimit
