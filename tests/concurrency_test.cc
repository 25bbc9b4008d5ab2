// The over-grant test: 64 concurrent callers on one key, burst 10, rate 10/s, for 3 s of
// (virtual) time must be allowed at most 10 + 10 * 3 = 40 times, and no fewer than 38.
#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TickingClock;

constexpr int64_t kStart = 1700000000LL * kSecond;

// 64 threads call `mode` on one key, burst 10, rate 10/s, with a RocksDB store in a temporary
// directory, until 3 s of virtual time have passed (every decision moves the clock on by
// 150 us: about 20,000 decisions). `on_result` sees every answer.
void RunSixtyFourCallers(std::optional<double> max_reserved, Mode mode,
                         const std::function<void(const absl::StatusOr<Verdict>&)>& on_result) {
  TempDir dir;
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
  req.config.max_reserved = max_reserved;

  std::vector<std::thread> callers;
  for (int i = 0; i < 64; ++i) {
    callers.emplace_back([&] {
      while (clock.Peek() < kStart + 3 * kSecond) on_result(limiter.Evaluate({req}, mode));
    });
  }
  for (auto& t : callers) t.join();
}

TEST(OverGrantTest, SixtyFourCallersOneKeyRocksDb) {
  std::atomic<int> allowed{0}, denied{0}, errors{0};
  RunSixtyFourCallers(std::nullopt, Mode::kConsume, [&](const absl::StatusOr<Verdict>& v) {
    if (!v.ok()) {
      ++errors;
    } else if (v->allowed) {
      ++allowed;
    } else {
      ++denied;
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(allowed.load(), 40);
  EXPECT_GE(allowed.load(), 38);
  EXPECT_GT(denied.load(), 1000);  // the callers really did contend
}

TEST(OverGrantTest, ReservationsNeverOweMoreThanMaxReserved) {
  // Same contention with reservations: the debt never exceeds max_reserved, and what is handed
  // out (consumed plus reserved) stays within capacity + rate * T + max_reserved.
  std::atomic<int> granted{0};
  std::atomic<bool> debt_exceeded{false};
  RunSixtyFourCallers(5, Mode::kReserve, [&](const absl::StatusOr<Verdict>& v) {
    if (v.ok() && v->allowed) {
      ++granted;
      if (v->decisions[0].value < -5 - 1e-9) debt_exceeded = true;
    }
  });
  EXPECT_FALSE(debt_exceeded.load());
  EXPECT_LE(granted.load(), 45);
  EXPECT_GE(granted.load(), 43);
}

}  // namespace
}  // namespace ratelimit
