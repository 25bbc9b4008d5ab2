// The Redis store over the cluster client: requests whose keys span slots (per-slot takes under a
// hold, refunds), hash tags from keys, DeleteAll and Health on every primary, and what Open
// refuses. The store contract itself runs in store_apply_contract_test and
// state_store_property_test.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/factory/state_store_factory.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_state_store.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisServer;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;

LimitConfig Bucket(double rate, double capacity) {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = rate;
  c.period_us = kSecond;
  c.capacity = capacity;
  return c;
}

int SlotOf(const StateKey& key) {
  return redis::KeySlot(RedisKeyFor("p:", key, RedisHashTagOfKey(key.key)));
}

class RedisClusterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = testing::StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    auto store = testing::OpenRedisTestStore(target_, &clock_);
    ASSERT_OK(store);
    store_ = *std::move(store);
    redis::RedisClusterClient::Options co;
    co.seeds = target_.seeds;
    auto client = redis::RedisClusterClient::Connect(co);
    ASSERT_OK(client);
    client_ = *std::move(client);
  }

  // Every key of this test's prefix holding a hold record, on every primary.
  int Holds() {
    int holds = 0;
    auto replies =
        client_->ExecuteOnEachPrimarySync({"KEYS", absl::StrCat(target_.key_prefix, "*hold:*")});
    EXPECT_TRUE(replies.ok()) << replies.status();
    if (!replies.ok()) return -1;
    for (const redis::NodeReply& r : *replies) {
      EXPECT_TRUE(r.reply.ok()) << r.reply.status();
      if (r.reply.ok()) holds += static_cast<int>(r.reply->elements.size());
    }
    return holds;
  }

  double Value(const StateKey& key) {
    auto s = store_->Get(key);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok() || !s->has_value()) return -1;
    return (*s)->value;
  }

  FakeClock clock_{int64_t{4102444800} * kSecond};  // 2100: nothing expires during the test
  RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> store_;
  std::unique_ptr<redis::RedisClusterClient> client_;
};

TEST_F(RedisClusterStoreTest, ConcurrentRequestsAcrossSlotsNeverOverGrantAndDenialsRefundExactly) {
  const StateKey wide{"org", "o1"};     // plenty
  const StateKey narrow{"user", "u1"};  // 5
  ASSERT_NE(SlotOf(wide), SlotOf(narrow));
  ASSERT_NE(store_->Get(wide).ok(), false);
  const std::vector<LimitOp> op = {{wide, Bucket(1, 100), 1}, {narrow, Bucket(1, 5), 1}};
  std::atomic<int> allowed{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3; ++i) {  // 96 requests: `wide` never runs out
        auto out = store_->Apply(Operation{op, Mode::kConsume}, clock_);
        if (!out.ok()) {
          ++errors;
        } else if (out->allowed) {
          ++allowed;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // The clock stands still: no refill. Exactly the 5 of `narrow` were granted, and every denied
  // request gave back what it took from `wide`.
  EXPECT_EQ(allowed.load(), 5);
  EXPECT_EQ(Value(narrow), 0);
  EXPECT_EQ(Value(wide), 95);
}

// The same through ApplyAsync: the takes and refunds chain through their replies on the client's
// I/O thread, with the same bound.
TEST_F(RedisClusterStoreTest, AsyncRequestsAcrossSlotsNeverOverGrantAndDenialsRefundExactly) {
  const StateKey wide{"org", "o1"};
  const StateKey narrow{"user", "u1"};
  ASSERT_NE(SlotOf(wide), SlotOf(narrow));
  const std::vector<LimitOp> op = {{wide, Bucket(1, 100), 1}, {narrow, Bucket(1, 5), 1}};
  constexpr int kRequests = 96;
  absl::Mutex mu;
  int answered = 0, allowed = 0, errors = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRequests / 32; ++i) {
        store_->ApplyAsync(Operation{op, Mode::kConsume}, clock_, [&](absl::StatusOr<Outcome> out) {
          absl::MutexLock lock(&mu);
          ++answered;
          if (!out.ok()) {
            ++errors;
          } else if (out->allowed) {
            ++allowed;
          }
        });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kRequests; }, &answered),
                                    absl::Seconds(60)));
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(allowed, 5);
  }
  EXPECT_EQ(Value(narrow), 0);
  EXPECT_EQ(Value(wide), 95);
}

TEST_F(RedisClusterStoreTest, ApplyAsyncAcrossSlotsReturnsBeforeRedisAnswers) {
  const StateKey a{"user", "u1"};
  const StateKey b{"org", "o1"};
  ASSERT_NE(SlotOf(a), SlotOf(b));
  // Writes (and so our functions) wait on every primary until CLIENT UNPAUSE.
  auto paused = client_->ExecuteOnEachPrimarySync({"CLIENT", "PAUSE", "20000", "WRITE"});
  ASSERT_OK(paused);
  absl::Notification done;
  absl::StatusOr<Outcome> result = absl::UnknownError("unanswered");
  const std::vector<LimitOp> op = {{a, Bucket(1, 10), 1}, {b, Bucket(1, 10), 1}};
  store_->ApplyAsync(Operation{op, Mode::kConsume}, clock_, [&](absl::StatusOr<Outcome> out) {
    result = std::move(out);
    done.Notify();
  });
  // Returned while Redis cannot have run the takes.
  EXPECT_FALSE(done.HasBeenNotified());
  ASSERT_OK(client_->ExecuteOnEachPrimarySync({"CLIENT", "UNPAUSE"}));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_OK(result);
  EXPECT_TRUE(result->allowed);
  EXPECT_EQ(Value(a), 9);
  EXPECT_EQ(Value(b), 9);
}

TEST_F(RedisClusterStoreTest, ADeniedRequestLeavesTheOtherSlotsStateAsItWas) {
  const StateKey a{"user", "u1"};
  const StateKey b{"org", "o1"};
  ASSERT_NE(SlotOf(a), SlotOf(b));
  ASSERT_OK(store_->Apply(Operation{{{{a, Bucket(1, 10), 3}}}, Mode::kConsume}, clock_));
  ASSERT_OK(store_->Apply(Operation{{{{b, Bucket(1, 2), 2}}}, Mode::kConsume}, clock_));
  auto before = store_->Get(a);
  ASSERT_OK(before);
  const std::vector<LimitOp> op = {{a, Bucket(1, 10), 4}, {b, Bucket(1, 2), 1}};
  auto out = store_->Apply(Operation{op, Mode::kConsume}, clock_);
  ASSERT_OK(out);
  EXPECT_FALSE(out->allowed);
  EXPECT_TRUE(out->decisions[0].allowed);
  EXPECT_EQ(out->decisions[0].value, 7);  // the balance as it is
  auto after = store_->Get(a);
  ASSERT_OK(after);
  EXPECT_EQ(*after, *before);
}

TEST_F(RedisClusterStoreTest, KeysWithTheSameHashTagAreDecidedInOneCallWithoutAHold) {
  const StateKey user{"user", "{o7}u42"};
  const StateKey org{"org", "{o7}"};
  EXPECT_EQ(RedisHashTagOfKey(user.key), "o7");
  ASSERT_EQ(SlotOf(user), SlotOf(org));
  const std::vector<LimitOp> tagged = {{user, Bucket(1, 10), 1}, {org, Bucket(1, 100), 1}};
  auto out = store_->Apply(Operation{tagged, Mode::kConsume}, clock_);
  ASSERT_OK(out);
  EXPECT_TRUE(out->allowed);
  EXPECT_EQ(Holds(), 0);

  // The same request on untagged keys, in two slots, leaves a hold behind (until its TTL).
  const StateKey u{"user", "u42"};
  const StateKey o{"org", "o7"};
  ASSERT_NE(SlotOf(u), SlotOf(o));
  const std::vector<LimitOp> spread = {{u, Bucket(1, 10), 1}, {o, Bucket(1, 100), 1}};
  ASSERT_OK(store_->Apply(Operation{spread, Mode::kConsume}, clock_));
  EXPECT_EQ(Holds(), 2);
}

TEST_F(RedisClusterStoreTest, AHoldExpiresAfterTheHoldTtlTheFactoryWasGiven) {
  StoreOptions options;
  options.backend = "redis";
  options.redis.address = target_.seeds;
  options.redis.key_prefix = target_.key_prefix;
  options.redis.timeout = absl::Seconds(1);
  options.redis.hold_ttl = absl::Seconds(3);
  absl::StatusOr<OpenedStateStore> opened = OpenStateStore(options);
  ASSERT_OK(opened);
  const StateKey u{"user", "u42"};
  const StateKey o{"org", "o7"};
  ASSERT_NE(SlotOf(u), SlotOf(o));
  const std::vector<LimitOp> spread = {{u, Bucket(1, 10), 1}, {o, Bucket(1, 100), 1}};
  ASSERT_OK(opened->store->Apply(Operation{spread, Mode::kConsume}, clock_));
  auto replies =
      client_->ExecuteOnEachPrimarySync({"KEYS", absl::StrCat(target_.key_prefix, "*hold:*")});
  ASSERT_OK(replies);
  int holds = 0;
  for (const redis::NodeReply& r : *replies) {
    ASSERT_OK(r.reply);
    for (const redis::Reply& key : r.reply->elements) {
      auto ttl = client_->ExecuteSync(key.str, {"PTTL", key.str});
      ASSERT_OK(ttl);
      EXPECT_GT(ttl->integer, 0) << key.str;
      EXPECT_LE(ttl->integer, 3000) << key.str << " outlives --redis_hold_ttl";
      ++holds;
    }
  }
  EXPECT_EQ(holds, 2);

  // Less than twice the command timeout is refused: a hold must outlive its request.
  options.redis.hold_ttl = absl::Milliseconds(1500);
  absl::StatusOr<OpenedStateStore> refused = OpenStateStore(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "redis_hold_ttl")) << refused.status();
}

TEST_F(RedisClusterStoreTest, DeleteAllRemovesTheNameOnEveryPrimaryAndNothingElse) {
  std::set<std::string> primaries;
  for (int i = 0; i < 60; ++i) {
    const StateKey k{"gone", absl::StrCat("k", i)};
    primaries.insert(client_->PrimaryForSlot(SlotOf(k)));
    ASSERT_OK(store_->Apply(Operation{{{{k, Bucket(1, 10), 1}}}, Mode::kConsume}, clock_));
  }
  ASSERT_EQ(primaries.size(), 3u);
  const StateKey kept{"kept", "k0"};
  ASSERT_OK(store_->Apply(Operation{{{{kept, Bucket(1, 10), 1}}}, Mode::kConsume}, clock_));
  ASSERT_OK(store_->DeleteAll(LimitSource::kDefined, "gone"));
  for (int i = 0; i < 60; ++i) {
    auto s = store_->Get(StateKey{"gone", absl::StrCat("k", i)});
    ASSERT_OK(s);
    EXPECT_FALSE(s->has_value()) << i;
  }
  EXPECT_EQ(Value(kept), 9);
}

// The library's refund, driven directly on one server.
class RedisRefundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto server = RedisServer::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    redis::RedisClusterClient::Options co;
    co.seeds = server_->address();
    auto client = redis::RedisClusterClient::Connect(co);
    ASSERT_OK(client);
    client_ = *std::move(client);
    auto store = RedisStateStore::Open(std::move(client_), {});  // loads the library
    ASSERT_OK(store);
    auto again = redis::RedisClusterClient::Connect(co);
    ASSERT_OK(again);
    client_ = *std::move(again);
  }

  redis::Reply Call(std::vector<std::string> argv) {
    auto r = client_->ExecuteSync("k", std::move(argv));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : redis::Reply{};
  }
  // Takes `count` from key "k" (capacity 10, 10/s) at `now_us`, under hold `hold` when set.
  redis::Reply Take(double count, int64_t now_us, const std::string& hold = "") {
    const LimitOp limits[] = {{StateKey{"n", "k"}, Bucket(10, 10), count}};
    const Operation op{limits, Mode::kConsume};
    const std::string keys[] = {"k"};
    std::vector<std::string> argv = RedisApplyCommand(op, DistinctKeys(op.limits), keys, now_us);
    if (!hold.empty()) {
      argv[1] = std::string(kRedisTakeHeldFunction);
      argv[2] = "2";
      argv.insert(argv.begin() + 4, {hold, "60000"});
    }
    return Call(argv);
  }
  void Refund(const std::string& hold) {
    Call({"FCALL", std::string(kRedisRefundFunction), "2", "k", hold, "60000"});
  }
  State Stored() {
    redis::Reply r = Call({"GET", "k"});
    std::optional<State> s = DecodeRedisState(r.str);
    EXPECT_TRUE(s.has_value()) << r.str;
    return s.value_or(State{});
  }

  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<redis::RedisClusterClient> client_;
  const int64_t t0_ = int64_t{4102444800} * kSecond;
};

TEST_F(RedisRefundTest, ARefundOfAnUntouchedKeyRestoresItsStateExactly) {
  Take(3, t0_);
  const State before = Stored();
  Take(4, t0_ + kSecond / 10, "h1");
  Refund("h1");
  EXPECT_EQ(Stored(), before);
}

TEST_F(RedisRefundTest, AHoldIsOneLineOfFieldsPerKeyAndAJsonHoldOfVersion6IsStillRefunded) {
  Take(3, t0_);
  const std::string pre = Call({"GET", "k"}).str;
  const State before = Stored();
  Take(4, t0_ + kSecond / 10, "h1");
  const std::string post = Call({"GET", "k"}).str;
  const std::string hold = Call({"GET", "h1"}).str;
  // pre|post|before|taken|bucket|rate|period|capacity|offset, nothing else.
  const std::vector<std::string> fields = absl::StrSplit(hold, '|');
  ASSERT_EQ(fields.size(), 9u) << hold;
  EXPECT_EQ(fields[0], pre);
  EXPECT_EQ(fields[1], post);
  EXPECT_EQ(fields[3], "4");
  EXPECT_EQ(fields[4], "1");
  EXPECT_LT(hold.size(), 100u) << hold;

  // A hold as library version 6 wrote it (JSON), found by the current library after an upgrade.
  const std::string json =
      absl::StrCat(R"([{"pre":")", fields[0], R"(","post":")", fields[1], R"(","before":")",
                   fields[2], R"(","taken":")", fields[3], R"(","b":")", fields[4], R"(","rate":")",
                   fields[5], R"(","period":")", fields[6], R"(","cap":")", fields[7],
                   R"(","offset":")", fields[8], R"("}])");
  Call({"SET", "h2", json});
  Refund("h2");
  EXPECT_EQ(Stored(), before);
}

TEST_F(RedisRefundTest, ARefundAfterOtherTakesGivesBackWhatTheTakeWithholds) {
  Take(4, t0_, "h1");  // 6 left
  Take(3, t0_);        // 3 left; without the first take: 7
  Refund("h1");
  EXPECT_EQ(Stored().value, 7);
}

TEST_F(RedisRefundTest, ARefundNeverLiftsAKeyAboveWhereCapacityWouldHaveCutIt) {
  Take(4, t0_, "h1");      // 6 left
  Take(1, t0_ + kSecond);  // refilled to 10 (capped), 9 left: the same as without the take
  Refund("h1");
  EXPECT_EQ(Stored().value, 9);
}

TEST_F(RedisRefundTest, ATakeArrivingAfterItsRefundDoesNothing) {
  Refund("h1");  // the take timed out and was refunded before it ran
  redis::Reply late = Take(4, t0_, "h1");
  EXPECT_TRUE(late.is_error());
  EXPECT_TRUE(absl::StrContains(late.str, "HELD")) << late.str;
  EXPECT_TRUE(Call({"GET", "k"}).type == redis::Reply::Type::kNil);
  // A second refund of the same request gives nothing back either.
  Take(2, t0_);
  Refund("h1");
  EXPECT_EQ(Stored().value, 8);
}

TEST(RedisStoreHealthTest, UnavailableWhileNoPrimaryAnswers) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  auto target = testing::StartRedisTestTarget(RedisTopology::kStandalone);
  ASSERT_OK(target);
  auto store = testing::OpenRedisTestStore(*target, nullptr);
  ASSERT_OK(store);
  ASSERT_OK((*store)->Health());
  std::static_pointer_cast<RedisServer>(target->servers)->Kill9();
  const absl::Status down = (*store)->Health();
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_TRUE(absl::StrContains(down.message(), "no Redis primary answers")) << down;
}

TEST(RedisStoreOpenTest, ACusterWithUnservedSlotsIsRefusedNamingThem) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  auto node = RedisServer::Start({"--cluster-enabled", "yes"});
  ASSERT_OK(node);
  ASSERT_OK((*node)->Cli({"CLUSTER", "ADDSLOTSRANGE", "0", "99"}));
  redis::RedisClusterClient::Options co;
  co.seeds = (*node)->address();
  auto client = redis::RedisClusterClient::Connect(co);
  ASSERT_OK(client);
  auto store = RedisStateStore::Open(*std::move(client), {});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(store.status().message(), "slots 100-16383")) << store.status();
}

}  // namespace
}  // namespace ratelimit
