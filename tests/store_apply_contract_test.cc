// The contract of StateStore::Apply that every backend must meet: all-or-nothing, the same key
// twice is one state, checks write nothing, denials report balances as they are, the clock guard,
// and that the outcome and the stored states are exactly what storage/algebra gives for the states
// the operation saw. Each backend is one entry of Backends(); a backend whose engine keeps its own
// clock is given the test's clock as its override.
#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/memory/memory_state_store.h"
#include "storage/redis/redis_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisStandalone;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::TempDir;

struct OpenedStore {
  std::unique_ptr<StateStore> store;
  std::shared_ptr<void> keep_alive;  // what the store needs (a server process), if anything
};

struct Backend {
  std::string name;
  // Opens an empty store in `dir` whose decisions take their time from `clock`. UNIMPLEMENTED
  // when the backend cannot run on this machine (redis-server is not installed).
  std::function<absl::StatusOr<OpenedStore>(const std::string& dir, const Clock& clock)> open;
};

void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

// The Redis store over the production cluster client, on `topology`.
Backend RedisBackend(std::string name, RedisTopology topology) {
  return {std::move(name),
          [topology](const std::string&, const Clock& clock) -> absl::StatusOr<OpenedStore> {
            auto target = testing::StartRedisTestTarget(topology);
            if (!target.ok()) return target.status();
            auto opened = testing::OpenRedisTestStore(*target, &clock);
            if (!opened.ok()) return opened.status();
            return OpenedStore{*std::move(opened), target->servers};
          }};
}

std::vector<Backend> Backends() {
  return {
      {"Memory",
       [](const std::string&, const Clock&) -> absl::StatusOr<OpenedStore> {
         return OpenedStore{std::make_unique<MemoryStateStore>(), nullptr};
       }},
      {"RocksDb",
       [](const std::string& dir, const Clock& clock) -> absl::StatusOr<OpenedStore> {
         RocksDbStateStoreOptions o;
         o.path = dir + "/db";
         o.clock = &clock;
         auto opened = RocksDbStateStore::Open(o);
         if (!opened.ok()) return opened.status();
         return OpenedStore{*std::move(opened), nullptr};
       }},
      {"RedisStandalone",
       [](const std::string& dir, const Clock& clock) -> absl::StatusOr<OpenedStore> {
         if (!RedisServerInstalled()) {
           return absl::FailedPreconditionError(
               "redis-server is required (scripts/setup.sh installs it)");
         }
         auto server = RedisStandalone::Start();
         if (!server.ok()) return server.status();
         auto connection = (*server)->Connect();
         if (!connection.ok()) return connection.status();
         RedisStateStoreOptions o;
         o.clock_override = &clock;  // the test's clock instead of the server's TIME
         auto opened = RedisStateStore::Open(*std::move(connection), o);
         if (!opened.ok()) return opened.status();
         return OpenedStore{*std::move(opened),
                            std::shared_ptr<RedisStandalone>(*std::move(server))};
       }},
      RedisBackend("RedisStandaloneViaClusterClient", RedisTopology::kStandalone),
      RedisBackend("RedisCluster", RedisTopology::kCluster),
  };
}

LimitConfig Bucket(double rate, std::optional<double> capacity = {},
                   std::optional<double> max_reserved = {}) {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = rate;
  c.period_us = kSecond;
  c.capacity = capacity;
  c.max_reserved = max_reserved;
  return c;
}

LimitConfig Window(double rate, int64_t period_us) {
  LimitConfig c;
  c.kind = LimitKind::kFixedWindow;
  c.rate = rate;
  c.period_us = period_us;
  return c;
}

class StoreApplyContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto opened = GetParam().open(dir_.path(), clock_);
    ASSERT_OK(opened);
    keep_alive_ = std::move(opened->keep_alive);
    store_ = std::move(opened->store);
  }

  absl::StatusOr<Outcome> Apply(const std::vector<LimitOp>& limits, Mode mode) {
    return store_->Apply(Operation{limits, mode}, clock_);
  }

  // ApplyAsync, waiting for its answer.
  absl::StatusOr<Outcome> ApplyAsyncAndWait(const std::vector<LimitOp>& limits, Mode mode) {
    absl::Notification answered;
    absl::StatusOr<Outcome> result = absl::UnknownError("not answered");
    store_->ApplyAsync(Operation{limits, mode}, clock_, [&](absl::StatusOr<Outcome> outcome) {
      result = std::move(outcome);
      answered.Notify();
    });
    answered.WaitForNotification();
    return result;
  }

  // Random operations over a few keys, each checked against storage/algebra on the states it saw;
  // through ApplyAsync when `async`.
  void RandomOperationsMatchTheAlgebra(bool async);

  std::optional<State> Stored(const StateKey& key) {
    auto s = store_->Get(key);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : std::nullopt;
  }

  TempDir dir_;
  // Ahead of the real clock, so that an engine that expires states by its own clock keeps them
  // for the whole test.
  FakeClock clock_{int64_t{4102444800} * kSecond};  // 2100-01-01
  std::shared_ptr<void> keep_alive_;
  std::unique_ptr<StateStore> store_;
};

TEST_P(StoreApplyContractTest, AllowedOperationTakesFromEveryLimitAtTheClocksTime) {
  const StateKey user{"user", "u1"};
  const StateKey org{"org", "o1"};
  auto out = Apply({{user, Bucket(10), 2}, {org, Bucket(100), 5}}, Mode::kConsume);
  ASSERT_OK(out);
  EXPECT_TRUE(out->allowed);
  EXPECT_EQ(out->now_us, clock_.NowMicros());
  ASSERT_EQ(out->decisions.size(), 2u);
  EXPECT_EQ(out->decisions[0].value, 8);
  EXPECT_EQ(out->decisions[1].value, 95);
  EXPECT_EQ(Stored(user), out->decisions[0].next);
  EXPECT_EQ(Stored(org), out->decisions[1].next);
  EXPECT_EQ(Stored(user)->ts_us, clock_.NowMicros());
}

TEST_P(StoreApplyContractTest, OneDenialTakesNothingAndReportsBalancesAsTheyAre) {
  const StateKey user{"user", "u1"};
  const StateKey org{"org", "o1"};
  ASSERT_OK(Apply({{org, Bucket(3), 3}}, Mode::kConsume));
  const std::optional<State> org_before = Stored(org);
  auto out = Apply({{user, Bucket(10), 4}, {org, Bucket(3), 1}}, Mode::kConsume);
  ASSERT_OK(out);
  EXPECT_FALSE(out->allowed);
  EXPECT_TRUE(out->decisions[0].allowed);
  EXPECT_EQ(out->decisions[0].value, 10);  // would have been 6, but nothing was taken
  EXPECT_FALSE(out->decisions[1].allowed);
  EXPECT_EQ(out->decisions[1].reason, DenyReason::kInsufficientTokens);
  EXPECT_EQ(Stored(user), std::nullopt);
  EXPECT_EQ(Stored(org), org_before);
}

TEST_P(StoreApplyContractTest, SameKeyTwiceIsOneStateAndTheSecondSeesTheFirst) {
  const StateKey k{"user", "u1"};
  auto out = Apply({{k, Bucket(10), 6}, {k, Bucket(10), 3}}, Mode::kConsume);
  ASSERT_OK(out);
  EXPECT_TRUE(out->allowed);
  EXPECT_EQ(out->decisions[0].value, 4);
  EXPECT_EQ(out->decisions[1].value, 1);
  EXPECT_EQ(Stored(k)->value, 1);

  // 1 left: taking 1 then 1 more denies the whole operation and leaves the 1.
  auto denied = Apply({{k, Bucket(10), 1}, {k, Bucket(10), 1}}, Mode::kConsume);
  ASSERT_OK(denied);
  EXPECT_FALSE(denied->allowed);
  EXPECT_TRUE(denied->decisions[0].allowed);
  EXPECT_FALSE(denied->decisions[1].allowed);
  EXPECT_EQ(Stored(k)->value, 1);
}

TEST_P(StoreApplyContractTest, CheckAnswersWhatConsumeWouldAndWritesNothing) {
  const StateKey k{"user", "u1"};
  ASSERT_OK(Apply({{k, Bucket(10), 7}}, Mode::kConsume));
  const std::optional<State> before = Stored(k);
  auto check = Apply({{k, Bucket(10), 3}}, Mode::kCheck);
  ASSERT_OK(check);
  EXPECT_TRUE(check->allowed);
  EXPECT_EQ(check->decisions[0].value, 3);  // the balance, nothing taken
  EXPECT_EQ(Stored(k), before);
  auto check_denied = Apply({{k, Bucket(10), 4}}, Mode::kCheck);
  ASSERT_OK(check_denied);
  EXPECT_FALSE(check_denied->allowed);
  EXPECT_EQ(Stored(k), before);
}

TEST_P(StoreApplyContractTest, ReservationsOweDownToMaxReservedThenDeny) {
  const StateKey k{"jobs", "j"};
  const LimitConfig c = Bucket(10, {}, 5);
  auto first = Apply({{k, c, 14}}, Mode::kReserve);
  ASSERT_OK(first);
  EXPECT_TRUE(first->allowed);
  EXPECT_EQ(first->decisions[0].value, -4);
  EXPECT_EQ(first->decisions[0].retry_at_us, clock_.NowMicros() + 4 * kSecond / 10);
  auto second = Apply({{k, c, 2}}, Mode::kReserve);
  ASSERT_OK(second);
  EXPECT_FALSE(second->allowed);
  EXPECT_EQ(second->decisions[0].reason, DenyReason::kMaxReservedExceeded);
  EXPECT_EQ(Stored(k)->value, -4);
}

TEST_P(StoreApplyContractTest, CountAboveCapacityIsNeverAllowedAndWritesNothing) {
  const StateKey k{"user", "u1"};
  auto out = Apply({{k, Bucket(10), 11}}, Mode::kConsume);
  ASSERT_OK(out);
  EXPECT_FALSE(out->allowed);
  EXPECT_EQ(out->decisions[0].reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(out->decisions[0].retry_at_us.has_value());
  EXPECT_EQ(Stored(k), std::nullopt);
}

TEST_P(StoreApplyContractTest, ClockSteppingBackNeverMovesAStateBackInTime) {
  const StateKey k{"user", "u1"};
  ASSERT_OK(Apply({{k, Bucket(10), 10}}, Mode::kConsume));
  const int64_t t0 = clock_.NowMicros();
  clock_.Advance(-5 * kSecond);
  auto out = Apply({{k, Bucket(10), 1}}, Mode::kConsume);
  ASSERT_OK(out);
  EXPECT_FALSE(out->allowed);  // no refill credited for time going back
  EXPECT_EQ(out->decisions[0].value, 0);
  clock_.Set(t0 + kSecond / 10);
  auto later = Apply({{k, Bucket(10), 1}}, Mode::kConsume);
  ASSERT_OK(later);
  EXPECT_TRUE(later->allowed);
  EXPECT_EQ(Stored(k)->ts_us, t0 + kSecond / 10);
}

TEST_P(StoreApplyContractTest, SourcesAreSeparateNamespaces) {
  const StateKey defined{"n", "k", LimitSource::kDefined};
  const StateKey inline_key{"n", "k", LimitSource::kInline};
  ASSERT_OK(Apply({{defined, Bucket(5), 5}}, Mode::kConsume));
  auto out = Apply({{inline_key, Bucket(5), 5}}, Mode::kConsume);
  ASSERT_OK(out);
  EXPECT_TRUE(out->allowed);
}

// Random operations: every outcome and every stored state is exactly what DecideOperation gives
// for the states read just before and the clock's time.
void StoreApplyContractTest::RandomOperationsMatchTheAlgebra(bool async) {
  std::mt19937_64 rng(20261123);
  const std::vector<StateKey> keys = {{"a", "1"}, {"a", "2"}, {"b", "1"}, {"w", "1"}};
  auto config_for = [&](size_t k) {
    switch (k) {
      case 0:
        return Bucket(10, 20, 15);
      case 1:
        return Bucket(0.5, {}, {});
      case 2:
        return Bucket(1e6, 1e6, 0);
      default:
        return Window(7, 3 * kSecond);
    }
  };
  const Mode modes[] = {Mode::kCheck, Mode::kConsume, Mode::kReserve};
  for (int step = 0; step < 1500; ++step) {
    std::vector<LimitOp> limits;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      const size_t k = rng() % keys.size();
      const double count = std::ldexp(static_cast<double>(1 + rng() % 1000), -4);
      limits.push_back(LimitOp{keys[k], config_for(k), count});
    }
    const Mode mode = modes[rng() % 3];
    clock_.Advance(static_cast<int64_t>(rng() % (kSecond / 2)) - kSecond / 20);

    const OperationKeys distinct = DistinctKeys(limits);
    std::vector<std::optional<State>> before;
    for (const StateKey& k : distinct.keys) before.push_back(Stored(k));
    std::vector<std::optional<State>> writes(distinct.keys.size());
    const Outcome expected = DecideOperation(Operation{limits, mode}, distinct, before,
                                             clock_.NowMicros(), absl::MakeSpan(writes));
    auto got = async ? ApplyAsyncAndWait(limits, mode) : Apply(limits, mode);
    ASSERT_OK(got);
    ASSERT_EQ(got->allowed, expected.allowed) << "step " << step;
    ASSERT_EQ(got->now_us, expected.now_us);
    for (size_t i = 0; i < limits.size(); ++i) {
      const Decision& g = got->decisions[i];
      const Decision& e = expected.decisions[i];
      ASSERT_EQ(g.allowed, e.allowed) << "step " << step << " limit " << i;
      ASSERT_EQ(g.reason, e.reason);
      ASSERT_EQ(g.value, e.value);
      ASSERT_EQ(g.retry_at_us, e.retry_at_us);
      ASSERT_EQ(g.next, e.next);
    }
    for (size_t s = 0; s < distinct.keys.size(); ++s) {
      ASSERT_EQ(Stored(distinct.keys[s]), writes[s] ? writes[s] : before[s]) << "step " << step;
    }
  }
}

TEST_P(StoreApplyContractTest, RandomOperationsMatchTheAlgebraExactly) {
  RandomOperationsMatchTheAlgebra(/*async=*/false);
}

TEST_P(StoreApplyContractTest, RandomAsyncOperationsMatchTheAlgebraExactly) {
  RandomOperationsMatchTheAlgebra(/*async=*/true);
}

TEST_P(StoreApplyContractTest, AsyncOperationsInFlightTogetherEachSeeTheEarlierOnes) {
  // 50 takes of one from a bucket of 30, all started before any is answered: exactly 30 are
  // allowed, the balance ends at 0, and every answer reports the balance its take left.
  const StateKey key{"async", "k"};
  const std::vector<LimitOp> take = {LimitOp{key, Bucket(1e-6, 30), 1}};
  constexpr int kCalls = 50;
  absl::Mutex mu;
  std::vector<absl::StatusOr<Outcome>> answers;
  for (int i = 0; i < kCalls; ++i) {
    store_->ApplyAsync(Operation{take, Mode::kConsume}, clock_,
                       [&](absl::StatusOr<Outcome> outcome) {
                         absl::MutexLock lock(&mu);
                         answers.push_back(std::move(outcome));
                       });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](std::vector<absl::StatusOr<Outcome>>* a) { return a->size() == kCalls; }, &answers));
  }
  int allowed = 0;
  std::vector<double> values;
  for (const absl::StatusOr<Outcome>& a : answers) {
    ASSERT_OK(a);
    if (a->allowed) {
      ++allowed;
      values.push_back(a->decisions[0].value);
    }
  }
  EXPECT_EQ(allowed, 30);
  std::sort(values.begin(), values.end());
  for (int i = 0; i < static_cast<int>(values.size()); ++i) {
    EXPECT_NEAR(values[i], i, 1e-6) << "two takes saw the same balance";
  }
  std::optional<State> stored = Stored(key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_NEAR(stored->value, 0, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreApplyContractTest, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ratelimit
