// Concurrency limits on the Redis store (RedisStateStore::ApplyLease, storage/redis/leases.lua),
// on a standalone redis-server and on a Redis Cluster: acquire, release, extend, check, list,
// reset and their expiry at the store's clock, request_id replay, rate limits all-or-nothing with
// the lease, the lease set's keys and their expiry in Redis, bad input, and two stores on one
// cluster never holding more than capacity.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_lease_library.h"
#include "storage/redis/redis_state_store.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;

LimitConfig Slots(double capacity) {
  LimitConfig c;
  c.kind = LimitKind::kConcurrency;
  c.capacity = capacity;
  c.lease_ttl_us = 30 * kSecond;
  c.max_lease_ttl_us = 3600 * kSecond;
  return c;
}

LimitConfig Bucket(double rate, double capacity) {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = rate;
  c.period_us = kSecond;
  c.capacity = capacity;
  return c;
}

LeaseOp Op(const StateKey& key, double capacity, LeaseAction action, int64_t count = 1,
           int64_t ttl_us = 10 * kSecond, std::string lease_id = "") {
  LeaseOp op;
  op.key = key;
  op.config = Slots(capacity);
  op.action = action;
  op.count = count;
  op.ttl_us = ttl_us;
  op.lease_id = std::move(lease_id);
  return op;
}

class RedisLeasesTest : public ::testing::TestWithParam<RedisTopology> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = testing::StartRedisTestTarget(GetParam());
    ASSERT_OK(target);
    target_ = *std::move(target);
    // Ahead of the real clock: the sets' PEXPIREAT at fake times must lie in Redis' future.
    clock_.Set(SystemClock::Default().NowMicros() + 24 * 3600 * kSecond);
    auto store = testing::OpenRedisTestStore(target_, &clock_);
    ASSERT_OK(store);
    store_ = *std::move(store);
  }

  absl::StatusOr<LeaseOutcome> Run(const LeaseOp& lease, absl::Span<const LimitOp> limits = {}) {
    return store_->ApplyLease(LeaseOperation{lease, limits}, clock_);
  }

  // Acquires `count` slots of `key` as lease `id`; the outcome.
  LeaseOutcome Acquire(const StateKey& key, double capacity, const std::string& id,
                       int64_t count = 1, int64_t ttl_us = 10 * kSecond,
                       const std::string& request_id = "") {
    LeaseOp op = Op(key, capacity, LeaseAction::kAcquire, count, ttl_us, id);
    op.request_id = request_id;
    op.holder = "worker 7";
    auto out = Run(op);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : LeaseOutcome{};
  }

  LeaseDecision Lease(const StateKey& key, double capacity, LeaseAction action,
                      const std::string& id = "", int64_t ttl_us = 10 * kSecond) {
    auto out = Run(Op(key, capacity, action, 1, ttl_us, id));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->lease : LeaseDecision{};
  }

  RedisTestTarget target_;
  FakeClock clock_;
  std::unique_ptr<RedisStateStore> store_;
};

TEST_P(RedisLeasesTest, AcquiresUpToCapacityThenDeniesUntilTheSoonestExpiry) {
  const StateKey key{"jobs", "tenant1"};
  const int64_t t0 = clock_.NowMicros();
  LeaseOutcome a = Acquire(key, 3, "a", 2, 20 * kSecond);
  ASSERT_TRUE(a.allowed);
  ASSERT_TRUE(a.lease.lease.has_value());
  EXPECT_EQ(a.lease.lease->id, "a");
  EXPECT_EQ(a.lease.lease->count, 2);
  EXPECT_EQ(a.lease.lease->acquired_at_us, t0);
  EXPECT_EQ(a.lease.lease->expires_at_us, t0 + 20 * kSecond);
  EXPECT_EQ(a.lease.lease->holder, "worker 7");
  EXPECT_EQ(a.now_us, t0);
  EXPECT_EQ(a.lease.held, 2);
  EXPECT_EQ(a.lease.free, 1);

  LeaseOutcome b = Acquire(key, 3, "b", 1, 5 * kSecond);
  ASSERT_TRUE(b.allowed);
  EXPECT_EQ(b.lease.free, 0);

  LeaseOutcome c = Acquire(key, 3, "c", 2);
  EXPECT_FALSE(c.allowed);
  EXPECT_EQ(c.lease.reason, DenyReason::kNoFreeSlots);
  EXPECT_FALSE(c.lease.lease.has_value());
  // Two slots are free once "b" (1 slot, 5 s) and then "a" (2 slots, 20 s) expire.
  EXPECT_EQ(c.lease.retry_at_us, t0 + 20 * kSecond);
  EXPECT_EQ(c.lease.held, 3);

  LeaseOutcome d = Acquire(key, 3, "d", 4);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.lease.reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(d.lease.retry_at_us.has_value());

  // Check writes nothing and answers the same way.
  auto check = Run(Op(key, 3, LeaseAction::kCheck, 1));
  ASSERT_OK(check);
  EXPECT_FALSE(check->allowed);
  EXPECT_EQ(check->lease.retry_at_us, t0 + 5 * kSecond);
  EXPECT_FALSE(check->lease.write);
}

TEST_P(RedisLeasesTest, ReleaseFreesTheSlotsOnceAndAnUnknownLeaseIsNotHeld) {
  const StateKey key{"jobs", "tenant2"};
  ASSERT_TRUE(Acquire(key, 1, "a").allowed);
  EXPECT_FALSE(Acquire(key, 1, "b").allowed);
  LeaseDecision released = Lease(key, 1, LeaseAction::kRelease, "a");
  EXPECT_EQ(released.state, LeaseState::kReleased);
  EXPECT_EQ(released.held, 0);
  EXPECT_TRUE(released.write);
  LeaseDecision again = Lease(key, 1, LeaseAction::kRelease, "a");
  EXPECT_EQ(again.state, LeaseState::kNotHeld);
  EXPECT_FALSE(again.write);
  EXPECT_EQ(Lease(key, 1, LeaseAction::kExtend, "a").state, LeaseState::kNotHeld);
  EXPECT_EQ(Lease(key, 1, LeaseAction::kRelease, "nobody").state, LeaseState::kNotHeld);
  EXPECT_TRUE(Acquire(key, 1, "b").allowed);
}

TEST_P(RedisLeasesTest, ExtendKeepsALeasePastItsTtlAndAnUnextendedOneExpiresAsALeak) {
  const StateKey key{"jobs", "tenant3"};
  ASSERT_TRUE(Acquire(key, 2, "long", 1, 10 * kSecond).allowed);
  ASSERT_TRUE(Acquire(key, 2, "short", 1, 10 * kSecond).allowed);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(8 * kSecond);
    LeaseDecision extended = Lease(key, 2, LeaseAction::kExtend, "long", 10 * kSecond);
    ASSERT_EQ(extended.state, LeaseState::kHeld);
    ASSERT_TRUE(extended.lease.has_value());
    EXPECT_EQ(extended.lease->expires_at_us, clock_.NowMicros() + 10 * kSecond);
    // "short" expired at 10 s, unreleased: counted once, by the first decision that drops it.
    EXPECT_EQ(extended.expired_unreleased, i == 1 ? 1 : 0);
  }
  EXPECT_EQ(Lease(key, 2, LeaseAction::kRelease, "short").state, LeaseState::kNotHeld);
  auto list = Run(Op(key, 2, LeaseAction::kList));
  ASSERT_OK(list);
  ASSERT_EQ(list->lease.held_leases.size(), 1u);
  EXPECT_EQ(list->lease.held_leases[0].id, "long");
  EXPECT_EQ(list->lease.held, 1);
}

TEST_P(RedisLeasesTest, ARetriedAcquireWithItsRequestIdAnswersTheSameLease) {
  const StateKey key{"jobs", "tenant4"};
  LeaseOutcome first = Acquire(key, 2, "a", 1, 10 * kSecond, "req-1");
  ASSERT_TRUE(first.allowed);
  EXPECT_EQ(first.lease.lease->request_id, "req-1");
  LeaseOutcome retry = Acquire(key, 2, "b", 1, 10 * kSecond, "req-1");
  EXPECT_TRUE(retry.allowed);
  EXPECT_TRUE(retry.lease.replayed);
  EXPECT_EQ(retry.lease.lease, first.lease.lease);
  EXPECT_EQ(retry.lease.held, 1);
  // Released, it is still answered (released) until its expiry, and takes nothing.
  ASSERT_EQ(Lease(key, 2, LeaseAction::kRelease, "a").state, LeaseState::kReleased);
  LeaseOutcome after_release = Acquire(key, 2, "c", 1, 10 * kSecond, "req-1");
  EXPECT_TRUE(after_release.lease.replayed);
  EXPECT_TRUE(after_release.lease.lease->released);
  EXPECT_EQ(after_release.lease.held, 0);
  // Once it expired, the request_id acquires afresh.
  clock_.Advance(11 * kSecond);
  LeaseOutcome fresh = Acquire(key, 2, "d", 1, 10 * kSecond, "req-1");
  EXPECT_TRUE(fresh.allowed);
  EXPECT_FALSE(fresh.lease.replayed);
  EXPECT_EQ(fresh.lease.lease->id, "d");
}

TEST_P(RedisLeasesTest, ListGivesTheHeldLeasesSoonestExpiryFirst) {
  const StateKey key{"jobs", "tenant5"};
  ASSERT_TRUE(Acquire(key, 5, "x", 1, 30 * kSecond).allowed);
  ASSERT_TRUE(Acquire(key, 5, "y", 2, 10 * kSecond).allowed);
  ASSERT_TRUE(Acquire(key, 5, "z", 1, 20 * kSecond, "rid").allowed);
  ASSERT_EQ(Lease(key, 5, LeaseAction::kRelease, "z").state, LeaseState::kReleased);
  auto list = Run(Op(key, 5, LeaseAction::kList));
  ASSERT_OK(list);
  ASSERT_EQ(list->lease.held_leases.size(), 2u);
  EXPECT_EQ(list->lease.held_leases[0].id, "y");
  EXPECT_EQ(list->lease.held_leases[1].id, "x");
  EXPECT_EQ(list->lease.held, 3);
  EXPECT_EQ(list->lease.free, 2);
}

TEST_P(RedisLeasesTest, ResetAndDeleteAllLeasesFreeEverySlotOfTheirLimitOnly) {
  const StateKey key{"jobs", "tenant6"};
  const StateKey tagged{"jobs", "{org}tenant7"};
  const StateKey other{"seats", "tenant6"};
  ASSERT_TRUE(Acquire(key, 1, "a").allowed);
  ASSERT_TRUE(Acquire(tagged, 1, "b").allowed);
  ASSERT_TRUE(Acquire(other, 1, "c").allowed);
  // A rate limit's state of the same name and key is not a lease set.
  const LimitOp rate{key, Bucket(1, 5), 1};
  ASSERT_OK(store_->Apply(Operation{absl::MakeConstSpan(&rate, 1)}, clock_));

  LeaseDecision reset = Lease(key, 1, LeaseAction::kReset);
  EXPECT_TRUE(reset.write);
  EXPECT_EQ(reset.held, 0);
  EXPECT_TRUE(Acquire(key, 1, "d").allowed);

  auto deleted = store_->DeleteAllLeases(LimitSource::kDefined, "jobs");
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 2u);
  EXPECT_TRUE(Acquire(key, 1, "e").allowed);
  EXPECT_TRUE(Acquire(tagged, 1, "f").allowed);
  EXPECT_FALSE(Acquire(other, 1, "g").allowed);
  auto state = store_->Get(key);
  ASSERT_OK(state);
  EXPECT_TRUE(state->has_value());
}

TEST_P(RedisLeasesTest, AnAcquireAndItsRateLimitsAreAllOrNothing) {
  const StateKey key{"llm", "{org1}"};
  const StateKey rate_key{"llm_rate", "{org1}"};
  const std::vector<LimitOp> rate = {LimitOp{rate_key, Bucket(1, 2), 1}};
  // Tokens for two acquires, slots for one: the second acquire is refused its slot and keeps its
  // token; then the rate limit refuses and the lease is not taken.
  auto first = Run(Op(key, 1, LeaseAction::kAcquire, 1, 10 * kSecond, "a"), rate);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  ASSERT_EQ(first->decisions.size(), 1u);
  EXPECT_DOUBLE_EQ(first->decisions[0].value, 1);
  auto no_slot = Run(Op(key, 1, LeaseAction::kAcquire, 1, 10 * kSecond, "b"), rate);
  ASSERT_OK(no_slot);
  EXPECT_FALSE(no_slot->allowed);
  EXPECT_EQ(no_slot->lease.reason, DenyReason::kNoFreeSlots);
  auto state = store_->Get(rate_key);
  ASSERT_OK(state);
  EXPECT_DOUBLE_EQ((*state)->value, 1);  // not taken

  ASSERT_EQ(Lease(key, 1, LeaseAction::kRelease, "a").state, LeaseState::kReleased);
  const std::vector<LimitOp> two = {LimitOp{rate_key, Bucket(1, 2), 2}};
  auto no_token = Run(Op(key, 1, LeaseAction::kAcquire, 1, 10 * kSecond, "c"), two);
  ASSERT_OK(no_token);
  EXPECT_FALSE(no_token->allowed);
  EXPECT_TRUE(no_token->lease.allowed);
  EXPECT_FALSE(no_token->lease.lease.has_value());
  EXPECT_FALSE(no_token->decisions[0].allowed);
  EXPECT_EQ(Lease(key, 1, LeaseAction::kCheck).held, 0);  // the slot was not taken
}

TEST_P(RedisLeasesTest, TheLeaseSetLivesInTheStatesSlotAndExpiresAtItsLatestLease) {
  const StateKey key{"jobs", "tenant8"};
  ASSERT_TRUE(Acquire(key, 2, "a", 1, 30 * kSecond).allowed);
  ASSERT_TRUE(Acquire(key, 2, "b", 1, 90 * kSecond).allowed);
  const RedisLeaseKeys keys = RedisLeaseKeysFor(target_.key_prefix, key, "");
  redis::RedisClusterClient::Options co;
  co.seeds = target_.seeds;
  auto client = redis::RedisClusterClient::Connect(co);
  ASSERT_OK(client);
  for (const std::string& k : {keys.expiries, keys.leases}) {
    auto at = (*client)->ExecuteSync(k, {"PEXPIRETIME", k});
    ASSERT_OK(at);
    EXPECT_EQ(at->integer, (clock_.NowMicros() + 90 * kSecond + 999) / 1000) << k;
  }
  // Released, the set is gone.
  ASSERT_EQ(Lease(key, 2, LeaseAction::kRelease, "a").state, LeaseState::kReleased);
  ASSERT_EQ(Lease(key, 2, LeaseAction::kRelease, "b").state, LeaseState::kReleased);
  auto exists = (*client)->ExecuteSync(keys.expiries, {"EXISTS", keys.expiries, keys.leases});
  ASSERT_OK(exists);
  EXPECT_EQ(exists->integer, 0);
}

TEST_P(RedisLeasesTest, BadInputIsRefusedNamingTheFieldAndChangesNothing) {
  const StateKey key{"jobs", "tenant9"};
  LeaseOp op = Op(key, 2, LeaseAction::kAcquire, 1, 10 * kSecond, "a");
  op.count = 0;
  EXPECT_THAT(Run(op).status().message(), ::testing::HasSubstr("lease.count"));
  op = Op(key, 2, LeaseAction::kAcquire, 1, 7200 * kSecond, "a");
  EXPECT_THAT(Run(op).status().message(), ::testing::HasSubstr("lease.ttl"));
  op = Op(key, 2, LeaseAction::kAcquire, 1, 10 * kSecond, "r:x");
  EXPECT_THAT(Run(op).status().message(), ::testing::HasSubstr("lease.lease_id"));
  op = Op(key, 2, LeaseAction::kRelease, 1, 10 * kSecond, "");
  EXPECT_EQ(Run(op).status().code(), absl::StatusCode::kInvalidArgument);
  op = Op(key, 2, LeaseAction::kAcquire, 1, 10 * kSecond, "a");
  op.config = Bucket(1, 1);
  EXPECT_THAT(Run(op).status().message(), ::testing::HasSubstr("lease.config"));
  const std::vector<LimitOp> bad = {LimitOp{StateKey{"r", "{x}"}, Bucket(1, 1), -1}};
  EXPECT_THAT(Run(Op(key, 2, LeaseAction::kAcquire, 1, 10 * kSecond, "a"), bad).status().message(),
              ::testing::HasSubstr("limits[0].count"));
  EXPECT_EQ(Lease(key, 2, LeaseAction::kCheck).held, 0);
}

INSTANTIATE_TEST_SUITE_P(Topologies, RedisLeasesTest,
                         ::testing::Values(RedisTopology::kStandalone, RedisTopology::kCluster),
                         [](const auto& info) {
                           return info.param == RedisTopology::kCluster ? "Cluster" : "Standalone";
                         });

class RedisClusterLeasesTest : public RedisLeasesTest {};

TEST_P(RedisClusterLeasesTest, RateLimitsOutsideTheLeaseSlotAreRefusedNamingTheLimit) {
  const StateKey key{"llm", "org2"};
  const std::vector<LimitOp> rate = {LimitOp{StateKey{"llm_rate", "org2"}, Bucket(1, 2), 1}};
  auto out = Run(Op(key, 1, LeaseAction::kAcquire, 1, 10 * kSecond, "a"), rate);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status().message(), ::testing::HasSubstr("limits[0] (llm_rate / org2)"));
  EXPECT_EQ(Lease(key, 1, LeaseAction::kCheck).held, 0);
}

// Two stores (two replicas of the service) on one cluster, 16 threads acquiring and releasing
// one key of capacity 10: the holders, counted by the threads themselves, never exceed 10.
TEST_P(RedisClusterLeasesTest, TwoStoresManyThreadsNeverHoldMoreThanCapacity) {
  auto other = testing::OpenRedisTestStore(target_, nullptr);
  ASSERT_OK(other);
  auto mine = testing::OpenRedisTestStore(target_, nullptr);
  ASSERT_OK(mine);
  RedisStateStore* stores[2] = {mine->get(), other->get()};
  const StateKey key{"gpu", "pool"};
  std::atomic<int> holders{0}, most{0}, acquired{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      RedisStateStore& store = *stores[t % 2];
      for (int i = 0; i < 40; ++i) {
        const std::string id = absl::StrCat("t", t, "i", i);
        auto got = store.ApplyLease(
            LeaseOperation{Op(key, 10, LeaseAction::kAcquire, 1, 60 * kSecond, id)},
            SystemClock::Default());
        if (!got.ok()) {
          ++failures;
          continue;
        }
        if (!got->allowed) continue;
        ++acquired;
        const int now_held = ++holders;
        int seen = most.load();
        while (now_held > seen && !most.compare_exchange_weak(seen, now_held)) {
        }
        --holders;  // before the release: a holder is counted out before its slot frees
        auto released = store.ApplyLease(
            LeaseOperation{Op(key, 10, LeaseAction::kRelease, 1, 60 * kSecond, id)},
            SystemClock::Default());
        if (!released.ok() || released->lease.state != LeaseState::kReleased) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(most.load(), 10);
  EXPECT_GT(acquired.load(), 10);
  auto check = stores[0]->ApplyLease(LeaseOperation{Op(key, 10, LeaseAction::kCheck)},
                                     SystemClock::Default());
  ASSERT_OK(check);
  EXPECT_EQ(check->lease.held, 0);
}

INSTANTIATE_TEST_SUITE_P(Cluster, RedisClusterLeasesTest,
                         ::testing::Values(RedisTopology::kCluster));

}  // namespace
}  // namespace ratelimit
