// ApplyLeaseWithRecords (storage/leases/apply_lease.h): the lease store contract
// (tests/storage/lease_store_contract.h) on the memory store, the record keys, and a lease set
// whose leases outlive the record expiry the current config would give it; DecideLeaseOperation's
// carried summary when a rate limit denies.

#include "storage/leases/apply_lease.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/memory/memory_state_store.h"
#include "tests/storage/lease_store_contract.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's suite and helpers

class MemoryLeaseEnv {
 public:
  void Open() { store_ = std::make_unique<MemoryStateStore>(); }
  StateStore& store() { return *store_; }
  const Clock& clock() { return clock_; }
  void Advance(int64_t us) { clock_.Advance(us); }

 private:
  FakeClock clock_;
  std::unique_ptr<MemoryStateStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(Memory, LeaseStoreContractTest, MemoryLeaseEnv);

TEST(LeaseRecordKeyTest, KeysOfOneLimitShareItsPrefixAndNoOtherLimitsOrRecords) {
  const std::string jobs = LeaseRecordPrefix(LimitSource::kDefined, "jobs");
  EXPECT_TRUE(absl::StartsWith(LeaseRecordKey(StateKey{"jobs", "t1"}), jobs));
  EXPECT_TRUE(absl::StartsWith(LeaseRecordKey(StateKey{"jobs", ""}), jobs));
  // A name that extends another, a key that looks like a name, another source: other prefixes.
  EXPECT_FALSE(absl::StartsWith(LeaseRecordKey(StateKey{"jobs2", "t1"}), jobs));
  EXPECT_FALSE(absl::StartsWith(LeaseRecordKey(StateKey{"job", "st1"}), jobs));
  EXPECT_FALSE(
      absl::StartsWith(LeaseRecordKey(StateKey{"jobs", "t1", LimitSource::kInline}), jobs));
  EXPECT_NE(LeaseRecordKey(StateKey{"ab", "c"}), LeaseRecordKey(StateKey{"a", "bc"}));
  // The service's other records start with q, s or e.
  EXPECT_EQ(LeaseRecordKey(StateKey{"jobs", "t1"})[0], 'L');
}

// Each decision is numbered when made (LeaseDecision::seq): a later one, on any key, larger.
TEST(ApplyLeaseTest, NumbersEachDecisionAboveTheOnesBefore) {
  MemoryStateStore store;
  FakeClock clock;
  uint64_t last = 0;
  for (const LeaseOp& op : {LeaseOpOf(LeaseAction::kAcquire, 2, "a"),
                            LeaseOpOf(LeaseAction::kAcquire, 2, "b", "jobs", "other"),
                            LeaseOpOf(LeaseAction::kRelease, 2, "a")}) {
    absl::StatusOr<LeaseOutcome> out = store.ApplyLease(LeaseOperation{op}, clock);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_GT(out->lease.seq, last);
    last = out->lease.seq;
  }
}

TEST(ApplyLeaseTest, ALeaseOutlivingTheConfiguredMaxTtlKeepsItsRecord) {
  MemoryStateStore store;
  FakeClock clock;
  // Acquired under a max TTL of 100 s, then the limit's max TTL is lowered to 1 s.
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 1, "a");
  op.config.max_lease_ttl_us = 100 * kSecond;
  op.ttl_us = 100 * kSecond;
  ASSERT_TRUE(store.ApplyLease(LeaseOperation{op}, clock)->allowed);
  op.config.max_lease_ttl_us = kSecond;
  op.config.lease_ttl_us = kSecond;
  op.ttl_us = kSecond;
  op.lease_id = NamedId("b");
  op.config.capacity = 2;
  absl::StatusOr<LeaseOutcome> second = store.ApplyLease(LeaseOperation{op}, clock);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->allowed);
  // Long after the lowered TTL (and its record margin), the first lease is still held.
  clock.Advance(50 * kSecond);
  ASSERT_TRUE(store.CollectGarbage().ok());
  op.action = LeaseAction::kList;
  absl::StatusOr<LeaseOutcome> list = store.ApplyLease(LeaseOperation{op}, clock);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->lease.held, 1);
}

TEST(ApplyLeaseTest, ARateDenialLeavesACarriedSummaryTrueOfTheSetAsRead) {
  // An acquire of a slot with 5 tokens of a bucket holding 1: the rate limit denies, so the slot
  // the lease decision took is given back, and the summary carried to the next decision with it.
  LimitOp rate;
  rate.key = StateKey{"calls", "tenant"};
  rate.config = TokenBucket(1, kSecond, 1);
  rate.count = 5;
  const LeaseOperation acquire{LeaseOpOf(LeaseAction::kAcquire, 1, "a"),
                               absl::MakeConstSpan(&rate, 1)};
  ASSERT_TRUE(ValidateLeaseOperation(acquire).ok());
  std::vector<std::optional<State>> current(1);
  std::vector<std::optional<State>> writes(1);
  LeaseSetSummary summary;
  const int64_t now = 1'000 * kSecond;
  LeaseOutcome denied;
  DecideLeaseOperation(acquire, DistinctKeys(acquire.limits), LeaseSet{}, current, now,
                       absl::MakeSpan(writes), summary, denied);
  ASSERT_FALSE(denied.allowed);
  EXPECT_EQ(denied.lease.held, 0);
  EXPECT_EQ(summary.held, 0);
  const LeaseOperation check{LeaseOpOf(LeaseAction::kCheck, 1, "")};
  LeaseOutcome after;
  DecideLeaseOperation(check, OperationKeys{}, std::move(denied.lease.next), {}, now, {}, summary,
                       after);
  EXPECT_EQ(after.lease.held, 0);
  EXPECT_TRUE(after.lease.allowed);
}

TEST(ApplyLeaseTest, AStoredSetThatDoesNotDecodeIsDataLoss) {
  MemoryStateStore store;
  FakeClock clock;
  const RecordSpec spec{LeaseRecordKey(StateKey{"jobs", "tenant"}), clock.NowMicros() + kSecond};
  ASSERT_TRUE(
      store
          .UpdateWithRecords({}, absl::MakeConstSpan(&spec, 1), clock,
                             [](auto, auto, auto, absl::Span<std::optional<std::string>> w) {
                               w[0] = "not a lease set";
                               return absl::OkStatus();
                             })
          .ok());
  EXPECT_EQ(store.ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 1, "a")}, clock)
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ratelimit
