// Records across the slots of a Redis Cluster (RedisStateStore::ApplyRecorded): a Settle of
// receipts whose states live in different slots, and a request_id on limits of different slots,
// with the guarantees they have on one slot: a receipt settles at most once, a request_id is
// decided once and its answer returned to every retry, including a retry of a request whose first
// run died between its takes and its answer.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_state_store.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::TokenBucket;

// Ahead of the real clock, so that Redis keeps what the tests write.
constexpr int64_t kYear2100 = int64_t{4102444800} * kSecond;

// Capacity 1000, refilling 1 token a day: the fake clock moving a few microseconds changes
// nothing measurable.
LimitConfig Ledger() { return TokenBucket(1, 86400 * kSecond, 1000); }

class CrossSlotRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto target = testing::StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    auto store = testing::OpenRedisTestStore(target_, &clock_);
    ASSERT_OK(store);
    store_ = *std::move(store);
    limiter_ = std::make_unique<Limiter>(*store_, clock_);
    ASSERT_NE(SlotOf("a"), SlotOf("b"));
  }
  int SlotOf(const std::string& key) {
    return redis::KeySlot(RedisKeyFor(target_.key_prefix,
                                      StateKey{"ledger", key, LimitSource::kDefined},
                                      RedisHashTagOfKey(key)));
  }
  static LimitRequest Take(const std::string& key, double count) {
    return LimitRequest{"ledger", key, Ledger(), count, LimitSource::kDefined};
  }
  double Value(const std::string& key) {
    auto v = limiter_->Evaluate(std::vector<LimitRequest>{Take(key, 1)}, Mode::kCheck);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->decisions[0].value : -1;
  }
  void Consume(const std::string& key, double count) {
    auto v = limiter_->Evaluate(std::vector<LimitRequest>{Take(key, count)}, Mode::kConsume);
    ASSERT_OK(v);
    ASSERT_TRUE(v->allowed);
  }
  // A receipt for `taken` tokens of `key`, taken now, settled with nothing used.
  SettleItem Receipt(const std::string& key, double taken, const std::string& id) {
    SettleItem s;
    s.name = "ledger";
    s.key = key;
    s.source = LimitSource::kDefined;
    s.config = Ledger();
    s.taken = taken;
    s.used = 0;
    s.taken_at_us = clock_.NowMicros();
    s.spent = RecordSpec{id, clock_.NowMicros() + 3600 * kSecond};
    return s;
  }
  // The slot of the record of request_id `id` (its own slot, whatever the limits).
  int RecordSlotOf(const std::string& id) {
    return redis::KeySlot(RedisRequestRecordKey(target_.key_prefix, id));
  }
  // An id with `prefix` whose record lives in another slot than the state of `key`.
  std::string IdOutsideSlotOf(const std::string& prefix, const std::string& key) {
    for (int i = 0;; ++i) {
      std::string id = absl::StrCat(prefix, i);
      if (RecordSlotOf(id) != SlotOf(key)) return id;
    }
  }
  Remember RememberAs(const std::string& id, int64_t ttl_us = 3600 * kSecond) {
    Remember r;
    r.record = RecordSpec{id, clock_.NowMicros() + ttl_us};
    r.encode = [](const Verdict& v) {
      std::string out = v.allowed ? "allowed" : "denied";
      for (const Decision& d : v.decisions) absl::StrAppend(&out, " ", d.value);
      return out;
    };
    return r;
  }

  FakeClock clock_{kYear2100};
  RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> store_;
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(CrossSlotRecordTest, ASettleOfReceiptsInDifferentSlotsGivesBackBoth) {
  Consume("a", 100);
  Consume("b", 40);
  auto settled =
      limiter_->Settle(std::vector<SettleItem>{Receipt("a", 100, "ra"), Receipt("b", 40, "rb")});
  ASSERT_OK(settled);
  ASSERT_FALSE(settled->already_settled.has_value());
  ASSERT_EQ(settled->results.size(), 2u);
  EXPECT_DOUBLE_EQ(settled->results[0].returned, 100);
  EXPECT_DOUBLE_EQ(settled->results[1].returned, 40);
  EXPECT_DOUBLE_EQ(Value("a"), 1000);
  EXPECT_DOUBLE_EQ(Value("b"), 1000);
}

TEST_F(CrossSlotRecordTest, ASecondSettleOfTheSameReceiptsIsRefusedAndChangesNothing) {
  Consume("a", 300);  // not settled: keeps a double refund visible below capacity
  Consume("b", 300);
  Consume("a", 100);
  Consume("b", 100);
  const std::vector<SettleItem> both{Receipt("a", 100, "ra"), Receipt("b", 100, "rb")};
  ASSERT_OK(limiter_->Settle(both));
  EXPECT_DOUBLE_EQ(Value("a"), 700);
  EXPECT_DOUBLE_EQ(Value("b"), 700);
  auto again = limiter_->Settle(both);
  ASSERT_OK(again);
  ASSERT_TRUE(again->already_settled.has_value());
  EXPECT_EQ(*again->already_settled, 0u);
  EXPECT_DOUBLE_EQ(Value("a"), 700);
  EXPECT_DOUBLE_EQ(Value("b"), 700);
}

TEST_F(CrossSlotRecordTest, ASettleWithOneSpentReceiptAndOneFreshIsRefusedAndChangesNothing) {
  Consume("a", 300);
  Consume("b", 300);
  Consume("a", 100);
  Consume("b", 100);
  ASSERT_OK(limiter_->Settle(std::vector<SettleItem>{Receipt("b", 100, "rb")}));
  EXPECT_DOUBLE_EQ(Value("b"), 700);
  auto mixed =
      limiter_->Settle(std::vector<SettleItem>{Receipt("a", 100, "ra"), Receipt("b", 100, "rb")});
  ASSERT_OK(mixed);
  ASSERT_TRUE(mixed->already_settled.has_value());
  EXPECT_EQ(*mixed->already_settled, 1u);  // the spent one
  EXPECT_DOUBLE_EQ(Value("a"), 600);       // the fresh one was not settled
  EXPECT_DOUBLE_EQ(Value("b"), 700);
  // ... and is still fresh.
  ASSERT_OK(limiter_->Settle(std::vector<SettleItem>{Receipt("a", 100, "ra")}));
  EXPECT_DOUBLE_EQ(Value("a"), 700);
}

// Many threads settle the same receipts of several slots at once: every receipt is given back
// exactly once, whichever calls win (a call that loses a race on one receipt may have settled
// others: the documented difference from one slot).
TEST_F(CrossSlotRecordTest, ConcurrentSettlesOfTheSameReceiptsSettleEachExactlyOnce) {
  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  constexpr int kRounds = 10, kThreads = 6;
  for (const std::string& k : keys) Consume(k, 300);
  for (int round = 0; round < kRounds; ++round) {
    std::vector<SettleItem> items;
    for (const std::string& k : keys) {
      Consume(k, 10);
      items.push_back(Receipt(k, 10, absl::StrCat("r", round, k)));
    }
    std::atomic<int> errors{0}, whole{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        auto v = limiter_->Settle(items);
        if (!v.ok()) {
          ++errors;
        } else if (!v->already_settled) {
          ++whole;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_LE(whole.load(), 1);
    for (const std::string& k : keys) EXPECT_DOUBLE_EQ(Value(k), 700) << k << " round " << round;
  }
}

TEST_F(CrossSlotRecordTest, ARequestIdAcrossSlotsRetriedReturnsTheSameAnswerAndTakesNothing) {
  const std::vector<LimitRequest> req{Take("a", 3), Take("b", 5)};
  const Remember remember = RememberAs("q-1");
  auto first = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  ASSERT_FALSE(first->remembered.has_value());
  EXPECT_DOUBLE_EQ(Value("a"), 997);
  EXPECT_DOUBLE_EQ(Value("b"), 995);
  auto retry = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->remembered.has_value());
  EXPECT_EQ(*retry->remembered, remember.encode(*first));
  EXPECT_DOUBLE_EQ(Value("a"), 997);
  EXPECT_DOUBLE_EQ(Value("b"), 995);
}

// A denial across slots gives back what a slot took, and is the remembered answer.
TEST_F(CrossSlotRecordTest, ARequestIdDeniedAcrossSlotsTakesNothingAndIsRemembered) {
  Consume("b", 998);
  const std::vector<LimitRequest> req{Take("a", 3), Take("b", 5)};
  const Remember remember = RememberAs("q-denied");
  auto first = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(first);
  EXPECT_FALSE(first->allowed);
  EXPECT_DOUBLE_EQ(Value("a"), 1000);
  EXPECT_DOUBLE_EQ(Value("b"), 2);
  auto retry = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->remembered.has_value());
  EXPECT_EQ(*retry->remembered, remember.encode(*first));
}

// The first run takes in every slot and dies before recording its answer. A retry within the
// first run's lease is told to retry; after it, the retry takes the request over and completes
// it with the takes already made: one take per limit.
TEST_F(CrossSlotRecordTest, ARetryAfterARunDiedBetweenTakesAndAnswerTakesOnce) {
  RedisStateStoreOptions dying;
  dying.clock_override = &clock_;
  dying.claim_lease = absl::Seconds(2);
  dying.stop_after_takes_for_tests = [] { return true; };
  auto store = testing::OpenRedisTestStore(target_, std::move(dying));
  ASSERT_OK(store);
  Limiter dies(**store, clock_);
  const std::vector<LimitRequest> req{Take("a", 3), Take("b", 5)};
  const Remember remember = RememberAs("q-crash");
  auto died = dies.Evaluate(req, Mode::kConsume, remember);
  EXPECT_EQ(died.status().code(), absl::StatusCode::kUnavailable) << died.status();
  EXPECT_DOUBLE_EQ(Value("a"), 997);  // taken once
  EXPECT_DOUBLE_EQ(Value("b"), 995);

  auto early = limiter_->Evaluate(req, Mode::kConsume, remember);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kAborted) << early.status();

  clock_.Advance(2 * kSecond);  // the lease has run out
  auto retry = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->allowed);
  EXPECT_FALSE(retry->remembered.has_value());
  ASSERT_EQ(retry->decisions.size(), 2u);
  EXPECT_DOUBLE_EQ(retry->decisions[0].value, 997);  // the first run's takes, re-used
  EXPECT_DOUBLE_EQ(retry->decisions[1].value, 995);
  EXPECT_NEAR(Value("a"), 997, 1e-3);
  EXPECT_NEAR(Value("b"), 995, 1e-3);
  auto again = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(again);
  ASSERT_TRUE(again->remembered.has_value());
  EXPECT_EQ(*again->remembered, remember.encode(*retry));
}

// The dead owner's answer may still arrive after another took its request over: it writes
// nothing (the claim is no longer its own).
TEST_F(CrossSlotRecordTest, AnOwnerWhoseClaimWasTakenOverRecordsNothing) {
  std::unique_ptr<Limiter> late_limiter;
  RedisStateStoreOptions slow;
  slow.clock_override = &clock_;
  slow.claim_lease = absl::Seconds(1);
  const std::vector<LimitRequest> req{Take("a", 3), Take("b", 5)};
  const Remember remember = RememberAs("q-slow");
  std::atomic<bool> overtaken{false};
  // After its takes, the slow owner is overtaken: its lease runs out and another server
  // completes the request.
  slow.stop_after_takes_for_tests = [&] {
    if (overtaken.exchange(true)) return false;
    clock_.Advance(2 * kSecond);
    auto other = limiter_->Evaluate(req, Mode::kConsume, remember);
    EXPECT_OK(other);
    return false;
  };
  auto store = testing::OpenRedisTestStore(target_, std::move(slow));
  ASSERT_OK(store);
  Limiter owner(**store, clock_);
  auto late = owner.Evaluate(req, Mode::kConsume, remember);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted) << late.status();
  EXPECT_NEAR(Value("a"), 997, 1e-3);
  EXPECT_NEAR(Value("b"), 995, 1e-3);
  auto replay = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(replay);
  EXPECT_TRUE(replay->remembered.has_value());
}

TEST_F(CrossSlotRecordTest, ConcurrentRequestsWithOneIdTakeExactlyOnce) {
  constexpr int kThreads = 8;
  const std::vector<LimitRequest> req{Take("a", 3), Take("b", 5), Take("c", 7)};
  const Remember remember = RememberAs("q-race");
  std::atomic<int> fresh{0}, replayed{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int attempt = 0; attempt < 10000; ++attempt) {
        auto v = limiter_->Evaluate(req, Mode::kConsume, remember);
        if (v.ok()) {
          ++(v->remembered ? replayed : fresh);
          return;
        }
        if (v.status().code() != absl::StatusCode::kAborted) break;  // in progress: retry
      }
      ++errors;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(fresh.load(), 1);
  EXPECT_EQ(replayed.load(), kThreads - 1);
  EXPECT_DOUBLE_EQ(Value("a"), 997);
  EXPECT_DOUBLE_EQ(Value("b"), 995);
  EXPECT_DOUBLE_EQ(Value("c"), 993);
}

// The same request_id with limits of another slot meets the first request's record: its answer
// is replayed (the server answers INVALID_ARGUMENT when the body differs) and nothing is taken.
TEST_F(CrossSlotRecordTest, ARequestIdReusedWithALimitOfAnotherSlotIsRecognisedAndTakesNothing) {
  const Remember remember = RememberAs("q-reused");
  auto first =
      limiter_->Evaluate(std::vector<LimitRequest>{Take("a", 3)}, Mode::kConsume, remember);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  auto reused =
      limiter_->Evaluate(std::vector<LimitRequest>{Take("b", 5)}, Mode::kConsume, remember);
  ASSERT_OK(reused);
  ASSERT_TRUE(reused->remembered.has_value());
  EXPECT_EQ(*reused->remembered, remember.encode(*first));
  EXPECT_DOUBLE_EQ(Value("a"), 997);
  EXPECT_DOUBLE_EQ(Value("b"), 1000);
}

TEST_F(CrossSlotRecordTest, ARequestIdReusedWithAnotherFirstSlotIsRecognisedAndTakesNothing) {
  const Remember remember = RememberAs("q-reordered");
  auto first = limiter_->Evaluate(std::vector<LimitRequest>{Take("a", 3), Take("b", 5)},
                                  Mode::kConsume, remember);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  auto reused = limiter_->Evaluate(std::vector<LimitRequest>{Take("b", 5), Take("a", 3)},
                                   Mode::kConsume, remember);
  ASSERT_OK(reused);
  ASSERT_TRUE(reused->remembered.has_value());
  EXPECT_EQ(*reused->remembered, remember.encode(*first));
  EXPECT_DOUBLE_EQ(Value("a"), 997);
  EXPECT_DOUBLE_EQ(Value("b"), 995);
}

// Limits of one slot whose request_id's record lives in another slot: the record is written in
// its own slot, and a retry replays the answer without taking again.
TEST_F(CrossSlotRecordTest, ARequestIdOfOneSlotWithItsRecordElsewhereIsReplayedOnRetry) {
  const std::string id = IdOutsideSlotOf("q-single-", "a");
  ASSERT_NE(RecordSlotOf(id), SlotOf("a"));
  const Remember remember = RememberAs(id);
  const std::vector<LimitRequest> req{Take("a", 3)};
  auto first = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  ASSERT_FALSE(first->remembered.has_value());
  EXPECT_DOUBLE_EQ(Value("a"), 997);
  redis::RedisClusterClient::Options options;
  options.seeds = target_.seeds;
  auto client = redis::RedisClusterClient::Connect(options);
  ASSERT_OK(client);
  const std::string record = RedisRequestRecordKey(target_.key_prefix, id);
  auto exists = (*client)->ExecuteSync(record, {"EXISTS", record});
  ASSERT_OK(exists);
  ASSERT_EQ(exists->type, redis::Reply::Type::kInteger) << exists->str;
  EXPECT_EQ(exists->integer, 1);  // in the record's own slot
  auto retry = limiter_->Evaluate(req, Mode::kConsume, remember);
  ASSERT_OK(retry);
  ASSERT_TRUE(retry->remembered.has_value());
  EXPECT_EQ(*retry->remembered, remember.encode(*first));
  EXPECT_DOUBLE_EQ(Value("a"), 997);
}

// Once a request_id's answer expired, a new use of the id is a new request: it takes afresh, even
// while the holds of the first use are still in Redis.
TEST_F(CrossSlotRecordTest, ARequestIdUsedAgainAfterItsAnswerExpiredTakesAfresh) {
  const std::vector<LimitRequest> req{Take("a", 3), Take("b", 5)};
  auto first = limiter_->Evaluate(req, Mode::kConsume, RememberAs("q-expired", kSecond));
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  clock_.Advance(kSecond);
  auto again = limiter_->Evaluate(req, Mode::kConsume, RememberAs("q-expired", kSecond));
  ASSERT_OK(again);
  EXPECT_FALSE(again->remembered.has_value());
  EXPECT_TRUE(again->allowed);
  EXPECT_NEAR(Value("a"), 994, 1e-3);
  EXPECT_NEAR(Value("b"), 990, 1e-3);
}

}  // namespace
}  // namespace ratelimit
