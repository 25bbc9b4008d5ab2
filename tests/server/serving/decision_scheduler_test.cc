// DecisionScheduler (server/serving/decision_scheduler.h): which route a decision takes (the
// burst, a store thread, here), where synchronous store work runs, and how the store's errors
// reach a caller.
#include "server/serving/decision_scheduler.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"
#include "storage/state_store.h"
#include "tests/support/forwarding_store.h"
#include "tests/support/lease_test_ids.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::ForwardingStore;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TokenBucket;

// An in-memory store that counts its batch and asynchronous calls, and can claim that its
// batches wait for a peer (as Redis's do).
class CountingStore : public ForwardingStore {
 public:
  explicit CountingStore(bool batches_local) : batches_local_(batches_local) {}
  std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                  const Clock& clock) override {
    batch_calls.fetch_add(1);
    batch_ops.fetch_add(static_cast<int>(ops.size()));
    return ForwardingStore::ApplyBatch(ops, clock);
  }
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override {
    async_calls.fetch_add(1);
    async_thread = std::this_thread::get_id();
    ForwardingStore::ApplyAsync(op, clock, std::move(done));
  }
  bool BatchesDecideLocally() const override { return batches_local_; }
  std::vector<absl::StatusOr<LeaseOutcome>> ApplyLeaseBatch(
      absl::Span<const LeaseOperation* const> ops, const Clock& clock) override {
    lease_batch_calls.fetch_add(1);
    lease_batch_ops.fetch_add(static_cast<int>(ops.size()));
    return ForwardingStore::ApplyLeaseBatch(ops, clock);
  }
  void ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock, LeaseDone done) override {
    lease_async_calls.fetch_add(1);
    async_thread = std::this_thread::get_id();
    ForwardingStore::ApplyLeaseAsync(op, clock, std::move(done));
  }

  std::atomic<int> lease_batch_calls{0};
  std::atomic<int> lease_batch_ops{0};
  std::atomic<int> lease_async_calls{0};
  std::atomic<int> batch_calls{0};
  std::atomic<int> batch_ops{0};
  std::atomic<int> async_calls{0};
  std::thread::id async_thread;

 private:
  const bool batches_local_;
};

LimitRequests OneToken(const std::string& key) {
  LimitRequests limits;
  limits.push_back(LimitRequest{"api", key, TokenBucket(2, kSecond), 1});
  return limits;
}

TEST(DecisionSchedulerTest, BurstDecisionsWaitForTheBurstsEndAndShareOneStoreCall) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/true);
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  const LimitRequests limits = OneToken("k");
  std::unique_ptr<ServingLoop::Burst> burst = scheduler.NewBurst();
  std::vector<bool> allowed;
  for (int i = 0; i < 3; ++i) {
    scheduler.Decide(limits, Mode::kConsume, burst.get(), [&](absl::StatusOr<Verdict> v) {
      ASSERT_TRUE(v.ok()) << v.status();
      allowed.push_back(v->allowed);
    });
  }
  EXPECT_TRUE(allowed.empty()) << "decided before the burst ended";
  scheduler.EndBurst(*burst);
  // In arrival order, each seeing the earlier ones: a bucket of 2 allows two of three.
  EXPECT_EQ(allowed, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(store.batch_calls.load(), 1);
  EXPECT_EQ(store.batch_ops.load(), 3);
  EXPECT_EQ(store.async_calls.load(), 0);
}

// An acquire of one slot of a concurrency limit of 2.
LeaseOperation AcquireOne(absl::string_view lease_id) {
  LeaseOperation op;
  op.lease.key = StateKey{"jobs", "k"};
  op.lease.config.kind = LimitKind::kConcurrency;
  op.lease.config.capacity = 2;
  FillLeaseTtlDefaults(op.lease.config);
  op.lease.ttl_us = op.lease.config.lease_ttl_us;
  op.lease.lease_id = NamedId(lease_id);
  return op;
}

TEST(DecisionSchedulerTest, BurstLeaseOperationsWaitForTheBurstsEndAndShareOneStoreCall) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/true);
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  const std::vector<LeaseOperation> ops = {AcquireOne("a"), AcquireOne("b"), AcquireOne("c")};
  std::unique_ptr<ServingLoop::Burst> burst = scheduler.NewBurst();
  std::vector<bool> allowed;
  for (const LeaseOperation& op : ops) {
    scheduler.DecideLease(op, burst.get(), [&](absl::StatusOr<LeaseOutcome> outcome) {
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      allowed.push_back(outcome->allowed);
    });
  }
  EXPECT_TRUE(allowed.empty()) << "decided before the burst ended";
  scheduler.EndBurst(*burst);
  // In arrival order, each seeing the earlier ones: 2 slots allow two of three.
  EXPECT_EQ(allowed, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(store.lease_batch_calls.load(), 1);
  EXPECT_EQ(store.lease_batch_ops.load(), 3);
  EXPECT_EQ(store.lease_async_calls.load(), 0);
}

TEST(DecisionSchedulerTest, WithoutABurstALeaseOperationTakesTheStoresAsynchronousPathHere) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/true);
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  const LeaseOperation op = AcquireOne("a");
  std::optional<bool> allowed;
  scheduler.DecideLease(op, nullptr, [&](absl::StatusOr<LeaseOutcome> outcome) {
    allowed = outcome.ok() && outcome->allowed;
  });
  EXPECT_EQ(allowed, true);
  EXPECT_EQ(store.lease_async_calls.load(), 1);
  EXPECT_EQ(store.async_thread, std::this_thread::get_id());
  EXPECT_EQ(store.lease_batch_calls.load(), 0);
}

TEST(DecisionSchedulerTest, WithoutABurstADecisionTakesTheStoresAsynchronousPathHere) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/true);
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  const LimitRequests limits = OneToken("k");
  std::optional<bool> allowed;
  scheduler.Decide(limits, Mode::kConsume, nullptr,
                   [&](absl::StatusOr<Verdict> v) { allowed = v.ok() && v->allowed; });
  EXPECT_EQ(allowed, true);
  EXPECT_EQ(store.async_calls.load(), 1);
  EXPECT_EQ(store.async_thread, std::this_thread::get_id());
  EXPECT_EQ(store.batch_calls.load(), 0);
}

TEST(DecisionSchedulerTest, AStoreWhoseBatchesWaitForAPeerNeverDefersToTheBurst) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/false);
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  const LimitRequests limits = OneToken("k");
  std::unique_ptr<ServingLoop::Burst> burst = scheduler.NewBurst();
  int answered = 0;
  scheduler.Decide(limits, Mode::kConsume, burst.get(),
                   [&](absl::StatusOr<Verdict> v) { answered += v.ok() ? 1 : 0; });
  EXPECT_EQ(answered, 1) << "a decision on such a store must not wait for the burst";
  EXPECT_EQ(store.async_calls.load(), 1);
  scheduler.EndBurst(*burst);
  EXPECT_EQ(store.batch_calls.load(), 0);
}

TEST(DecisionSchedulerTest, BlockingWorkRunsOnAStoreThreadWithTheWriteHint) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/false);
  Limiter limiter(store, clock);
  StoreExecutor executor(2);
  DecisionScheduler scheduler(limiter, &executor);
  absl::Notification ran;
  std::thread::id worker;
  bool writes_here = false;
  scheduler.RunBlocking([&] {
    worker = std::this_thread::get_id();
    writes_here = StateStore::WritesHereScope::Active();
    ran.Notify();
  });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_NE(worker, std::this_thread::get_id());
  EXPECT_TRUE(writes_here);
}

TEST(DecisionSchedulerTest, WithoutStoreThreadsBlockingWorkRunsHere) {
  FakeClock clock;
  CountingStore store(/*batches_local=*/true);
  Limiter limiter(store, clock);
  StoreExecutor none(0);
  DecisionScheduler scheduler(limiter, &none);
  std::thread::id worker;
  scheduler.RunBlocking([&] { worker = std::this_thread::get_id(); });
  EXPECT_EQ(worker, std::this_thread::get_id());
}

TEST(DecisionSchedulerTest, StoreErrorsAreUnavailableUnlessTheCallersToChange) {
  const absl::Status io = absl::InternalError("disk full");
  EXPECT_FALSE(IsCallersError(io));
  const absl::Status answer = StoreUnavailable(io);
  EXPECT_EQ(answer.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answer.message(), "rate-limit store unavailable: disk full");
  EXPECT_TRUE(IsCallersError(absl::FailedPreconditionError("limits in different slots")));
}

}  // namespace
}  // namespace ratelimit
