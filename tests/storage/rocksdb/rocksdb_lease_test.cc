// Leases on the RocksDB store (storage/rocksdb/rocksdb_state_store_leases.cc): the lease store
// contract, leases surviving a restart, and at most `capacity` holders among many threads.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/storage/lease_store_contract.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's suite and helpers

class RocksDbLeaseEnv {
 public:
  void Open() {
    store_ = OpenRocksDbStore(dir_.path(), clock_);
    ASSERT_NE(store_, nullptr);
  }
  StateStore& store() { return *store_; }
  const Clock& clock() { return clock_; }
  void Advance(int64_t us) { clock_.Advance(us); }

 private:
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RocksDbStateStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(RocksDb, LeaseStoreContractTest, RocksDbLeaseEnv);

TEST(RocksDbLeaseTest, LeasesSurviveARestart) {
  TempDir dir;
  FakeClock clock;
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 2, "a");
  op.request_id = "req-1";
  Lease taken;
  {
    std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
    ASSERT_NE(store, nullptr);
    absl::StatusOr<LeaseOutcome> first = store->ApplyLease(LeaseOperation{op}, clock);
    ASSERT_TRUE(first.ok() && first->allowed) << first.status();
    taken = *first->lease.lease;
    op.request_id.clear();
    op.lease_id = "b";
    ASSERT_TRUE(store->ApplyLease(LeaseOperation{op}, clock)->allowed);
    ASSERT_TRUE(store->Close().ok());
  }
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  op.lease_id = "c";
  absl::StatusOr<LeaseOutcome> full = store->ApplyLease(LeaseOperation{op}, clock);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_FALSE(full->allowed);
  EXPECT_EQ(full->lease.held, 2);
  // The replay of the first acquire still answers its lease.
  op.request_id = "req-1";
  absl::StatusOr<LeaseOutcome> replay = store->ApplyLease(LeaseOperation{op}, clock);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(replay->lease.replayed);
  EXPECT_EQ(*replay->lease.lease, taken);
  // And they still expire by themselves.
  clock.Advance(kLeaseTtl);
  op.request_id.clear();
  EXPECT_TRUE(store->ApplyLease(LeaseOperation{op}, clock)->allowed);
}

// 1,000 threads, each acquiring a slot of a capacity-10 limit twice (retrying while refused),
// holding it a moment, and releasing it; a shared counter of holders, raised after each acquire
// and lowered before each release, never exceeds 10. The clock stands still, so no lease expires
// while held: any excess is the store's.
TEST(RocksDbLeaseTest, NeverMoreHoldersThanCapacityAmongAThousandThreads) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 1000;
  constexpr int kHoldsEach = 2;
  constexpr double kCapacity = 10;
  std::atomic<int> holders{0};
  std::atomic<int> most{0};
  std::atomic<int> errors{0};
  std::atomic<int> acquired{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int h = 0; h < kHoldsEach; ++h) {
        const std::string id = absl::StrCat("lease-", t, "-", h);
        LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, kCapacity, id);
        for (;;) {
          absl::StatusOr<LeaseOutcome> out = store->ApplyLease(LeaseOperation{op}, clock);
          if (!out.ok()) {
            ++errors;
            return;
          }
          if (out->allowed) break;
          std::this_thread::yield();
        }
        const int now_holding = ++holders;
        int seen = most.load();
        while (now_holding > seen && !most.compare_exchange_weak(seen, now_holding)) {
        }
        ++acquired;
        std::this_thread::yield();
        --holders;
        op.action = LeaseAction::kRelease;
        absl::StatusOr<LeaseOutcome> released = store->ApplyLease(LeaseOperation{op}, clock);
        if (!released.ok() || released->lease.state != LeaseState::kReleased) ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(acquired.load(), kThreads * kHoldsEach);
  EXPECT_LE(most.load(), 10);
  EXPECT_GT(most.load(), 1);  // the callers did overlap
  absl::StatusOr<LeaseOutcome> list =
      store->ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kList, kCapacity)}, clock);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->lease.held, 0);
}

}  // namespace
}  // namespace ratelimit
