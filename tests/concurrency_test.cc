// The over-grant test: 64 concurrent callers on one key, burst 10, rate 10/s, for 3 s of
// (virtual) time must be allowed at most 10 + 10 * 3 = 40 times, and no fewer than 38.
#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/rocksdb_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TickingClock;

constexpr int64_t kStart = 1700000000LL * kSecond;

TEST(OverGrantTest, SixtyFourCallersOneKeyRocksDb) {
  TempDir dir;
  // Every decision moves time on by 150 us: about 20,000 decisions cover the 3 s.
  TickingClock clock(kStart, 150);
  RocksDbStateStoreOptions options;
  options.path = dir.path() + "/db";
  options.clock = &clock;
  auto store = RocksDbStateStore::Open(options);
  ASSERT_OK(store);
  Limiter limiter(**store, clock);

  LimitRequest req;
  req.name = "overgrant";
  req.key = "hot";
  req.config.kind = LimitKind::kTokenBucket;
  req.config.rate = 10;
  req.config.period_us = kSecond;
  req.config.capacity = 10;

  std::atomic<int> allowed{0}, denied{0}, errors{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 64; ++i) {
    callers.emplace_back([&] {
      while (clock.Peek() < kStart + 3 * kSecond) {
        auto v = limiter.Evaluate({req}, Mode::kConsume);
        if (!v.ok()) {
          ++errors;
        } else if (v->allowed) {
          ++allowed;
        } else {
          ++denied;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(allowed.load(), 40);
  EXPECT_GE(allowed.load(), 38);
  EXPECT_GT(denied.load(), 1000);  // the callers really did contend
}

TEST(OverGrantTest, ReservationsNeverOweMoreThanMaxReserved) {
  // Same contention with reservations: the debt never exceeds max_reserved, and what is handed
  // out (consumed plus reserved) stays within capacity + rate * T + max_reserved.
  TempDir dir;
  TickingClock clock(kStart, 150);
  RocksDbStateStoreOptions options;
  options.path = dir.path() + "/db";
  options.clock = &clock;
  auto store = RocksDbStateStore::Open(options);
  ASSERT_OK(store);
  Limiter limiter(**store, clock);

  LimitRequest req;
  req.name = "reserve";
  req.key = "hot";
  req.config.kind = LimitKind::kTokenBucket;
  req.config.rate = 10;
  req.config.period_us = kSecond;
  req.config.capacity = 10;
  req.config.max_reserved = 5;

  std::atomic<int> granted{0};
  std::atomic<bool> debt_exceeded{false};
  std::vector<std::thread> callers;
  for (int i = 0; i < 64; ++i) {
    callers.emplace_back([&] {
      while (clock.Peek() < kStart + 3 * kSecond) {
        auto v = limiter.Evaluate({req}, Mode::kReserve);
        if (v.ok() && v->allowed) {
          ++granted;
          if (v->decisions[0].value < -5 - 1e-9) debt_exceeded = true;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_FALSE(debt_exceeded.load());
  EXPECT_LE(granted.load(), 45);
  EXPECT_GE(granted.load(), 43);
}

}  // namespace
}  // namespace ratelimit
