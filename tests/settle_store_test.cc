// Idempotency records decided with the states (memory, RocksDB, Redis standalone and Redis
// Cluster), Limiter::Settle, and random interleavings of Consume, Reserve and Settle against the
// in-memory reference.
#include <random>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::OpenRocksDbStore;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TokenBucket;

LimitRequest Api(double count, const std::string& key = "u1") {
  return LimitRequest{"api", key, TokenBucket(10, 10 * kSecond), count, LimitSource::kDefined};
}

SettleItem SettleOf(const LimitRequest& l, double used, int64_t taken_at, const std::string& id,
                    int64_t expires_at) {
  SettleItem item;
  item.name = l.name;
  item.key = l.key;
  item.source = l.source;
  item.config = l.config;
  item.taken = l.count;
  item.used = used;
  item.taken_at_us = taken_at;
  item.spent = RecordSpec{"s" + id, expires_at};
  return item;
}

// A store of `backend` ("memory", "rocksdb", "redis_standalone", "redis_cluster") deciding at
// `clock`'s time; `redis` keeps the Redis servers of a Redis store alive.
std::unique_ptr<StateStore> OpenBackend(const std::string& backend, const TempDir& dir,
                                        const Clock& clock, RedisTestTarget& redis) {
  if (backend == "memory") return std::make_unique<MemoryStateStore>();
  if (backend == "rocksdb") return OpenRocksDbStore(dir.File("db"), clock);
  auto target = testing::StartRedisTestTarget(
      backend == "redis_cluster" ? RedisTopology::kCluster : RedisTopology::kStandalone);
  EXPECT_TRUE(target.ok()) << target.status();
  if (!target.ok()) return nullptr;
  redis = *std::move(target);
  auto store = testing::OpenRedisTestStore(redis, &clock);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return nullptr;
  return *std::move(store);
}

// Ahead of the real clock, so that Redis (which expires states and records by its own clock)
// keeps everything the test writes.
constexpr int64_t kYear2100 = int64_t{4102444800} * kSecond;

class RecordStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    store_ = OpenBackend(GetParam(), dir_, clock_, redis_);
    ASSERT_NE(store_, nullptr);
    limiter_ = std::make_unique<Limiter>(*store_, clock_);
  }

  double Value(const std::string& key = "u1") {
    auto v = limiter_->Evaluate(std::vector<LimitRequest>{Api(1, key)}, Mode::kCheck);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->decisions[0].value : -1;
  }

  Remember RememberAs(const std::string& key, int64_t ttl = 60 * kSecond) {
    Remember r;
    r.record = RecordSpec{key, clock_.NowMicros() + ttl};
    r.encode = [](const Verdict& v) {
      return std::to_string(v.allowed) + ":" + std::to_string(v.decisions[0].value);
    };
    return r;
  }

  TempDir dir_;
  FakeClock clock_{kYear2100};
  RedisTestTarget redis_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Limiter> limiter_;
};

TEST_P(RecordStoreTest, PresentRecordIsReturnedWithoutDeciding) {
  const std::vector<LimitRequest> req{Api(3)};
  const Remember remember = RememberAs("q-1");
  auto first = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(first);
  EXPECT_FALSE(first->remembered.has_value());
  EXPECT_TRUE(first->allowed);
  EXPECT_DOUBLE_EQ(Value(), 7);

  auto retry = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->remembered.has_value());
  EXPECT_EQ(*retry->remembered, "1:7.000000");
  EXPECT_TRUE(retry->decisions.empty());
  EXPECT_DOUBLE_EQ(Value(), 7);  // nothing more taken
}

TEST_P(RecordStoreTest, DeniedAnswerIsRememberedToo) {
  const std::vector<LimitRequest> req{Api(11)};
  auto first = limiter_->Evaluate(req, Mode::kConsume, RememberAs("q-denied"));
  ASSERT_OK(first);
  EXPECT_FALSE(first->allowed);
  auto retry = limiter_->Evaluate(req, Mode::kConsume, RememberAs("q-denied"));
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->remembered.has_value());
  EXPECT_EQ(*retry->remembered, "0:10.000000");
}

TEST_P(RecordStoreTest, ExpiredRecordReadsAsAbsent) {
  const std::vector<LimitRequest> req{Api(3)};
  ASSERT_OK(limiter_->Evaluate(req, Mode::kConsume, RememberAs("q-2", kSecond)));
  clock_.Advance(kSecond);
  auto again = limiter_->Evaluate(req, Mode::kConsume, RememberAs("q-2", kSecond));
  ASSERT_OK(again);
  EXPECT_FALSE(again->remembered.has_value());
  EXPECT_TRUE(again->allowed);
  EXPECT_DOUBLE_EQ(Value(), 5);  // 10 - 3 + 1 refilled - 3
  ASSERT_OK(store_->CollectGarbage());
}

TEST_P(RecordStoreTest, SettleSpendsTheReceiptOnce) {
  const LimitRequest take = Api(6);
  ASSERT_OK(limiter_->Evaluate(std::vector<LimitRequest>{take}, Mode::kConsume));
  const int64_t t = clock_.NowMicros();
  const std::vector<SettleItem> items{SettleOf(take, 2, t, "r1", t + 3600 * kSecond)};
  auto settled = limiter_->Settle(items);
  ASSERT_OK(settled);
  EXPECT_FALSE(settled->already_settled.has_value());
  ASSERT_EQ(settled->results.size(), 1u);
  EXPECT_DOUBLE_EQ(settled->results[0].returned, 4);
  EXPECT_DOUBLE_EQ(Value(), 8);

  auto again = limiter_->Settle(items);
  ASSERT_OK(again);
  ASSERT_TRUE(again->already_settled.has_value());
  EXPECT_EQ(*again->already_settled, 0u);
  EXPECT_DOUBLE_EQ(Value(), 8);  // unchanged
}

TEST_P(RecordStoreTest, SettleIsAllOrNothing) {
  // One hash tag: on a Redis Cluster both states (and so the receipts' records) share a slot.
  const std::string ka = "{ab}a", kb = "{ab}b";
  const LimitRequest a = Api(5, ka), b = Api(5, kb);
  ASSERT_OK(limiter_->Evaluate(std::vector<LimitRequest>{a, b}, Mode::kConsume));
  const int64_t t = clock_.NowMicros();
  const int64_t exp = t + 3600 * kSecond;
  ASSERT_OK(limiter_->Settle(std::vector<SettleItem>{SettleOf(b, 0, t, "rb", exp)}));
  ASSERT_DOUBLE_EQ(Value(kb), 10);
  // a's receipt is fresh but b's is spent: nothing is settled.
  auto both = limiter_->Settle(
      std::vector<SettleItem>{SettleOf(a, 0, t, "ra", exp), SettleOf(b, 0, t, "rb", exp)});
  ASSERT_OK(both);
  ASSERT_TRUE(both->already_settled.has_value());
  EXPECT_EQ(*both->already_settled, 1u);
  EXPECT_DOUBLE_EQ(Value(ka), 5);
  // And a's receipt was not spent by the refused request.
  auto a_alone = limiter_->Settle(std::vector<SettleItem>{SettleOf(a, 0, t, "ra", exp)});
  ASSERT_OK(a_alone);
  EXPECT_FALSE(a_alone->already_settled.has_value());
  EXPECT_DOUBLE_EQ(Value(ka), 10);
}

TEST_P(RecordStoreTest, SecretIsCreatedOnce) {
  int generated = 0;
  auto gen = [&] { return "secret-" + std::to_string(++generated); };
  auto first = store_->Secret("receipt_key", gen);
  ASSERT_OK(first);
  auto second = store_->Secret("receipt_key", gen);
  ASSERT_OK(second);
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(generated, 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, RecordStoreTest,
                         ::testing::Values("memory", "rocksdb", "redis_standalone",
                                           "redis_cluster"));

TEST(RocksDbRecordTest, RecordsAndSecretSurviveReopen) {
  TempDir dir;
  FakeClock clock;
  const std::vector<LimitRequest> req{Api(4)};
  Remember remember;
  remember.record = RecordSpec{"q-reopen", clock.NowMicros() + 60 * kSecond};
  remember.encode = [](const Verdict& v) { return std::to_string(v.decisions[0].value); };
  std::string secret;
  {
    auto store = OpenRocksDbStore(dir.File("db"), clock);
    ASSERT_NE(store, nullptr);
    Limiter limiter(*store, clock);
    ASSERT_OK(limiter.Evaluate(req, Mode::kConsume, remember));
    auto s = store->Secret("receipt_key", [] { return std::string("k1"); });
    ASSERT_OK(s);
    secret = *s;
  }
  auto store = OpenRocksDbStore(dir.File("db"), clock);
  ASSERT_NE(store, nullptr);
  Limiter limiter(*store, clock);
  auto retry = limiter.Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->remembered.has_value());
  EXPECT_EQ(*retry->remembered, "6.000000");
  auto s = store->Secret("receipt_key", [] { return std::string("k2"); });
  ASSERT_OK(s);
  EXPECT_EQ(*s, secret);
}

// A store that keeps no records refuses both features cleanly and takes nothing.
TEST(NoRecordStoreTest, RecordsAreUnimplementedAndNothingIsTaken) {
  FakeClock clock;
  testing::FailingStateStore store(std::make_unique<MemoryStateStore>());
  Limiter limiter(store, clock);
  const LimitRequest take = Api(4);
  Remember remember;
  remember.record = RecordSpec{"q", clock.NowMicros() + kSecond};
  auto v = limiter.Evaluate(std::vector<LimitRequest>{take}, Mode::kConsume, remember);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnimplemented) << v.status();
  auto s = limiter.Settle(std::vector<SettleItem>{
      SettleOf(take, 0, clock.NowMicros(), "r", clock.NowMicros() + kSecond)});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented) << s.status();
  auto state = store.Get(StateKey{"api", "u1", LimitSource::kDefined});
  ASSERT_OK(state);
  EXPECT_FALSE(state->has_value());
}

// Random interleavings of Consume, Reserve and Settle (refunds, charges, cancellations, repeated
// settlements): RocksDB and Redis (standalone, cluster) answer exactly as the in-memory reference,
// and over every interval the tokens a token bucket admits (taken, minus given back, plus
// charged) stay within capacity + rate*T/period + max_reserved.
class SettlePropertyTest : public ::testing::TestWithParam<std::tuple<std::string, uint32_t>> {};

TEST_P(SettlePropertyTest, MatchesReferenceAndNeverAdmitsMoreThanTheBound) {
  std::mt19937 rng(std::get<1>(GetParam()));
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  TempDir dir;
  FakeClock clock{kYear2100};
  MemoryStateStore memory;
  RedisTestTarget redis;
  auto rocks = OpenBackend(std::get<0>(GetParam()), dir, clock, redis);
  ASSERT_NE(rocks, nullptr);
  Limiter reference(memory, clock);
  Limiter limiter(*rocks, clock);

  const LimitConfig config = TokenBucket(5, kSecond, 12, 8);
  const double capacity = 12, rate_per_us = 5.0 / kSecond, max_reserved = 8;
  struct Take {
    LimitRequest limit;
    int64_t at;
    std::string id;
  };
  std::vector<Take> takes;
  // (time, net tokens admitted) for the bound.
  std::vector<std::pair<int64_t, double>> admitted;
  int ids = 0;

  for (int step = 0; step < 1500; ++step) {
    if (pick(3) == 0) clock.Advance(pick(600000));
    const int op = pick(10);
    if (op < 6 || takes.empty()) {
      // One hash tag: a Settle of two takes is one slot on a Redis Cluster.
      LimitRequest l{"llm", "{k}" + std::to_string(pick(2)), config, 0.5 + pick(12),
                     LimitSource::kInline};
      const Mode mode = op < 3 ? Mode::kConsume : Mode::kReserve;
      auto a = reference.Evaluate(std::vector<LimitRequest>{l}, mode);
      auto b = limiter.Evaluate(std::vector<LimitRequest>{l}, mode);
      ASSERT_OK(a);
      ASSERT_OK(b);
      ASSERT_EQ(a->allowed, b->allowed) << "step " << step;
      ASSERT_NEAR(a->decisions[0].value, b->decisions[0].value, 1e-9) << "step " << step;
      if (a->allowed) {
        takes.push_back(Take{l, a->now_us, std::to_string(ids++)});
        if (l.key == "{k}0") admitted.emplace_back(a->now_us, l.count);
      }
      continue;
    }
    // Settle one or two earlier takes (possibly already settled), with a random use.
    std::vector<SettleItem> items;
    std::vector<const Take*> settled_takes;
    const int n = 1 + pick(2);
    for (int i = 0; i < n; ++i) {
      const Take& t = takes[pick(static_cast<int>(takes.size()))];
      bool dup = false;
      for (const SettleItem& it : items) dup = dup || it.spent.key == "s" + t.id;
      if (dup) continue;
      const double used = pick(3) == 0 ? 0 : t.limit.count * pick(25) / 10.0;
      items.push_back(SettleOf(t.limit, used, t.at, t.id, t.at + 3600 * kSecond));
      settled_takes.push_back(&t);
    }
    auto a = reference.Settle(items);
    auto b = limiter.Settle(items);
    ASSERT_OK(a);
    ASSERT_OK(b);
    ASSERT_EQ(a->already_settled, b->already_settled) << "step " << step;
    if (a->already_settled) continue;
    for (size_t i = 0; i < items.size(); ++i) {
      const Settled &x = a->results[i], &y = b->results[i];
      ASSERT_NEAR(x.returned, y.returned, 1e-9) << "step " << step;
      ASSERT_NEAR(x.charged, y.charged, 1e-9) << "step " << step;
      ASSERT_NEAR(x.value, y.value, 1e-9) << "step " << step;
      ASSERT_LE(x.returned, std::max(0.0, items[i].taken - items[i].used) + 1e-9);
      ASSERT_LE(x.charged, std::max(0.0, items[i].used - items[i].taken) + 1e-9);
      ASSERT_LE(x.value, capacity + 1e-9) << "step " << step;  // a refund never mints tokens
      ASSERT_GE(x.value, -max_reserved - 1e-9) << "step " << step;
      if (items[i].key == "{k}0") admitted.emplace_back(a->now_us, x.charged - x.returned);
    }
  }
  ASSERT_GT(admitted.size(), 100u);
  // Every interval [admitted[i].time, admitted[j].time].
  for (size_t i = 0; i < admitted.size(); ++i) {
    double sum = 0;
    for (size_t j = i; j < admitted.size(); ++j) {
      sum += admitted[j].second;
      const double bound =
          capacity + rate_per_us * static_cast<double>(admitted[j].first - admitted[i].first) +
          max_reserved;
      ASSERT_LE(sum, bound + 1e-6) << "interval " << i << ".." << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, SettlePropertyTest,
    ::testing::Combine(::testing::Values("rocksdb", "redis_standalone", "redis_cluster"),
                       ::testing::Values(1u, 2u, 3u)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, uint32_t>>& info) {
      return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace ratelimit
