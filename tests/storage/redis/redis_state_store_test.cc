// RedisStateStore on a standalone redis-server: what the Apply contract suite does not cover
// (Get/Delete/DeleteAll key ranges, Update as compare-and-set, the server's clock, expiry, close,
// health, concurrent callers).
#include "storage/redis/redis_state_store.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/redis/redis_function_library.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::HiredisConnection;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisStandalone;
using ::ratelimit::testing::ValueOrDie;

LimitConfig Bucket(double rate, int64_t period_us) {
  LimitConfig c;
  c.rate = rate;
  c.period_us = period_us;
  return c;
}

class RedisStateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled())
        << "redis-server is required (scripts/setup.sh installs it)";
    auto server = RedisStandalone::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    auto side = server_->Connect();
    ASSERT_OK(side);
    side_ = *std::move(side);
    auto connection = server_->Connect();
    ASSERT_OK(connection);
    auto store = RedisStateStore::Open(*std::move(connection), RedisStateStoreOptions{});
    ASSERT_OK(store);
    store_ = *std::move(store);
  }

  absl::Status Consume(const StateKey& key, double count) {
    const LimitOp limit{key, Bucket(10, kSecond), count};
    return store_
        ->Apply(Operation{absl::MakeConstSpan(&limit, 1), Mode::kConsume}, SystemClock::Default())
        .status();
  }

  std::unique_ptr<RedisStandalone> server_;
  std::unique_ptr<HiredisConnection> side_;  // another client of the same server
  std::unique_ptr<RedisStateStore> store_;
};

TEST_F(RedisStateStoreTest, RefusesAPrefixThatWouldChooseTheSlot) {
  auto connection = server_->Connect();
  ASSERT_OK(connection);
  RedisStateStoreOptions o;
  o.key_prefix = "rl{x}:";
  EXPECT_EQ(RedisStateStore::Open(*std::move(connection), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RedisStateStoreTest, DecidesAtTheServersClockAndSetsTheExpiry) {
  testing::FakeClock ignored(1000);  // not used: the server's TIME decides
  const StateKey key{"api", "u1"};
  const LimitOp limit{key, Bucket(10, kSecond), 4};
  const int64_t before = SystemClock::Default().NowMicros();
  auto out = store_->Apply(Operation{absl::MakeConstSpan(&limit, 1), Mode::kConsume}, ignored);
  const int64_t after = SystemClock::Default().NowMicros();
  ASSERT_OK(out);
  EXPECT_GE(out->now_us, before);
  EXPECT_LE(out->now_us, after);
  auto stored = store_->Get(key);
  ASSERT_OK(stored);
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ(**stored, out->decisions[0].next);
  const std::string pexpiretime[] = {"PEXPIRETIME", RedisKeyFor("ratelimit:", key, "")};
  auto expires = side_->Command(pexpiretime);
  ASSERT_OK(expires);
  EXPECT_GE(expires->integer * 1000, (*stored)->full_at_us);
}

TEST_F(RedisStateStoreTest, DeleteAllRemovesEveryKeyOfTheNameAndNothingElse) {
  const std::vector<StateKey> doomed = {{"a", "1"}, {"a", "2"}, {"a", "}{*"}, {"a", ""}};
  const std::vector<StateKey> kept = {
      {"ab", "1"}, {"a*", "1"}, {"", "a1"}, {"a", "1", LimitSource::kInline}, {"b", "a"}};
  for (const auto* group : {&doomed, &kept}) {
    for (const StateKey& k : *group) ASSERT_OK(Consume(k, 1));
  }
  EXPECT_EQ(ValueOrDie(store_->DeleteAll(LimitSource::kDefined, "a")), doomed.size());
  for (const StateKey& k : doomed) {
    auto s = store_->Get(k);
    ASSERT_OK(s);
    EXPECT_FALSE(s->has_value()) << k.name << "/" << k.key;
  }
  for (const StateKey& k : kept) {
    auto s = store_->Get(k);
    ASSERT_OK(s);
    EXPECT_TRUE(s->has_value()) << k.name << "/" << k.key;
  }
  EXPECT_EQ(ValueOrDie(store_->Delete(kept[0])), 1u);
  EXPECT_FALSE(store_->Get(kept[0])->has_value());
  EXPECT_EQ(ValueOrDie(store_->Delete(kept[0])), 0u);
}

TEST_F(RedisStateStoreTest, UpdateDecidesAgainWhenAnotherWriterGotThereFirst) {
  const StateKey key{"api", "u1"};
  ASSERT_OK(Consume(key, 1));
  int calls = 0;
  const State mine{3, 4102444800 * kSecond, 4102444800 * kSecond + 1};
  ASSERT_OK(store_->Update(
      absl::MakeConstSpan(&key, 1),
      [&](absl::Span<const std::optional<State>> current, absl::Span<std::optional<State>> writes) {
        ++calls;
        if (calls == 1) {
          // Someone else writes between our read and our write.
          const std::string set[] = {"SET", RedisKeyFor("ratelimit:", key, ""),
                                     EncodeRedisState(State{7, 5, 6})};
          EXPECT_TRUE(side_->Command(set).ok());
        } else {
          EXPECT_EQ(current[0], (State{7, 5, 6}));
        }
        writes[0] = mine;
        return absl::OkStatus();
      }));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(*store_->Get(key), mine);
}

TEST_F(RedisStateStoreTest, ManyCallersNeverTakeMoreThanTheCapacity) {
  // 100 tokens that refill once per century: exactly 100 single-token consumes succeed.
  const LimitOp limit{StateKey{"hot", "k"}, Bucket(100, int64_t{36500} * 86400 * kSecond), 1};
  std::atomic<int> allowed{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        auto out = store_->Apply(Operation{absl::MakeConstSpan(&limit, 1), Mode::kConsume},
                                 SystemClock::Default());
        if (!out.ok()) {
          ++errors;
        } else if (out->allowed) {
          ++allowed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(allowed.load(), 100);
}

TEST_F(RedisStateStoreTest, ALimiterOnTheStoreIsAllOrNothing) {
  Limiter limiter(*store_, SystemClock::Default());
  LimitRequest user{"user", "u1", Bucket(10, 3600 * kSecond), 2};
  LimitRequest org{"org", "o1", Bucket(3, 3600 * kSecond), 3};
  ASSERT_OK(limiter.Evaluate({org}, Mode::kConsume));
  auto v = limiter.Evaluate({user, org}, Mode::kConsume);
  ASSERT_OK(v);
  EXPECT_FALSE(v->allowed);
  EXPECT_EQ(v->denied_by, 1);
  EXPECT_FALSE(store_->Get(StateKey{"user", "u1"})->has_value());
}

TEST_F(RedisStateStoreTest, HealthFollowsTheServerAndCloseRefusesEverything) {
  EXPECT_OK(store_->Health());
  ASSERT_OK(store_->Close());
  EXPECT_EQ(store_->Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Consume(StateKey{"a", "b"}, 1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Get(StateKey{"a", "b"}).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RedisStateStoreTest, AStoppedServerIsUnavailableNotACrash) {
  server_.reset();  // stops redis-server
  EXPECT_EQ(store_->Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Consume(StateKey{"a", "b"}, 1).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ratelimit
