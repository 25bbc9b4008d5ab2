// Concurrency limits on the Redis store (RedisStateStore::ApplyLease, storage/redis/leases.lua):
// the lease store contract (tests/storage/lease_store_contract.h) on a standalone redis-server;
// what only Redis has (the lease id rule of its hash, DeleteAllLeases over key shapes: tagged
// sets found, a rate limit's state of the same name kept); leases acknowledged with WAIT on the
// replica promoted after the primary is killed; and on a Redis Cluster, where every
// case starts a cluster of its own (seconds), only what a cluster changes: the slot rule of an
// acquire's rate limits, DeleteAllLeases over every primary, and two stores never holding more
// than capacity. The lease decisions themselves are checked against the algebra by
// redis_lease_library_test.
#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/redis_state_store.h"
#include "storage/status_util.h"
#include "tests/storage/lease_store_contract.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's suite and helpers

// A store on `topology` whose decisions are made at a fake clock (the time the store sends the
// function library), a day ahead of the real one: the sets' PEXPIREAT at fake times then lie in
// Redis' future, so Redis never drops a set the test still reads.
class RedisLeaseEnv {
 public:
  explicit RedisLeaseEnv(RedisTopology topology = RedisTopology::kStandalone)
      : topology_(topology) {}
  void Open() {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = StartRedisTestTarget(topology_);
    ASSERT_OK(target);
    target_ = *std::move(target);
    clock_.Set(SystemClock::Default().NowMicros() + 24 * 3600 * kSecond);
    auto store = OpenRedisTestStore(target_, &clock_);
    ASSERT_OK(store);
    store_ = *std::move(store);
  }
  RedisStateStore& store() { return *store_; }
  const Clock& clock() { return clock_; }
  void Advance(int64_t us) { clock_.Advance(us); }
  const RedisTestTarget& target() const { return target_; }

 private:
  RedisTopology topology_;
  RedisTestTarget target_;
  FakeClock clock_;
  std::unique_ptr<RedisStateStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(RedisStandalone, LeaseStoreContractTest, RedisLeaseEnv);

class RedisLeasesTest : public ::testing::Test {
 protected:
  explicit RedisLeasesTest(RedisTopology topology = RedisTopology::kStandalone) : env_(topology) {}
  void SetUp() override { env_.Open(); }

  absl::StatusOr<LeaseOutcome> Run(const LeaseOp& op, absl::Span<const LimitOp> limits = {}) {
    return env_.store().ApplyLease(LeaseOperation{op, limits}, env_.clock());
  }
  // The slots of `name`/`key` held now.
  int64_t Held(const std::string& name, const std::string& key) {
    auto out = Run(LeaseOpOf(LeaseAction::kList, 5, "", name, key));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->lease.held : -1;
  }
  bool Acquire(const std::string& name, const std::string& key, const std::string& id) {
    auto out = Run(LeaseOpOf(LeaseAction::kAcquire, 5, id, name, key));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() && out->allowed;
  }

  RedisLeaseEnv env_;
};

TEST_F(RedisLeasesTest, BadOperationsAreRefusedNamingTheFieldAndSendNothing) {
  for (LeaseAction action : {LeaseAction::kAcquire, LeaseAction::kRelease, LeaseAction::kExtend}) {
    auto out = Run(LeaseOpOf(action, 2, ""));  // no lease id
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(out.status().message(), ::testing::HasSubstr("lease_id"));
  }
  // A check or a list names no lease.
  ASSERT_OK(Run(LeaseOpOf(LeaseAction::kCheck, 2, "")));
  const std::vector<LimitOp> bad = {LimitOp{StateKey{"r", "x"}, TokenBucket(1, kSecond, 1), -1}};
  EXPECT_THAT(Run(LeaseOpOf(LeaseAction::kAcquire, 2, "a"), bad).status().message(),
              ::testing::HasSubstr("limits[0].count"));
  const std::vector<LimitOp> slots = {LimitOp{StateKey{"r", "x"}, SlotsConfig(1), 1}};
  EXPECT_THAT(Run(LeaseOpOf(LeaseAction::kAcquire, 2, "a"), slots).status().message(),
              ::testing::HasSubstr("limits[0].config.kind"));
  EXPECT_EQ(Held("jobs", "tenant"), 0);
}

TEST_F(RedisLeasesTest, DeleteAllLeasesFindsTaggedSetsAndLeavesRateStatesOfTheSameName) {
  ASSERT_TRUE(Acquire("jobs", "t1", "a"));
  ASSERT_TRUE(Acquire("jobs", "{org}t2", "b"));
  ASSERT_TRUE(Acquire("jobs", "{org}", "c"));
  // A rate limit's state of the same name and key is not a lease set.
  const LimitOp rate{StateKey{"jobs", "t1"}, TokenBucket(1, kSecond, 5), 1};
  ASSERT_OK(env_.store().Apply(Operation{absl::MakeConstSpan(&rate, 1)}, env_.clock()));

  auto deleted =
      env_.store().DeleteAllLeases(LimitSource::kDefined, "jobs", env_.clock().NowMicros());
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 3u);
  EXPECT_EQ(Held("jobs", "t1"), 0);
  EXPECT_EQ(Held("jobs", "{org}t2"), 0);
  EXPECT_EQ(Held("jobs", "{org}"), 0);
  auto state = env_.store().Get(rate.key);
  ASSERT_OK(state);
  EXPECT_TRUE(state->has_value());
}

// The serving thread calls ApplyLeaseAsync of a store that never waits (ApplyAsyncMayWait):
// it must send the FCALL and return, answering from the client's thread once Redis replies.
TEST_F(RedisLeasesTest, ApplyLeaseAsyncReturnsBeforeRedisAnswers) {
  redis::RedisClusterClient::Options co;
  co.seeds = env_.target().seeds;
  auto client = redis::RedisClusterClient::Connect(co);
  ASSERT_OK(client);
  ASSERT_FALSE(env_.store().ApplyAsyncMayWait());
  // Writes (and so the lease function) wait until CLIENT UNPAUSE.
  ASSERT_OK((*client)->ExecuteOnEachPrimarySync({"CLIENT", "PAUSE", "20000", "WRITE"}));
  absl::Notification done;
  absl::StatusOr<LeaseOutcome> result = absl::UnknownError("unanswered");
  env_.store().ApplyLeaseAsync(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 2, "a")},
                               env_.clock(), [&](absl::StatusOr<LeaseOutcome> out) {
                                 result = std::move(out);
                                 done.Notify();
                               });
  // Returned while Redis cannot have run the acquire.
  EXPECT_FALSE(done.HasBeenNotified());
  ASSERT_OK((*client)->ExecuteOnEachPrimarySync({"CLIENT", "UNPAUSE"}));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_OK(result);
  EXPECT_TRUE(result->allowed);
  EXPECT_EQ(result->lease.held, 1);
  EXPECT_EQ(Held("jobs", "tenant"), 1);

  // An invalid op is answered at once, naming the field, and nothing is sent.
  absl::StatusOr<LeaseOutcome> refused = absl::UnknownError("unanswered");
  env_.store().ApplyLeaseAsync(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 2, "")},
                               env_.clock(),
                               [&](absl::StatusOr<LeaseOutcome> out) { refused = std::move(out); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("lease_id"));
  EXPECT_EQ(Held("jobs", "tenant"), 1);
}

// Decisions sent together from several threads, answered on the client's thread: each is
// numbered (LeaseDecision::seq) in the order Redis made it. 200 acquires of one key, each taking a
// slot: in the order of their numbers, the slots held after each are 1, 2, ..., 200.
TEST_F(RedisLeasesTest, AsyncDecisionsAreNumberedInTheOrderRedisMadeThem) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, int64_t>> seen;  // (seq, held)
  int answered = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        env_.store().ApplyLeaseAsync(
            LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 1000, absl::StrCat("l", t, "-", i))},
            env_.clock(), [&](absl::StatusOr<LeaseOutcome> out) {
              absl::MutexLock l(&mu);
              ++answered;
              if (out.ok()) seen.emplace_back(out->lease.seq, out->lease.held);
            });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock l(&mu);
    ASSERT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(
                                +[](int* n) { return *n == kThreads * kPerThread; }, &answered),
                            absl::Seconds(30)));
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_GT(seen[i].first, i == 0 ? 0 : seen[i - 1].first);
    EXPECT_EQ(seen[i].second, static_cast<int64_t>(i + 1)) << "the decision numbered " << i;
  }
}

// A primary with one replica and a store whose client WAITs for it (--redis_wait_replicas=1):
// an acquire is acknowledged only once the replica has it, so after the primary is killed and the
// replica promoted (what a failover does) every acknowledged lease, release and request_id is
// there. A replica that acknowledges nothing makes the acquire UNAVAILABLE instead.
TEST(RedisLeaseFailoverTest, LeasesAcknowledgedWithWaitSurviveThePrimarysLoss) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  // No delay before the replica's first sync (Redis waits 5 s by default for more replicas).
  auto primary = RedisServer::Start({"--repl-diskless-sync-delay", "0"});
  ASSERT_OK(primary);
  auto replica =
      RedisServer::Start({"--replicaof", "127.0.0.1", std::to_string((*primary)->port())});
  ASSERT_OK(replica);
  ASSERT_TRUE(Eventually([&] {
    auto info = (*primary)->Cli({"INFO", "replication"});
    return info.ok() && absl::StrContains(*info, "state=online");
  }));
  FakeClock clock(SystemClock::Default().NowMicros() + 24 * 3600 * kSecond);
  auto open = [&](const RedisServer& server, int wait_replicas,
                  absl::Duration timeout) -> absl::StatusOr<std::unique_ptr<RedisStateStore>> {
    redis::RedisClusterClient::Options co;
    co.seeds = server.address();
    co.command_timeout = timeout;
    co.wait_replicas = wait_replicas;
    auto client = redis::RedisClusterClient::Connect(co);
    if (!client.ok()) return client.status();
    RedisStateStoreOptions options;
    options.clock_override = &clock;
    return RedisStateStore::Open(*std::move(client), std::move(options));
  };
  // The WAIT of a write is given 3/4 of the command's timeout: short while nothing acknowledges.
  auto impatient = open(**primary, 1, absl::Milliseconds(200));
  ASSERT_OK(impatient);
  auto store = open(**primary, 1, absl::Seconds(5));
  ASSERT_OK(store);
  auto apply = [&](RedisStateStore& on, LeaseOp op, const std::string& request_id = "") {
    op.request_id = request_id;
    return on.ApplyLease(LeaseOperation{op}, clock);
  };

  (*replica)->Pause();  // connected, acknowledging nothing
  auto unacknowledged =
      apply(**impatient, LeaseOpOf(LeaseAction::kAcquire, 3, "p", "jobs", "other"));
  EXPECT_EQ(unacknowledged.status().code(), absl::StatusCode::kUnavailable)
      << unacknowledged.status();
  (*replica)->Resume();

  Lease replayable;
  for (const char* id : {"a", "b", "c"}) {
    auto out = apply(**store, LeaseOpOf(LeaseAction::kAcquire, 3, id), id[0] == 'a' ? "req" : "");
    ASSERT_OK(out);
    ASSERT_TRUE(out->allowed) << id;
    if (id[0] == 'a') replayable = *out->lease.lease;
  }
  auto released = apply(**store, LeaseOpOf(LeaseAction::kRelease, 3, "b"));
  ASSERT_OK(released);
  ASSERT_EQ(released->lease.state, LeaseState::kReleased);
  (*primary)->Kill9();  // at once: nothing more reaches the replica

  ASSERT_OK((*replica)->Cli({"REPLICAOF", "NO", "ONE"}));
  auto promoted = open(**replica, 0, absl::Seconds(5));
  ASSERT_OK(promoted);
  auto list = apply(**promoted, LeaseOpOf(LeaseAction::kList, 3));
  ASSERT_OK(list);
  EXPECT_THAT(list->lease.held_leases,
              ::testing::ElementsAre(::testing::Field(&Lease::id, NamedId("a")),
                                     ::testing::Field(&Lease::id, NamedId("c"))));
  auto retried = apply(**promoted, LeaseOpOf(LeaseAction::kAcquire, 3, "a2"), "req");
  ASSERT_OK(retried);
  EXPECT_TRUE(retried->lease.replayed);
  EXPECT_EQ(retried->lease.lease, replayable);
  auto third = apply(**promoted, LeaseOpOf(LeaseAction::kAcquire, 3, "d"));
  ASSERT_OK(third);
  EXPECT_TRUE(third->allowed);
  auto full = apply(**promoted, LeaseOpOf(LeaseAction::kAcquire, 3, "e"));
  ASSERT_OK(full);
  EXPECT_FALSE(full->allowed);
}

// On a Redis Cluster (one cluster per case: keep these few).
class RedisClusterLeasesTest : public RedisLeasesTest {
 protected:
  RedisClusterLeasesTest() : RedisLeasesTest(RedisTopology::kCluster) {}
};

TEST_F(RedisClusterLeasesTest, LeaseSlotRateLimitsAndEveryPrimarySearchedAndReset) {
  // Rate limits in another slot are refused naming the limit; with one hash tag they are taken
  // with the lease.
  const std::vector<LimitOp> apart = {
      LimitOp{StateKey{"llm_rate", "org2"}, TokenBucket(1, kSecond, 2), 1}};
  auto out = Run(LeaseOpOf(LeaseAction::kAcquire, 1, "a", "llm", "org2"), apart);
  EXPECT_TRUE(IsNotOneTransaction(out.status())) << out.status();
  // Named as the request numbers its limits: after the concurrency limit (the default), or
  // before it.
  EXPECT_THAT(out.status().message(), ::testing::HasSubstr("limits[1] (llm_rate / org2)"));
  LeaseOperation rate_first{LeaseOpOf(LeaseAction::kAcquire, 1, "a", "llm", "org2"), apart};
  rate_first.lease_at = 1;
  out = env_.store().ApplyLease(rate_first, env_.clock());
  EXPECT_THAT(out.status().message(), ::testing::HasSubstr("limits[0] (llm_rate / org2)"));
  EXPECT_EQ(Held("llm", "org2"), 0);
  const std::vector<LimitOp> tagged = {
      LimitOp{StateKey{"llm_rate", "{org2}"}, TokenBucket(1, kSecond, 2), 1}};
  out = Run(LeaseOpOf(LeaseAction::kAcquire, 1, "a", "llm", "{org2}u1"), tagged);
  ASSERT_OK(out);
  EXPECT_TRUE(out->allowed);
  ASSERT_EQ(out->decisions.size(), 1u);
  EXPECT_EQ(out->decisions[0].value, 1);

  // Sets on every primary of the cluster (40 keys over 3 primaries).
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Acquire("jobs", absl::StrCat("tenant", i), "a"));
  redis::RedisClusterClient::Options options;
  options.seeds = env_.target().seeds;
  auto client = redis::RedisClusterClient::Connect(options);
  ASSERT_OK(client);
  auto per_primary = (*client)->ExecuteOnEachPrimarySync(
      {"KEYS", absl::StrCat(env_.target().key_prefix, "{*}Lz*")});
  ASSERT_OK(per_primary);
  ASSERT_EQ(per_primary->size(), 3u);
  for (const redis::NodeReply& node : *per_primary) {
    ASSERT_OK(node.reply);
    EXPECT_GT(node.reply->elements.size(), 0u) << node.address;
  }
  // The leak search follows its pages over every primary: asked at a time past every lease's
  // expiry (it only reads), it names all 41 keys.
  const int64_t later = env_.clock().NowMicros() + kLeaseTtl + kSecond;
  std::set<std::string> named;
  std::string cursor;
  int pages = 0;
  do {
    auto page = env_.store().FindLeakedLeaseKeys(cursor, later);
    ASSERT_OK(page);
    for (const StateKey& k : page->keys) named.insert(absl::StrCat(k.name, "/", k.key));
    cursor = page->next;
  } while (!cursor.empty() && ++pages < 1000);
  EXPECT_EQ(named.size(), 41u);
  EXPECT_EQ(named.count("llm/{org2}u1"), 1u);
  EXPECT_EQ(named.count("jobs/tenant39"), 1u);
  auto deleted =
      env_.store().DeleteAllLeases(LimitSource::kDefined, "jobs", env_.clock().NowMicros());
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(Held("jobs", absl::StrCat("tenant", i)), 0) << i;
  EXPECT_EQ(Held("llm", "{org2}u1"), 1);
}

// Two stores (two replicas of the service) on one cluster, 16 threads acquiring and releasing
// one key of capacity 10 at the primary's clock: the holders, counted by the threads themselves,
// never exceed 10.
TEST_F(RedisClusterLeasesTest, TwoStoresManyThreadsNeverHoldMoreThanCapacity) {
  auto other = OpenRedisTestStore(env_.target(), nullptr);
  ASSERT_OK(other);
  auto mine = OpenRedisTestStore(env_.target(), nullptr);
  ASSERT_OK(mine);
  RedisStateStore* stores[2] = {mine->get(), other->get()};
  std::atomic<int> holders{0}, most{0}, acquired{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      RedisStateStore& store = *stores[t % 2];
      for (int i = 0; i < 40; ++i) {
        const std::string id = absl::StrCat("t", t, "i", i);
        LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 10, id, "gpu", "pool");
        auto got = store.ApplyLease(LeaseOperation{op}, SystemClock::Default());
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
        op.action = LeaseAction::kRelease;
        auto released = store.ApplyLease(LeaseOperation{op}, SystemClock::Default());
        if (!released.ok() || released->lease.state != LeaseState::kReleased) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(most.load(), 10);
  EXPECT_GT(acquired.load(), 10);
  auto check =
      stores[0]->ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kCheck, 10, "", "gpu", "pool")},
                            SystemClock::Default());
  ASSERT_OK(check);
  EXPECT_EQ(check->lease.held, 0);
}

}  // namespace
}  // namespace ratelimit
