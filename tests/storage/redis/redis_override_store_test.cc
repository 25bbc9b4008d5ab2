// The overrides in Redis (storage/redis/redis_override_store.h): the OverrideStore contract
// (tests/storage/override_store_contract.h) on the shared test cluster and on a standalone
// server; replicas (two stores on one cluster) seeing each other's changes and racing on one
// target; records outliving the store object; decisions under an override (made in C++); the
// keys' one slot; 100,000 records loaded at once; errors as statuses.
#include "storage/redis/redis_override_store.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/memory/memory_state_store.h"
#include "storage/overrides/override_codec.h"
#include "storage/redis/cluster/redis_slot.h"
#include "tests/storage/override_store_contract.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's helpers

// A RedisStateStore on the shared cluster, under a prefix of its own; the audit keeps 50 entries
// so that the trim test stays short.
class RedisClusterOverrideEnv {
 public:
  static constexpr uint64_t kAuditBound = 50;
  void Open() {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    RedisStateStoreOptions options;
    options.max_override_audit_entries = kAuditBound;
    auto store = OpenRedisTestStore(target_, options);
    ASSERT_OK(store);
    store_ = *std::move(store);
    ASSERT_NE(store_->overrides(), nullptr);
  }
  OverrideStore& store() { return *store_->overrides(); }
  uint64_t audit_bound() const { return kAuditBound; }

 private:
  RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> store_;
};

// A RedisOverrideStore over one connection to a new standalone server, with the production
// audit bound (the trim test writes 10,007 changes).
class RedisStandaloneOverrideEnv {
 public:
  void Open() {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto server = RedisStandalone::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    auto connection = server_->Connect();
    ASSERT_OK(connection);
    connection_ = *std::move(connection);
    store_ = std::make_unique<RedisOverrideStore>(
        "t:", [this](const std::string&, std::vector<std::string> argv) {
          return connection_->Command(argv);
        });
  }
  OverrideStore& store() { return *store_; }
  uint64_t audit_bound() const { return kMaxOverrideAuditEntries; }
  RedisCommandRunner& connection() { return *connection_; }

 private:
  std::unique_ptr<RedisStandalone> server_;
  std::unique_ptr<HiredisConnection> connection_;
  std::unique_ptr<RedisOverrideStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(RedisCluster, OverrideStoreContractTest, RedisClusterOverrideEnv);
INSTANTIATE_TYPED_TEST_SUITE_P(RedisStandalone, OverrideStoreContractTest,
                               RedisStandaloneOverrideEnv);

// Two RedisStateStores on one cluster and prefix: two replicas of the server.
class RedisOverrideReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    for (auto* store : {&a_, &b_}) {
      auto opened = OpenRedisTestStore(target_, nullptr);
      ASSERT_OK(opened);
      *store = *std::move(opened);
    }
  }

  RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> a_;
  std::unique_ptr<RedisStateStore> b_;
};

TEST_F(RedisOverrideReplicasTest, AChangeByOneIsSeenByTheOther) {
  ASSERT_OK(ChangeOverride(*a_->overrides(), OverrideTargetOf("api", "k1"), 10));
  EXPECT_EQ(*b_->overrides()->Version(), 1u);
  absl::StatusOr<OverrideStore::Snapshot> seen = b_->overrides()->LoadAll();
  ASSERT_OK(seen);
  EXPECT_EQ(seen->version, 1u);
  ASSERT_EQ(seen->overrides.size(), 1u);
  EXPECT_EQ(seen->overrides[0].action.capacity, 10);
  // B's change replaces A's, and B saw A's as the record it replaced.
  absl::StatusOr<OverrideAuditEntry> replaced =
      ChangeOverride(*b_->overrides(), OverrideTargetOf("api", "k1"), 20);
  ASSERT_OK(replaced);
  EXPECT_EQ(replaced->sequence, 2u);
  EXPECT_EQ(replaced->before->action.capacity, 10);
  EXPECT_EQ((*a_->overrides()->Get(OverrideTargetOf("api", "k1")))->action.capacity, 20);
  EXPECT_EQ(a_->overrides()->ListAudit(0, "", 10)->size(), 2u);
}

// Two threads, each on its own store, set one target over and over. Changes serialize: each one
// that succeeded is in the audit exactly once, sequences are 1..n without a gap, each entry's
// `before` is the previous entry's `after`, and the record left is the last writer's. A change
// that lost too many races (ABORTED) wrote nothing.
TEST_F(RedisOverrideReplicasTest, ConcurrentChangesOfOneTargetSerialize) {
  constexpr int kPerThread = 60;
  const OverrideTarget target = OverrideTargetOf("api", "hot");
  std::vector<OverrideAuditEntry> landed[2];
  int aborted[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      OverrideStore& store = *(t == 0 ? a_ : b_)->overrides();
      for (int i = 0; i < kPerThread; ++i) {
        absl::StatusOr<OverrideAuditEntry> e = ChangeOverride(store, target, t * 1000 + i);
        if (e.ok()) {
          landed[t].push_back(*e);
        } else {
          EXPECT_EQ(e.status().code(), absl::StatusCode::kAborted) << e.status();
          ++aborted[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::map<uint64_t, double> by_sequence;  // sequence -> the capacity its caller wrote
  for (int t = 0; t < 2; ++t) {
    for (const OverrideAuditEntry& e : landed[t]) {
      EXPECT_TRUE(by_sequence.emplace(e.sequence, *e.after->action.capacity).second)
          << "sequence " << e.sequence << " returned twice";
    }
  }
  const uint64_t n = by_sequence.size();
  EXPECT_EQ(n + aborted[0] + aborted[1], 2u * kPerThread);
  EXPECT_GT(landed[0].size(), 0u);
  EXPECT_GT(landed[1].size(), 0u);
  EXPECT_EQ(*a_->overrides()->Version(), n);

  absl::StatusOr<std::vector<OverrideAuditEntry>> audit = b_->overrides()->ListAudit(0, "", 1000);
  ASSERT_OK(audit);
  ASSERT_EQ(audit->size(), n);
  std::reverse(audit->begin(), audit->end());  // oldest first
  for (uint64_t i = 0; i < n; ++i) {
    const OverrideAuditEntry& e = (*audit)[i];
    ASSERT_EQ(e.sequence, i + 1);
    ASSERT_EQ(by_sequence.count(e.sequence), 1u);
    EXPECT_EQ(*e.after->action.capacity, by_sequence[e.sequence]);
    if (i == 0) {
      EXPECT_FALSE(e.before.has_value());
    } else {
      ASSERT_TRUE(e.before.has_value()) << "at " << e.sequence;
      EXPECT_EQ(*e.before, *(*audit)[i - 1].after) << "at " << e.sequence;
    }
  }
  absl::StatusOr<std::optional<Override>> last = a_->overrides()->Get(target);
  ASSERT_OK(last);
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->action.capacity, by_sequence.rbegin()->second);
}

TEST_F(RedisOverrideReplicasTest, RecordsOutliveTheStoreObject) {
  ASSERT_OK(ChangeOverride(*a_->overrides(), OverrideTargetOf("api", "k1"), 10));
  ASSERT_OK(ChangeOverride(*a_->overrides(), OverrideTargetOf("api", "k*", true), 20));
  ASSERT_OK(a_->Close());
  a_.reset();
  auto reopened = OpenRedisTestStore(target_, nullptr);
  ASSERT_OK(reopened);
  OverrideStore& overrides = *(*reopened)->overrides();
  absl::StatusOr<OverrideStore::Snapshot> all = overrides.LoadAll();
  ASSERT_OK(all);
  EXPECT_EQ(all->version, 2u);
  EXPECT_EQ(all->overrides.size(), 2u);
  EXPECT_EQ(overrides.ListAudit(0, "", 10)->size(), 2u);
  EXPECT_EQ(ChangeOverride(overrides, OverrideTargetOf("api", "k2"), 1)->sequence, 3u);
}

TEST_F(RedisOverrideReplicasTest, AClosedStoreRefusesWithUnavailable) {
  ASSERT_OK(a_->Close());
  EXPECT_EQ(a_->overrides()->Version().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ChangeOverride(*a_->overrides(), OverrideTargetOf("api", "k"), 1).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(a_->overrides()->LoadAll().status().code(), absl::StatusCode::kUnavailable);
}

// A limit of 5 tokens refilled one per hour, on api/`key`, optionally under an override.
LimitOp HourlyFive(const std::string& key, double count,
                   std::optional<LimitConfig::Adjustment> adjustment = std::nullopt,
                   double capacity = 5) {
  LimitConfig c;
  c.rate = 1;
  c.period_us = 3600 * kSecond;
  c.capacity = capacity;
  c.adjustment = adjustment;
  return LimitOp{StateKey{"api", key}, c, count};
}

// Decisions under a runtime override (LimitConfig::adjustment) are the algebra's, made in C++:
// the same steps on the Redis store (one slot of the cluster) and on the in-memory store decide
// alike, before, under (a raise, unlimited, blocked) and after the override.
TEST_F(RedisOverrideReplicasTest, DecisionsUnderAnOverrideAreTheAlgebras) {
  FakeClock clock(int64_t{4102444800} * kSecond);  // 2100: no state expires during the test
  RedisStateStoreOptions options;
  options.clock_override = &clock;
  auto redis = OpenRedisTestStore(target_, options);
  ASSERT_OK(redis);
  MemoryStateStore memory;
  LimitConfig::Adjustment raise;
  raise.changed_at_us = clock.NowMicros();
  raise.before_rate = 1;
  raise.before_period_us = 3600 * kSecond;
  raise.before_capacity = 5;
  LimitConfig::Adjustment unlimited = raise;
  unlimited.effect = LimitConfig::Adjustment::Effect::kUnlimited;
  LimitConfig::Adjustment blocked = raise;
  blocked.effect = LimitConfig::Adjustment::Effect::kBlocked;
  const std::vector<LimitOp> steps = {
      HourlyFive("k", 3),               // configured: 2 left
      HourlyFive("k", 1, raise, 50),    // raised: carried across, 1 left
      HourlyFive("k", 100, unlimited),  // allowed, nothing taken
      HourlyFive("k", 1, blocked),      // denied, nothing taken
      HourlyFive("k", 1),               // configured again: 0 left
      HourlyFive("k", 1),               // denied
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const Operation op{absl::MakeConstSpan(&steps[i], 1), Mode::kConsume};
    absl::StatusOr<Outcome> got = (*redis)->Apply(op, clock);
    ASSERT_OK(got);
    absl::StatusOr<Outcome> want = memory.Apply(op, clock);
    ASSERT_OK(want);
    EXPECT_EQ(got->allowed, want->allowed) << "step " << i;
    EXPECT_EQ(got->decisions[0].reason, want->decisions[0].reason) << "step " << i;
    EXPECT_EQ(got->decisions[0].value, want->decisions[0].value) << "step " << i;
    clock.Advance(kSecond);
  }
  // ApplyAsync answers the same way.
  const Operation unlimited_op{absl::MakeConstSpan(&steps[2], 1), Mode::kConsume};
  absl::Notification done;
  absl::StatusOr<Outcome> async = absl::UnknownError("not answered");
  (*redis)->ApplyAsync(unlimited_op, clock, [&](absl::StatusOr<Outcome> outcome) {
    async = std::move(outcome);
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_OK(async);
  EXPECT_TRUE(async->allowed);
}

// On a cluster, a request under an override is one transaction of one slot: its keys must share
// one (a hash tag), else FAILED_PRECONDITION and nothing is taken.
TEST_F(RedisOverrideReplicasTest, AnOverriddenRequestAcrossSlotsIsRefused) {
  LimitConfig::Adjustment unlimited;
  unlimited.effect = LimitConfig::Adjustment::Effect::kUnlimited;
  const std::vector<LimitOp> apart = {HourlyFive("a", 1, unlimited), HourlyFive("b", 1)};
  absl::StatusOr<Outcome> refused =
      a_->Apply(Operation{apart, Mode::kConsume}, SystemClock::Default());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_FALSE(a_->Get(StateKey{"api", "b"})->has_value());
  const std::vector<LimitOp> tagged = {HourlyFive("{t}a", 1, unlimited), HourlyFive("{t}b", 1)};
  absl::StatusOr<Outcome> allowed =
      a_->Apply(Operation{tagged, Mode::kConsume}, SystemClock::Default());
  ASSERT_OK(allowed);
  EXPECT_TRUE(allowed->allowed);
  EXPECT_EQ(allowed->decisions[1].value, 4);
}

TEST(RedisOverrideStoreKeysTest, ShareOneSlotUnderThePrefix) {
  RedisOverrideStore store("rl:", nullptr);
  const std::string records = store.KeyOf("records");
  EXPECT_EQ(records, "rl:overrides:{ovr}:records");
  EXPECT_EQ(redis::KeySlot(store.KeyOf("version")), redis::KeySlot(records));
  EXPECT_EQ(redis::KeySlot(store.KeyOf("audit")), redis::KeySlot(records));
}

// Redis answering an error (as during a slot migration or a cluster down), the connection
// failing, or a reply of an unexpected shape: a status, nothing thrown, nothing written.
TEST(RedisOverrideStoreErrorsTest, ErrorRepliesAreUnavailableAndOddRepliesInternal) {
  redis::Reply answer = redis::Reply::Error("CLUSTERDOWN The cluster is down");
  absl::Status transport = absl::OkStatus();
  RedisOverrideStore store(
      "rl:", [&](const std::string&, std::vector<std::string>) -> absl::StatusOr<redis::Reply> {
        if (!transport.ok()) return transport;
        return answer;
      });
  EXPECT_EQ(store.Version().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ChangeOverride(store, OverrideTargetOf("api", "k"), 1).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.LoadAll().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.ListAudit(0, "", 5).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.Get(OverrideTargetOf("api", "k")).status().code(),
            absl::StatusCode::kUnavailable);
  answer = redis::Reply::Integer(7);
  EXPECT_EQ(store.Version().status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ChangeOverride(store, OverrideTargetOf("api", "k"), 1).status().code(),
            absl::StatusCode::kInternal);
  answer = redis::Reply::String("not a record");
  EXPECT_EQ(store.Get(OverrideTargetOf("api", "k")).status().code(), absl::StatusCode::kDataLoss);
  transport = absl::UnavailableError("connection reset");
  EXPECT_EQ(store.LoadAll().status().code(), absl::StatusCode::kUnavailable);
}

// 100,000 records (about the size the overrides are planned for) load in one HGETALL.
TEST(RedisOverrideStoreScaleTest, LoadsAHundredThousandRecords) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  RedisStandaloneOverrideEnv env;
  ASSERT_NO_FATAL_FAILURE(env.Open());
  RedisOverrideStore store("t:", [&](const std::string&, std::vector<std::string> argv) {
    return env.connection().Command(argv);
  });
  constexpr int kRecords = 100'000;
  size_t bytes = 0;
  std::vector<std::string> hset = {"HSET", store.KeyOf("records")};
  for (int i = 0; i < kRecords; ++i) {
    Override o;
    o.target = OverrideTargetOf(absl::StrCat("limit-", i % 100), absl::StrCat("customer-", i));
    o.action.rate = 100;
    o.action.capacity = 200;
    o.reason = "incident 811: bulk import";
    o.set_by = "alice (token)";
    o.set_at_us = 1'790'000'000'000'000;
    hset.push_back(EncodeOverrideKey(o.target));
    hset.push_back(EncodeOverride(o));
    bytes += hset[hset.size() - 2].size() + hset.back().size();
    if (hset.size() == 2 + 2 * 1000 || i + 1 == kRecords) {
      absl::StatusOr<redis::Reply> r = env.connection().Command(hset);
      ASSERT_OK(r);
      ASSERT_FALSE(r->is_error()) << r->str;
      hset.resize(2);
    }
  }
  ASSERT_OK(env.connection().Command({"SET", store.KeyOf("version"), "100000"}));
  absl::StatusOr<OverrideStore::Snapshot> all = store.LoadAll();
  ASSERT_OK(all);
  EXPECT_EQ(all->version, 100'000u);
  ASSERT_EQ(all->overrides.size(), static_cast<size_t>(kRecords));
  for (size_t i = 1; i < all->overrides.size(); ++i) {
    ASSERT_LT(EncodeOverrideKey(all->overrides[i - 1].target),
              EncodeOverrideKey(all->overrides[i].target));
  }
  std::cout << "HGETALL of " << kRecords << " records: " << bytes << " bytes of fields and values"
            << std::endl;
}

}  // namespace
}  // namespace ratelimit
