// The Redis store while the slot of a hot key is migrated to another primary (CLUSTER SETSLOT
// IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) under concurrent consumers: ASK and MOVED are
// followed, no error reaches a caller, and every grant is counted exactly once. Also the store's
// client metrics (MetricFamilies), which count those redirections.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_state_store.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisCluster;
using ::ratelimit::testing::RedisServerInstalled;

// The value of the sample of `family` whose labels are `labels` (-1 when there is none).
double Sample(StateStore& store, const std::string& family,
              const std::vector<std::string>& labels) {
  for (const StateStore::MetricFamily& f : store.MetricFamilies()) {
    if (f.name != family) continue;
    for (const auto& [values, v] : f.read()) {
      if (values == labels) return v;
    }
  }
  return -1;
}

TEST(RedisMigrationTest, AHotKeysSlotMigratedUnderLoadLosesNothingAndOverGrantsNothing) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  auto cluster = RedisCluster::Start(3, 0);
  ASSERT_OK(cluster);
  redis::RedisClusterClient::Options co;
  co.seeds = (*cluster)->seeds();
  auto client = redis::RedisClusterClient::Connect(co);
  ASSERT_OK(client);
  // A fixed clock: the quota never refills, so the state counts every take.
  FakeClock clock{int64_t{4102444800} * kSecond};
  RedisStateStoreOptions options;
  options.key_prefix = "mig:";
  options.clock_override = &clock;
  auto opened = RedisStateStore::Open(*std::move(client), options);
  ASSERT_OK(opened);
  RedisStateStore& store = **opened;

  const StateKey key{"quota", "hot"};
  const int slot = redis::KeySlot(RedisKeyFor(options.key_prefix, key, RedisHashTagOfKey(key.key)));
  auto source = (*cluster)->PrimaryOf(slot);
  ASSERT_OK(source);
  const int target = (*source + 1) % 3;
  auto source_id = (*cluster)->IdOf(*source);
  auto target_id = (*cluster)->IdOf(target);
  ASSERT_OK(source_id);
  ASSERT_OK(target_id);
  auto& from = (*cluster)->server(*source);
  auto& to = (*cluster)->server(target);

  LimitConfig quota;
  quota.kind = LimitKind::kTokenBucket;
  quota.rate = 1;
  quota.period_us = 3600 * kSecond;
  quota.capacity = 1e6;
  const std::vector<LimitOp> op = {{key, quota, 1}};

  std::atomic<bool> stop{false};
  std::atomic<int> allowed{0}, denied{0}, errors{0};
  std::string first_error;
  absl::Mutex mu;
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&] {
      while (!stop.load()) {
        auto out = store.Apply(Operation{op, Mode::kConsume}, clock);
        if (!out.ok()) {
          if (errors++ == 0) {
            absl::MutexLock l(&mu);
            first_error = out.status().ToString();
          }
        } else if (out->allowed) {
          ++allowed;
        } else {
          ++denied;
        }
      }
    });
  }
  auto wait_allowed = [&](int more) {
    const int goal = allowed.load() + more;
    return testing::Eventually([&] { return allowed.load() >= goal; });
  };
  ASSERT_TRUE(wait_allowed(200));

  // The migration, as redis-cli --cluster reshard does it.
  const std::string s = std::to_string(slot);
  ASSERT_OK(to.Cli({"CLUSTER", "SETSLOT", s, "IMPORTING", *source_id}));
  ASSERT_OK(from.Cli({"CLUSTER", "SETSLOT", s, "MIGRATING", *target_id}));
  ASSERT_TRUE(wait_allowed(100));  // served by the source while the key is still there
  auto keys = from.Cli({"CLUSTER", "GETKEYSINSLOT", s, "1000"});
  ASSERT_OK(keys);
  std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(to.port()), "", "0",
                                      "5000",    "KEYS"};
  for (absl::string_view k : absl::StrSplit(*keys, '\n', absl::SkipWhitespace())) {
    migrate.emplace_back(k);
  }
  ASSERT_GT(migrate.size(), 7u) << "the hot key is not in its slot";
  auto migrated = from.Cli(migrate);
  ASSERT_OK(migrated);
  EXPECT_EQ(*migrated, "OK");
  // The key now lives on the target, the slot still on the source: the source answers ASK.
  ASSERT_TRUE(
      testing::Eventually([&] { return Sample(store, "redis_redirects_total", {"ask"}) >= 1; }));
  ASSERT_TRUE(wait_allowed(100));
  for (auto* node : {&to, &from}) {
    ASSERT_OK(node->Cli({"CLUSTER", "SETSLOT", s, "NODE", *target_id}));
  }
  const int other = 3 - *source - target;
  ASSERT_OK((*cluster)->server(other).Cli({"CLUSTER", "SETSLOT", s, "NODE", *target_id}));
  // The slot now belongs to the target: the client, still routing to the source, gets MOVED.
  ASSERT_TRUE(
      testing::Eventually([&] { return Sample(store, "redis_redirects_total", {"moved"}) >= 1; }));
  ASSERT_TRUE(wait_allowed(200));
  stop = true;
  for (std::thread& t : callers) t.join();

  EXPECT_EQ(errors.load(), 0) << first_error;
  EXPECT_EQ(denied.load(), 0);
  // Every grant was taken exactly once: the state on the target says so.
  auto state = store.Get(key);
  ASSERT_OK(state);
  ASSERT_TRUE(state->has_value());
  EXPECT_EQ((*state)->value, *quota.capacity - allowed.load());
  // The metrics count the traffic per node: both primaries of the slot answered.
  EXPECT_GT(Sample(store, "redis_round_trips_total", {}), 0);
  EXPECT_GE(Sample(store, "redis_commands_total", {}), allowed.load());
  EXPECT_GT(Sample(store, "redis_replies_total", {from.address()}), 0);
  EXPECT_GT(Sample(store, "redis_replies_total", {to.address()}), 0);
  EXPECT_GT(Sample(store, "redis_reply_seconds_total", {to.address()}), 0);
  EXPECT_EQ(Sample(store, "redis_command_errors_total", {"error"}), 0);
}

}  // namespace
}  // namespace ratelimit
