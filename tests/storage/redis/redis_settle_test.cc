// Settle and request_id on the Redis store: where records live on a Redis Cluster (the slot of
// the states they guard), what a request whose limits span slots gets, and two real
// ratelimit-server replicas sharing one cluster: a request_id retried on the other replica, a
// receipt settled on one and refused on the other, one receipt key for both.
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kLedgerOf1000Limits;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TokenBucket;
using ::ratelimit::testing::WriteFileAtomically;

TEST(RedisSlotTagTest, EveryTagLandsInItsSlotAndIsTheSmallestSuch) {
  for (int slot = 0; slot < redis::kSlotCount; ++slot) {
    const std::string tag(redis::SlotTag(slot));
    ASSERT_FALSE(tag.empty()) << slot;
    ASSERT_EQ(redis::KeySlot(absl::StrCat("prefix:{", tag, "}rec:anything")), slot) << tag;
  }
  // The smallest number in slot 0 is 3560 (CRC16("3560") & 16383 == 0, found independently).
  for (int n = 0; n < 3560; ++n) ASSERT_NE(redis::KeySlot(absl::StrCat(n)), 0) << n;
  EXPECT_EQ(redis::SlotTag(0), "3560");
}

// Ahead of the real clock, so that Redis keeps what the tests write.
constexpr int64_t kYear2100 = int64_t{4102444800} * kSecond;

class RedisClusterRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto target = testing::StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    auto store = testing::OpenRedisTestStore(target_, &clock_);
    ASSERT_OK(store);
    store_ = *std::move(store);
    limiter_ = std::make_unique<Limiter>(*store_, clock_);
  }
  LimitRequest Api(double count, const std::string& key) {
    return LimitRequest{"api", key, TokenBucket(10, 10 * kSecond), count, LimitSource::kDefined};
  }
  double Value(const std::string& key) {
    auto v = limiter_->Evaluate(std::vector<LimitRequest>{Api(1, key)}, Mode::kCheck);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->decisions[0].value : -1;
  }
  std::string RedisKeyOf(const std::string& key) {
    return RedisKeyFor(target_.key_prefix, StateKey{"api", key, LimitSource::kDefined},
                       RedisHashTagOfKey(key));
  }

  FakeClock clock_{kYear2100};
  RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> store_;
  std::unique_ptr<Limiter> limiter_;
};

// Keys "a" and "b" hash to different slots (checked): a request_id on both is decided across
// the slots (redis_settle_cross_slot_test has the details), taken once and remembered.
TEST_F(RedisClusterRecordTest, ARequestIdOnLimitsInDifferentSlotsIsTakenOnceAndRemembered) {
  ASSERT_NE(redis::KeySlot(RedisKeyOf("a")), redis::KeySlot(RedisKeyOf("b")));
  Remember remember;
  remember.record = RecordSpec{"q-cross", clock_.NowMicros() + 60 * kSecond};
  const std::vector<LimitRequest> req{Api(3, "a"), Api(3, "b")};
  auto v = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(v);
  EXPECT_TRUE(v->allowed);
  EXPECT_DOUBLE_EQ(Value("a"), 7);
  EXPECT_DOUBLE_EQ(Value("b"), 7);
  auto retry = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->remembered.has_value());
  EXPECT_DOUBLE_EQ(Value("a"), 7);
  EXPECT_DOUBLE_EQ(Value("b"), 7);
}

// A record written by one operation is found by every later operation on the same states,
// whatever other states of that slot they name: it lives in the slot, under the slot's tag.
TEST_F(RedisClusterRecordTest, AReceiptSpentWithOthersOfItsSlotIsSpentForEveryone) {
  const std::string ka = "{org7}a", kb = "{org7}b";
  ASSERT_OK(limiter_->Evaluate(std::vector<LimitRequest>{Api(5, ka), Api(5, kb)}, Mode::kConsume));
  const int64_t t = clock_.NowMicros();
  auto item = [&](const std::string& key, const std::string& id) {
    SettleItem s;
    s.name = "api";
    s.key = key;
    s.source = LimitSource::kDefined;
    s.config = TokenBucket(10, 10 * kSecond);
    s.taken = 5;
    s.used = 0;
    s.taken_at_us = t;
    s.spent = RecordSpec{id, t + 3600 * kSecond};
    return s;
  };
  auto both = limiter_->Settle(std::vector<SettleItem>{item(ka, "ra"), item(kb, "rb")});
  ASSERT_OK(both);
  EXPECT_FALSE(both->already_settled.has_value());
  EXPECT_DOUBLE_EQ(Value(ka), 10);
  EXPECT_DOUBLE_EQ(Value(kb), 10);
  ASSERT_OK(limiter_->Evaluate(std::vector<LimitRequest>{Api(5, kb)}, Mode::kConsume));
  auto alone = limiter_->Settle(std::vector<SettleItem>{item(kb, "rb")});
  ASSERT_OK(alone);
  ASSERT_TRUE(alone->already_settled.has_value());
  EXPECT_DOUBLE_EQ(Value(kb), 5);  // not given back twice
}

// A request_id's record is a key of its own slot that Redis drops by itself at its expiry.
TEST_F(RedisClusterRecordTest, ARecordExpiresInRedisAtItsExpiry) {
  Remember remember;
  const int64_t expires_at = clock_.NowMicros() + 90 * kSecond + 1;  // not a whole millisecond
  remember.record = RecordSpec{"q-expiry", expires_at};
  ASSERT_OK(limiter_->Evaluate(std::vector<LimitRequest>{Api(1, "u1")}, Mode::kConsume, remember));
  const std::string record = RedisRequestRecordKey(target_.key_prefix, "q-expiry");
  redis::RedisClusterClient::Options options;
  options.seeds = target_.seeds;
  auto client = redis::RedisClusterClient::Connect(options);
  ASSERT_OK(client);
  auto at = (*client)->ExecuteSync(record, {"PEXPIRETIME", record});
  ASSERT_OK(at);
  ASSERT_EQ(at->type, redis::Reply::Type::kInteger) << at->str;
  EXPECT_EQ(at->integer, expires_at / 1000 + 1);  // never before the record's expiry
}

// Concurrent requests with request ids (decided in C++, committed if nothing changed) and
// without (decided by the library) on one key: no update is lost, no retry takes again.
TEST_F(RedisClusterRecordTest, ConcurrentRecordedAndPlainTakesLoseNothing) {
  constexpr int kThreads = 8, kEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<LimitRequest> req{
          LimitRequest{"api", "hot", TokenBucket(1000, 1000 * kSecond), 1, LimitSource::kDefined}};
      for (int i = 0; i < kEach; ++i) {
        if (t % 2 == 0) {
          if (!limiter_->Evaluate(req, Mode::kConsume).ok()) ++failures;
          continue;
        }
        Remember remember;
        remember.record = RecordSpec{absl::StrCat("q-", t, "-", i), clock_.NowMicros() + kSecond};
        remember.encode = [](const Verdict& v) { return std::to_string(v.allowed); };
        for (int attempt = 0; attempt < 2; ++attempt) {  // the second is a retry
          auto v = limiter_->Evaluate(req, Mode::kConsume, remember);
          if (!v.ok() || v->remembered.has_value() != (attempt == 1)) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto v = limiter_->Evaluate(
      std::vector<LimitRequest>{
          LimitRequest{"api", "hot", TokenBucket(1000, 1000 * kSecond), 1, LimitSource::kDefined}},
      Mode::kCheck);
  ASSERT_OK(v);
  EXPECT_DOUBLE_EQ(v->decisions[0].value, 1000 - kThreads * kEach);  // the clock stands still
}

// Two server replicas on one cluster, neither given a receipt key file: they agree on the key
// kept in Redis.
class RedisReplicasSettleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = testing::StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    WriteFileAtomically(dir_.File("limits.yaml"), kLedgerOf1000Limits);
    for (int i = 0; i < 2; ++i) {
      auto server = ServerProcess::Start(
          {"--store=redis", "--redis_address=" + target_.seeds,
           "--redis_key_prefix=" + target_.key_prefix, "--limits_file=" + dir_.File("limits.yaml"),
           "--data_dir=" + dir_.File(absl::StrCat("unused", i))},
          dir_.path());
      ASSERT_OK(server);
      servers_.push_back(*std::move(server));
      clients_.push_back(RateLimitClient::Connect(servers_.back()->target(),
                                                  ClientOptions{absl::Seconds(10), ""}));
    }
  }
  void TearDown() override {
    for (auto& s : servers_) s->StopWith(SIGTERM);
  }
  double Value(RateLimitClient& client) {
    auto r = client.Check(MakeRequest("ledger", "acct"));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->results(0).value() : -1;
  }
  TempDir dir_;
  RedisTestTarget target_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<RateLimitClient>> clients_;
};

TEST_F(RedisReplicasSettleTest, ARequestIdRetriedOnTheOtherReplicaReturnsTheFirstAnswer) {
  v1::RateLimitRequest req = MakeRequest("ledger", "acct", 7);
  req.set_request_id("payment-1234");
  auto first = clients_[0]->Consume(req);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed());
  ASSERT_FALSE(first->replayed());
  ASSERT_EQ(first->results_size(), 1);
  ASSERT_FALSE(first->results(0).receipt().empty());
  EXPECT_NEAR(Value(*clients_[1]), 993, 0.01);

  auto retry = clients_[1]->Consume(req);
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->replayed());
  EXPECT_EQ(retry->allowed(), first->allowed());
  ASSERT_EQ(retry->results_size(), 1);
  EXPECT_DOUBLE_EQ(retry->results(0).value(), first->results(0).value());
  EXPECT_EQ(retry->results(0).receipt(), first->results(0).receipt());
  EXPECT_NEAR(Value(*clients_[0]), 993, 0.01);  // nothing more consumed

  // The same id with another body is refused on either replica.
  v1::RateLimitRequest other = MakeRequest("ledger", "acct", 8);
  other.set_request_id("payment-1234");
  EXPECT_EQ(clients_[0]->Consume(other).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(clients_[1]->Consume(other).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RedisReplicasSettleTest, AReceiptSettledOnOneReplicaIsRefusedOnTheOther) {
  auto taken = clients_[0]->Consume(MakeRequest("ledger", "acct", 10));
  ASSERT_OK(taken);
  ASSERT_TRUE(taken->allowed());
  v1::SettleRequest settle;
  v1::Settlement* s = settle.add_settlements();
  s->set_receipt(taken->results(0).receipt());
  s->set_used(4);
  // Signed by replica 0, verified by replica 1: both use the key kept in Redis.
  auto settled = clients_[1]->Settle(settle);
  ASSERT_OK(settled);
  EXPECT_NEAR(settled->results(0).returned(), 6, 1e-6);
  EXPECT_NEAR(Value(*clients_[0]), 996, 0.01);
  auto again = clients_[0]->Settle(settle);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_EQ(clients_[1]->Settle(settle).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NEAR(Value(*clients_[1]), 996, 0.01);  // given back once
}

// Through the servers: a request_id on limits of different slots is decided once and replayed
// by the other replica, refused with another body; its receipts settle together once.
TEST_F(RedisReplicasSettleTest, RecordsOnLimitsOfDifferentSlotsWorkThroughTheServers) {
  auto slot_of = [&](const std::string& key) {
    return redis::KeySlot(RedisKeyFor(target_.key_prefix,
                                      StateKey{"ledger", key, LimitSource::kDefined},
                                      RedisHashTagOfKey(key)));
  };
  ASSERT_NE(slot_of("acct"), slot_of("acct2"));
  auto value_of = [&](RateLimitClient& client, const std::string& key) {
    auto r = client.Check(MakeRequest("ledger", key));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->results(0).value() : -1;
  };
  v1::RateLimitRequest req = MakeRequest("ledger", "acct", 3);
  *req.add_limits() = MakeRequest("ledger", "acct2", 3).limits(0);
  req.set_request_id("cross-1");
  auto taken = clients_[0]->Consume(req);
  ASSERT_OK(taken);
  ASSERT_TRUE(taken->allowed());
  ASSERT_FALSE(taken->replayed());
  ASSERT_EQ(taken->results_size(), 2);
  auto retry = clients_[1]->Consume(req);
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->replayed());
  EXPECT_EQ(retry->results(1).receipt(), taken->results(1).receipt());
  EXPECT_NEAR(value_of(*clients_[0], "acct"), 997, 0.01);
  EXPECT_NEAR(value_of(*clients_[0], "acct2"), 997, 0.01);

  v1::RateLimitRequest other = req;
  other.mutable_limits(1)->set_count(4);
  EXPECT_EQ(clients_[1]->Consume(other).status().code(), absl::StatusCode::kInvalidArgument);

  ASSERT_OK(clients_[1]->SettleAll(*taken, 0));
  EXPECT_NEAR(value_of(*clients_[1], "acct"), 1000, 0.01);
  EXPECT_NEAR(value_of(*clients_[1], "acct2"), 1000, 0.01);
  auto again = clients_[0]->SettleAll(*taken, 0);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_NEAR(value_of(*clients_[0], "acct"), 1000, 0.01);
}

}  // namespace
}  // namespace ratelimit
