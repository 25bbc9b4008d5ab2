#ifndef RATELIMIT_TESTS_SUPPORT_ALGEBRA_VECTORS_H_
#define RATELIMIT_TESTS_SUPPORT_ALGEBRA_VECTORS_H_

// One table of decisions with their exact answers, run through both implementations of the
// algebra: storage/algebra.cc (tests/storage/algebra_test.cc) and the Redis function library
// storage/redis/ratelimit.lua on a real redis-server (tests/storage/redis/redis_lua_test.cc).
//
// Every expected value below is worked out by hand from the formulas of README "Semantics" and
// the rounding rules of storage/algebra.h, never by calling the code under test: each vector
// says how. Inputs are chosen so that the arithmetic is exact in binary floating point (rates of
// 10 per second refill 1e-5 tokens per microsecond; sums of small integers and halves), so the
// expected doubles are exact too. Fixed windows set `start_us`, and no vector has jitter, so the
// limit's name and key (kVectorId) play no part.
//
// The library computes the verdict and the states it writes (value, ts, full_at, and a fixed
// window's counted_against: the capacity its value is counted against); retry_at and
// the reasons are the C++ algebra's alone. A vector's `next` is what both write.

#include <cstdint>
#include <optional>

#include "storage/algebra.h"
#include "storage/limit_config.h"

namespace ratelimit::testing {

struct AlgebraVector {
  const char* name;  // what the vector shows
  // Inputs of Decide.
  LimitConfig config;
  std::optional<State> current;  // the stored state; nullopt: none (a full one)
  double count;
  Mode mode;
  int64_t now_us;
  // Its exact answer.
  bool allowed;
  DenyReason reason;
  double value;
  std::optional<int64_t> retry_at_us;
  std::optional<State> next;  // the state written: set when allowed and not a check
};

// The limit every vector decides (only jitter and an unset fixed-window start would use it).
inline constexpr LimitId kVectorId{"vector", "k"};

namespace algebra_vectors {

inline constexpr int64_t kUs = 1000000;  // one second
inline constexpr int64_t kDay = 86400 * kUs;
// 2100-01-01T00:00:00Z, 47482 days after the epoch: a midnight. In the future, so that the
// states the library writes do not expire at once, and well below its horizon of 2^53 us.
inline constexpr int64_t kDayStart = int64_t{4102444800} * kUs;
// 2100-01-01T22:13:20Z: 80000 s into that day.
inline constexpr int64_t kT = kDayStart + 80000 * kUs;

constexpr LimitConfig Bucket(double rate, int64_t period_us,
                             std::optional<double> capacity = std::nullopt,
                             std::optional<double> max_reserved = std::nullopt) {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = rate;
  c.period_us = period_us;
  c.capacity = capacity;
  c.max_reserved = max_reserved;
  return c;
}

constexpr LimitConfig Window(double rate, int64_t period_us, int64_t start_us) {
  LimitConfig c;
  c.kind = LimitKind::kFixedWindow;
  c.rate = rate;
  c.period_us = period_us;
  c.start_us = start_us;
  return c;
}

// 10 tokens per second, capacity 10 (unset: the rate), max_reserved unset (unbounded).
inline constexpr LimitConfig kTenPerSecond = Bucket(10, kUs);
inline constexpr LimitConfig kTenPerSecondCapacity4 = Bucket(10, kUs, 4);
inline constexpr LimitConfig kTenPerSecondMaxReserved2 = Bucket(10, kUs, std::nullopt, 2);
inline constexpr LimitConfig kTenPerSecondNoReservations = Bucket(10, kUs, std::nullopt, 0);
// 1 token per second, capacity 5.
inline constexpr LimitConfig kOnePerSecondCapacity5 = Bucket(1, kUs, 5);
// 3 per UTC day (windows start at midnight), and the same with windows starting at 01:00.
inline constexpr LimitConfig kThreePerDay = Window(3, kDay, 0);
inline constexpr LimitConfig kThreePerDayFrom1am = Window(3, kDay, 3600 * kUs);
// 20 and 50 per UTC day.
inline constexpr LimitConfig kTwentyPerDay = Window(20, kDay, 0);
inline constexpr LimitConfig kFiftyPerDay = Window(50, kDay, 0);

// Token bucket notes. A balance v at ts refills to min(v + (t - ts) * rate / period, capacity) at
// t. full_at: the first t at which that reaches capacity, plus 1 us; here capacity - v = m tokens
// take m * 100000 us exactly (t - 1 us still lacks 1e-5 tokens), so full_at = ts + m * 100000 + 1.
// retry_at: the first t at which the balance covers the count, found the same way.
//
// Fixed window notes. A window's balance gains `rate` per whole period since its start, capped
// at capacity; retry_at and full_at are the first boundaries (window start + k * period) at
// which the balance is enough, full_at plus 1 us.
inline constexpr AlgebraVector kAlgebraVectors[] = {
    // --- Token bucket -------------------------------------------------------------------------
    {"MissingStateIsFullAndConsumeTakesOne", kTenPerSecond, std::nullopt, 1, Mode::kConsume, kT,
     // 10 - 1 = 9; 1 token short of full: full_at = kT + 100000 + 1.
     true, DenyReason::kNone, 9, std::nullopt, State{9, kT, kT + 100001}},
    {"RefillOverHalfASecondThenTakeFive", kTenPerSecond, State{2, kT, kT + 800001}, 5,
     Mode::kConsume, kT + 500000,
     // 2 + 500000 * 10 / 1e6 = 7, minus 5 is 2; 8 short of full: + 800001.
     true, DenyReason::kNone, 2, std::nullopt, State{2, kT + 500000, kT + 500000 + 800001}},
    {"RefillStopsAtCapacity", kTenPerSecondCapacity4, State{1, kT, kT + 300001}, 1, Mode::kConsume,
     kT + 60 * kUs,
     // min(1 + 600, 4) = 4, minus 1 is 3; 1 short of full: + 100001.
     true, DenyReason::kNone, 3, std::nullopt, State{3, kT + 60 * kUs, kT + 60 * kUs + 100001}},
    {"CapacityAboveRateTakesItAll", kOnePerSecondCapacity5, std::nullopt, 5, Mode::kConsume, kT,
     // 5 - 5 = 0; 5 tokens at 1 per second: full_at = kT + 5 s + 1.
     true, DenyReason::kNone, 0, std::nullopt, State{0, kT, kT + 5 * kUs + 1}},
    {"ClockSteppingBackRefillsNothingAndKeepsTs", kTenPerSecond, State{5, kT, kT + 500001}, 1,
     Mode::kConsume, kT - kUs,
     // Elapsed time counts as 0 and ts stays kT: 5 - 1 = 4; 6 short of full: + 600001.
     true, DenyReason::kNone, 4, std::nullopt, State{4, kT, kT + 600001}},
    {"HalfATokenShortRetriesFiftyMillisecondsLater", kTenPerSecond, State{0.5, kT, kT + 950001}, 1,
     Mode::kConsume, kT,
     // 0.5 more tokens at 10 per second: 50000 us. Nothing taken, nothing written.
     false, DenyReason::kInsufficientTokens, 0.5, kT + 50000, std::nullopt},
    {"ThreeTokensShortRetriesWhenTheyHaveRefilled", kTenPerSecond, State{2, kT, kT + 800001}, 5,
     Mode::kConsume, kT,
     // 3 more tokens: 300000 us.
     false, DenyReason::kInsufficientTokens, 2, kT + 300000, std::nullopt},
    {"ABalanceOneUlpShortOfTheCountIsEnough", kTenPerSecond,
     State{0x1.3ffffffffffffp+2 /* 5 - 2^-50 */, kT, kT + 500001}, 5, Mode::kConsume, kT,
     // Short by 2^-50, below the tolerance 4 * 2^-52 * max(capacity 10, count 5) = 40 * 2^-52:
     // allowed, and the balance is max(0, -2^-50) = 0; 10 short of full: + 1000001.
     true, DenyReason::kNone, 0, std::nullopt, State{0, kT, kT + 1000001}},
    {"ABalanceShortByMoreThanTheToleranceIsDenied", kTenPerSecond,
     State{0x1.3fffffffffff0p+2 /* 5 - 2^-46 */, kT, kT + 500001}, 5, Mode::kConsume, kT,
     // Short by 2^-46 > 40 * 2^-52: denied. One microsecond adds 1e-5 tokens, enough.
     false, DenyReason::kInsufficientTokens, 0x1.3fffffffffff0p+2, kT + 1, std::nullopt},
    {"CountAboveCapacityIsDeniedWithoutARetryAt", kTenPerSecond, std::nullopt, 11, Mode::kConsume,
     kT,
     // 11 > capacity 10: no amount of waiting helps. The balance is the full 10.
     false, DenyReason::kCountExceedsCapacity, 10, std::nullopt, std::nullopt},
    {"CheckAnswersLikeConsumeAndWritesNothing", kTenPerSecond, State{2, kT, kT + 800001}, 1,
     Mode::kCheck, kT + 100000,
     // 2 + 100000 * 10 / 1e6 = 3 covers 1; a check reports the balance as it is.
     true, DenyReason::kNone, 3, std::nullopt, std::nullopt},
    {"CheckDeniedSaysWhenToRetry", kTenPerSecond, State{0.5, kT, kT + 950001}, 1, Mode::kCheck, kT,
     // As the consume above: 50000 us.
     false, DenyReason::kInsufficientTokens, 0.5, kT + 50000, std::nullopt},
    {"ReservationWithinTheBalanceRunsNow", kTenPerSecond, std::nullopt, 4, Mode::kReserve, kT,
     // 10 - 4 = 6, no debt: retry_at (when the work may run) is now; 4 short of full: + 400001.
     true, DenyReason::kNone, 6, kT, State{6, kT, kT + 400001}},
    {"ReservationGoesIntoDebtAndRunsWhenItIsPaid", kTenPerSecond, State{2, kT, kT + 800001}, 5,
     Mode::kReserve, kT,
     // 2 - 5 = -3: the debt is paid 300000 us later; 13 short of full: + 1300001.
     true, DenyReason::kNone, -3, kT + 300000, State{-3, kT, kT + 1300001}},
    {"UnboundedReservationAboveCapacity", kTenPerSecond, std::nullopt, 15, Mode::kReserve, kT,
     // 10 - 15 = -5: paid after 500000 us; 15 short of full: + 1500001.
     true, DenyReason::kNone, -5, kT + 500000, State{-5, kT, kT + 1500001}},
    {"ReservationDeeperThanMaxReservedIsDenied", kTenPerSecondMaxReserved2,
     State{2, kT, kT + 800001}, 5, Mode::kReserve, kT,
     // 2 - 5 = -3 is below -2: retry once the balance is 3 (3 - 5 = -2), 100000 us later.
     false, DenyReason::kMaxReservedExceeded, 2, kT + 100000, std::nullopt},
    {"MaxReservedZeroMeansNoReservations", kTenPerSecondNoReservations, State{2, kT, kT + 800001},
     5, Mode::kReserve, kT,
     // The floor is 0: retry once the balance is 5, 300000 us later.
     false, DenyReason::kMaxReservedExceeded, 2, kT + 300000, std::nullopt},
    {"CountAboveCapacityPlusMaxReservedIsNeverReservable", kTenPerSecondMaxReserved2, std::nullopt,
     13, Mode::kReserve, kT,
     // 13 > 10 + 2.
     false, DenyReason::kCountExceedsCapacity, 10, std::nullopt, std::nullopt},

    // --- Fixed window -------------------------------------------------------------------------
    {"WindowMissingStateStartsFullInTheCurrentWindow", kThreePerDay, std::nullopt, 1,
     Mode::kConsume, kT,
     // The window of kT starts at kDayStart: 3 - 1 = 2; full again at the next boundary + 1.
     true, DenyReason::kNone, 2, std::nullopt, State{2, kDayStart, kDayStart + kDay + 1, 3}},
    {"WindowStartOffsetsTheBoundaries", kThreePerDayFrom1am, std::nullopt, 1, Mode::kConsume, kT,
     // kT is 80000 s into its UTC day, 76400 s after 01:00: the window starts at kT - 76400 s.
     true, DenyReason::kNone, 2, std::nullopt,
     State{2, kT - 76400 * kUs, kT - 76400 * kUs + kDay + 1, 3}},
    {"ExhaustedWindowRetriesAtTheNextBoundary", kThreePerDay,
     State{0, kDayStart, kDayStart + kDay + 1}, 1, Mode::kConsume, kT, false,
     DenyReason::kInsufficientTokens, 0, kDayStart + kDay, std::nullopt},
    {"NextWindowRefillsByTheRate", kThreePerDay, State{0, kDayStart, kDayStart + kDay + 1}, 3,
     Mode::kConsume, kDayStart + kDay + 5,
     // One whole period: 0 + 3 = 3, window kDayStart + kDay; 3 - 3 = 0, full a window later.
     true, DenyReason::kNone, 0, std::nullopt,
     State{0, kDayStart + kDay, kDayStart + 2 * kDay + 1, 3}},
    {"UnusedWindowsAccumulateUpToCapacity", kThreePerDay, State{1, kDayStart, kDayStart + kDay + 1},
     1, Mode::kConsume, kDayStart + 2 * kDay + 7,
     // Two periods: min(1 + 6, 3) = 3; 3 - 1 = 2.
     true, DenyReason::kNone, 2, std::nullopt,
     State{2, kDayStart + 2 * kDay, kDayStart + 3 * kDay + 1, 3}},
    {"WindowClockSteppingBackAddsNoWindow", kThreePerDay, State{0, kDayStart, kDayStart + kDay + 1},
     1, Mode::kConsume, kDayStart - 5 * kUs,
     // floor(-5 s / 1 day) = -1 counts as 0 windows: still empty, retry at the next boundary.
     false, DenyReason::kInsufficientTokens, 0, kDayStart + kDay, std::nullopt},
    {"WindowCountAboveCapacityIsDeniedWithoutARetryAt", kThreePerDay, std::nullopt, 4,
     Mode::kConsume, kT, false, DenyReason::kCountExceedsCapacity, 3, std::nullopt, std::nullopt},
    {"WindowCheckReportsTheBalance", kThreePerDay, State{1, kDayStart, kDayStart + kDay + 1}, 1,
     Mode::kCheck, kT, true, DenyReason::kNone, 1, std::nullopt, std::nullopt},
    {"WindowReservationRunsInTheWindowThatPaysTheDebt", kThreePerDay,
     State{1, kDayStart, kDayStart + kDay + 1}, 3, Mode::kReserve, kT,
     // 1 - 3 = -2: the next window brings it to 1 >= 0; full (3) two windows later: -2 + 6.
     true, DenyReason::kNone, -2, kDayStart + kDay,
     State{-2, kDayStart, kDayStart + 2 * kDay + 1, 3}},

    // --- Fixed window whose capacity changed (a reload): the count taken is kept ----------------
    {"WindowCutKeepsTheCountTaken", kTwentyPerDay, State{20, kDayStart, kDayStart + kDay + 1, 50},
     1, Mode::kConsume, kT,
     // 30 of 50 taken: 20 + (20 - 50) = -10, never below zero for a cut: 0. Denied until the
     // next window, which opens with the new capacity.
     false, DenyReason::kInsufficientTokens, 0, kDayStart + kDay, std::nullopt},
    {"WindowRaiseKeepsTheCountTaken", kFiftyPerDay, State{4, kDayStart, kDayStart + kDay + 1, 5}, 1,
     Mode::kConsume, kT,
     // 1 of 5 taken: 4 + (50 - 5) = 49, minus 1 is 48, counted against 50 from now on.
     true, DenyReason::kNone, 48, std::nullopt, State{48, kDayStart, kDayStart + kDay + 1, 50}},
    {"WindowCutKeepsADebtAsItIs", kTwentyPerDay, State{-1, kDayStart, kDayStart + kDay + 1, 50}, 1,
     Mode::kCheck, kT,
     // A debt of 1 under a cut: max(-1 - 30, min(-1, 0)) = -1; the next window brings 19.
     false, DenyReason::kInsufficientTokens, -1, kDayStart + kDay, std::nullopt},
    {"WindowOfAnEarlierWindowRefillsUnderTheNewCapacity", kTwentyPerDay,
     State{0, kDayStart - kDay, kDayStart + 1, 50}, 20, Mode::kConsume, kT,
     // 50 taken yesterday: 0 + (20 - 50) floors at 0; one window refills 20: all 20 today.
     true, DenyReason::kNone, 0, std::nullopt, State{0, kDayStart, kDayStart + kDay + 1, 20}},
};

}  // namespace algebra_vectors

using algebra_vectors::kAlgebraVectors;

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_ALGEBRA_VECTORS_H_
