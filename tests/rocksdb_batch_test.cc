// RocksDbStateStore::ApplyBatch, which decides a batch a chunk of operations at a time under the
// stripes of all the chunk's keys and queues each chunk with one append: the answers and the
// stored states are those of the same operations applied one by one, across chunk boundaries and
// a reopen, and callers deciding the same keys meanwhile never make it over-grant.

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::GetOrDie;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::OpenRocksDbStore;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TokenBucket;

// A random batch: 1..3 limits per operation over a handful of keys (so operations of one chunk
// and of different chunks share keys, and an operation may name one key twice), every mode,
// counts from small to over capacity, reservations allowed some debt.
struct RandomBatch {
  std::vector<std::vector<LimitOp>> limits;
  std::vector<Operation> ops;
};

RandomBatch MakeRandomBatch(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  RandomBatch b;
  b.limits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int limits = 1 + static_cast<int>(rng() % 3);
    for (int l = 0; l < limits; ++l) {
      LimitOp op;
      op.key = StateKey{rng() % 4 == 0 ? "daily" : "api", "k" + std::to_string(rng() % 5),
                        LimitSource::kDefined};
      op.config = op.key.name == "daily" ? TokenBucket(50, 3600 * kSecond, 50, 10)
                                         : TokenBucket(10, kSecond, 10, 5);
      op.count = 1 + static_cast<double>(rng() % 12);
      b.limits[i].push_back(op);
    }
  }
  b.ops.resize(n);
  for (size_t i = 0; i < n; ++i) {
    b.ops[i].limits = b.limits[i];
    const uint32_t m = rng() % 6;
    b.ops[i].mode = m < 3 ? Mode::kConsume : m < 5 ? Mode::kReserve : Mode::kCheck;
  }
  return b;
}

void ExpectSameOutcome(const Outcome& got, const Outcome& want, size_t i) {
  EXPECT_EQ(got.allowed, want.allowed) << "operation " << i;
  EXPECT_EQ(got.now_us, want.now_us) << "operation " << i;
  ASSERT_EQ(got.decisions.size(), want.decisions.size()) << "operation " << i;
  for (size_t d = 0; d < want.decisions.size(); ++d) {
    EXPECT_EQ(got.decisions[d].allowed, want.decisions[d].allowed) << i << "/" << d;
    EXPECT_EQ(got.decisions[d].reason, want.decisions[d].reason) << i << "/" << d;
    EXPECT_EQ(got.decisions[d].value, want.decisions[d].value) << i << "/" << d;  // bit for bit
    EXPECT_EQ(got.decisions[d].retry_at_us, want.decisions[d].retry_at_us) << i << "/" << d;
  }
}

TEST(RocksDbBatchTest, ABatchAcrossChunksAnswersAndStoresAsItsOperationsOneByOne) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenRocksDbStore(dir.File("db"), clock);
  ASSERT_NE(store, nullptr);
  MemoryStateStore reference;
  for (uint32_t round = 0; round < 4; ++round) {
    // 150 operations: several chunks, the last one partial.
    const RandomBatch batch = MakeRandomBatch(1000 + round, 150);
    std::vector<absl::StatusOr<Outcome>> got = store->ApplyBatch(batch.ops, clock);
    ASSERT_EQ(got.size(), batch.ops.size());
    for (size_t i = 0; i < batch.ops.size(); ++i) {
      absl::StatusOr<Outcome> want = ApplyWithUpdate(reference, batch.ops[i], clock);
      ASSERT_OK(want);
      ASSERT_TRUE(got[i].ok()) << "operation " << i << ": " << got[i].status();
      ExpectSameOutcome(*got[i], *want, i);
    }
    clock.Advance(kSecond / 3);
  }
  // What was acknowledged is what is stored, also after a reopen.
  store.reset();
  store = OpenRocksDbStore(dir.File("db"), clock);
  ASSERT_NE(store, nullptr);
  for (const char* name : {"api", "daily"}) {
    for (int k = 0; k < 5; ++k) {
      const StateKey key{name, "k" + std::to_string(k), LimitSource::kDefined};
      const std::optional<State> want = GetOrDie(reference, key);
      const std::optional<State> got = GetOrDie(*store, key);
      ASSERT_EQ(got.has_value(), want.has_value()) << name << k;
      if (want) {
        EXPECT_EQ(got->value, want->value) << name << k;
        EXPECT_EQ(got->ts_us, want->ts_us) << name << k;
      }
    }
  }
}

TEST(RocksDbBatchTest, CallersDecidingTheBatchKeysMeanwhileNeverMakeItOverGrant) {
  // 3000 tokens that do not refill; batches of 100 single takes and single takes from two other
  // threads race for them: exactly 3000 are granted, and 0 remain, also after a reopen.
  TempDir dir;
  FakeClock clock;
  auto store = OpenRocksDbStore(dir.File("db"), clock);
  ASSERT_NE(store, nullptr);
  const StateKey hot{"api", "hot", LimitSource::kDefined};
  const LimitConfig config = TokenBucket(1, 1000 * 3600 * kSecond, 3000);
  const std::vector<LimitOp> one = {LimitOp{hot, config, 1, std::nullopt}};
  std::atomic<int64_t> granted{0};
  std::atomic<int64_t> failed{0};
  auto batches = [&] {
    std::vector<Operation> ops(100);
    for (Operation& op : ops) op.limits = one;
    for (int b = 0; b < 20; ++b) {
      for (const absl::StatusOr<Outcome>& r : store->ApplyBatch(ops, clock)) {
        if (!r.ok()) ++failed;
        if (r.ok() && r->allowed) ++granted;
      }
    }
  };
  auto singles = [&] {
    Operation op;
    op.limits = one;
    for (int i = 0; i < 1000; ++i) {
      absl::StatusOr<Outcome> r = store->Apply(op, clock);
      if (!r.ok()) ++failed;
      if (r.ok() && r->allowed) ++granted;
    }
  };
  std::thread a(batches);
  std::thread b(batches);
  std::thread c(singles);
  std::thread d(singles);
  a.join();
  b.join();
  c.join();
  d.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(granted.load(), 3000);  // 6000 asked
  store.reset();
  store = OpenRocksDbStore(dir.File("db"), clock);
  ASSERT_NE(store, nullptr);
  const std::optional<State> left = GetOrDie(*store, hot);
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(left->value, 0);
}

}  // namespace
}  // namespace ratelimit
