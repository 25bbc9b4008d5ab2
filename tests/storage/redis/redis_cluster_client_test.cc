#include "storage/redis/cluster/redis_cluster_client.h"

#include <sched.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_slot.h"
#include "tests/storage/redis/cluster_client_test_util.h"
#include "tests/support/redis_process.h"
#include "tests/support/test_support.h"

// The cluster client on healthy peers: routing by slot, MOVED and ASK during a live migration,
// its I/O thread, and how it batches and pipelines. When peers fail (failovers, stopped, silent
// or unreachable servers, bad seeds, TRYAGAIN and CLUSTERDOWN): redis_cluster_client_failures_test.

namespace ratelimit::redis {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::RedisCluster;
using ::ratelimit::testing::RedisServer;

TEST(RedisClusterClientTest, RoutesKeysToThePrimaryOfTheirSlotOnAllThreePrimaries) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->first_address());
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->cluster_mode());
  ASSERT_EQ(client->Primaries().size(), 3u);

  std::set<int> primaries_used;
  for (int i = 0; i < 60; ++i) {
    const std::string key = absl::StrCat("route:", i);
    absl::StatusOr<Reply> set = client->ExecuteSync(key, {"SET", key, absl::StrCat("v", i)});
    ASSERT_OK(set);
    ASSERT_EQ(set->str, "OK") << set->DebugString();
    // The key is on the node the cluster says serves its slot, read without redirection.
    absl::StatusOr<int> owner = cluster->PrimaryOf(KeySlot(key));
    ASSERT_OK(owner);
    primaries_used.insert(*owner);
    absl::StatusOr<std::string> value = cluster->server(*owner).Cli({"GET", key});
    ASSERT_OK(value);
    EXPECT_EQ(*value, absl::StrCat("v", i)) << key;
    EXPECT_EQ(client->PrimaryForSlot(KeySlot(key)), cluster->server(*owner).address());
  }
  EXPECT_EQ(primaries_used.size(), 3u);
  const RedisClientMetrics m = client->Metrics();
  EXPECT_EQ(m.moved, 0u);  // routed right the first time
  EXPECT_EQ(m.ask, 0u);
  EXPECT_EQ(m.latency_by_node.size(), 3u);
}

TEST(RedisClusterClientTest, HashTaggedKeysLandTogether) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds());
  ASSERT_NE(client, nullptr);
  for (int org = 0; org < 10; ++org) {
    const std::string a = absl::StrCat("user:{org", org, "}:1");
    const std::string b = absl::StrCat("limit:{org", org, "}:total");
    ASSERT_EQ(KeySlot(a), KeySlot(b));
    // A multi-key command is refused with CROSSSLOT unless both keys are in one slot.
    absl::StatusOr<Reply> r = client->ExecuteSync(a, {"MSET", a, "1", b, "2"});
    ASSERT_OK(r);
    EXPECT_EQ(r->type, Reply::Type::kStatus) << r->DebugString();
    absl::StatusOr<int> owner = cluster->PrimaryOf(KeySlot(a));
    ASSERT_OK(owner);
    absl::StatusOr<std::string> both = cluster->server(*owner).Cli({"MGET", a, b});
    ASSERT_OK(both);
    EXPECT_EQ(*both, "1\n2");
  }
  // Without a shared tag the same command spans slots and the server refuses it.
  absl::StatusOr<Reply> cross = client->ExecuteSync("x:1", {"MSET", "x:1", "1", "x:2", "2"});
  ASSERT_OK(cross);
  ASSERT_TRUE(cross->is_error());
  EXPECT_TRUE(absl::StartsWith(cross->str, "CROSSSLOT")) << cross->str;
}

TEST(RedisClusterClientTest, RunsACommandOnEveryPrimary) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds());
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 50; ++i)
    ASSERT_OK(client->ExecuteSync(absl::StrCat("k", i), {"SET", absl::StrCat("k", i), "x"}));
  absl::StatusOr<std::vector<NodeReply>> sizes = client->ExecuteOnEachPrimarySync({"DBSIZE"});
  ASSERT_OK(sizes);
  ASSERT_EQ(sizes->size(), 3u);
  int64_t total = 0;
  std::vector<std::string> addresses;
  for (const NodeReply& n : *sizes) {
    ASSERT_OK(n.reply);
    total += n.reply->integer;
    addresses.push_back(n.address);
  }
  EXPECT_EQ(total, 50);
  EXPECT_EQ(addresses, client->Primaries());
}

TEST(RedisClusterClientTest, StandaloneServerServesEverySlot) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  // The first seed is unreachable: the next one is tried.
  std::unique_ptr<RedisClusterClient> client =
      ConnectOrDie(absl::StrCat("127.0.0.1:", ClosedPort(), ",", (*server)->address()));
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->cluster_mode());
  EXPECT_EQ(client->Primaries(), std::vector<std::string>{(*server)->address()});
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(IncrOrDie(*client, absl::StrCat("s:", i % 10)), i / 10 + 1);
  absl::StatusOr<std::string> dbsize = (*server)->Cli({"DBSIZE"});
  ASSERT_OK(dbsize);
  EXPECT_EQ(*dbsize, "10");
  // An error reply of the server is a reply, not a failed status.
  ASSERT_OK(client->ExecuteSync("str", {"SET", "str", "abc"}));
  absl::StatusOr<Reply> wrong = client->ExecuteSync("str", {"INCR", "str"});
  ASSERT_OK(wrong);
  EXPECT_TRUE(wrong->is_error());
  EXPECT_TRUE(absl::StartsWith(wrong->str, "ERR")) << wrong->str;
  EXPECT_FALSE(wrong->ToStatus().ok());
}

// The policy of the thread of this process named `name` (-1 when there is none).
int PolicyOfThreadNamed(const std::string& name) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string line;
    std::getline(comm, line);
    if (line == name) return sched_getscheduler(std::stoi(entry.path().filename().string()));
  }
  return -1;
}

TEST(RedisClusterClientTest, TheIoThreadIsNamedAndScheduledAsAsked) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  RedisClusterClient::Options options;
  options.io_thread_scheduling = WorkerScheduling::kBatch;
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie((*server)->address(), options);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(PolicyOfThreadNamed("rl-redis-io"), SCHED_BATCH);
  client.reset();
  EXPECT_EQ(PolicyOfThreadNamed("rl-redis-io"), -1);  // joined

  client = ConnectOrDie((*server)->address());  // default: the process's policy
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(PolicyOfThreadNamed("rl-redis-io"), sched_getscheduler(0));
}

// A slot moves from one primary to another (IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE) while
// callers increment keys of that slot: every command succeeds and no increment is lost.
TEST(RedisClusterClientTest, FollowsMovedDuringALiveSlotMigration) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Seconds(5);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds(), options);
  ASSERT_NE(client, nullptr);
  const int slot = KeySlot("mig");
  absl::StatusOr<int> src = cluster->PrimaryOf(slot);
  ASSERT_OK(src);
  int dst = -1;
  for (const std::string& p : client->Primaries()) {
    if (cluster->IndexOf(p) != *src) dst = cluster->IndexOf(p);
  }
  ASSERT_GE(dst, 0);
  absl::StatusOr<std::string> src_id = cluster->IdOf(*src), dst_id = cluster->IdOf(dst);
  ASSERT_OK(src_id);
  ASSERT_OK(dst_id);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> successes{0};
  std::atomic<int64_t> failures{0};
  std::vector<std::thread> callers;
  std::mutex error_mu;
  std::string first_error;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = absl::StrCat("{mig}:", (t * 7 + i) % 20);
        absl::StatusOr<Reply> r = client->ExecuteSync(key, {"INCR", key});
        if (r.ok() && r->type == Reply::Type::kInteger) {
          ++successes;
        } else {
          ++failures;
          std::lock_guard<std::mutex> l(error_mu);
          if (first_error.empty()) first_error = r.ok() ? r->DebugString() : r.status().ToString();
        }
      }
    });
  }
  // The callers stop and are joined however the test ends.
  absl::Cleanup join_callers = [&] {
    stop = true;
    for (std::thread& t : callers) t.join();
  };
  RedisServer& from = cluster->server(*src);
  RedisServer& to = cluster->server(dst);
  ASSERT_TRUE(Eventually([&] { return successes.load() > 200; }));
  ASSERT_OK(to.Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", *src_id}));
  ASSERT_OK(from.Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", *dst_id}));
  const int64_t before_migrate = successes.load();
  ASSERT_TRUE(Eventually([&] { return successes.load() > before_migrate + 100; }));
  while (true) {
    absl::StatusOr<std::string> keys =
        from.Cli({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "5"});
    ASSERT_OK(keys);
    if (keys->empty()) break;
    std::vector<std::string> args = {"MIGRATE", "127.0.0.1", std::to_string(to.port()), "", "0",
                                     "5000",    "KEYS"};
    for (absl::string_view k : absl::StrSplit(*keys, '\n')) args.emplace_back(k);
    absl::StatusOr<std::string> migrated = from.Cli(args);
    ASSERT_OK(migrated);
    ASSERT_EQ(*migrated, "OK");
    const int64_t now = successes.load();
    ASSERT_TRUE(Eventually([&] { return successes.load() > now + 20; }));
  }
  ASSERT_OK(to.Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", *dst_id}));
  ASSERT_OK(from.Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", *dst_id}));
  for (const std::string& p : client->Primaries()) {
    const int i = cluster->IndexOf(p);
    if (i != *src && i != dst) {
      ASSERT_OK(
          cluster->server(i).Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", *dst_id}));
    }
  }
  const int64_t after = successes.load();
  ASSERT_TRUE(Eventually([&] { return successes.load() > after + 200; }));
  std::move(join_callers).Invoke();

  EXPECT_EQ(failures.load(), 0) << first_error;
  int64_t total = 0;
  for (int k = 0; k < 20; ++k) {
    const std::string key = absl::StrCat("{mig}:", k);
    absl::StatusOr<Reply> r = client->ExecuteSync(key, {"GET", key});
    ASSERT_OK(r);
    int64_t v = 0;
    if (!r->is_nil()) {
      ASSERT_TRUE(absl::SimpleAtoi(r->str, &v)) << r->DebugString();
    }
    total += v;
  }
  EXPECT_EQ(total, successes.load());
  EXPECT_GE(client->Metrics().moved, 1u);
  EXPECT_EQ(client->PrimaryForSlot(slot), to.address());
  absl::StatusOr<std::string> on_dst = to.Cli({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)});
  ASSERT_OK(on_dst);
  EXPECT_EQ(*on_dst, "20");
}

// In the migration window, a key already moved is answered ASK by the source: the client sends
// ASKING and the command to the target, once, without changing its slot map.
TEST(RedisClusterClientTest, FollowsAskDuringTheMigrationWindow) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds());
  ASSERT_NE(client, nullptr);
  const std::string key = "{ask}:moved";
  const int slot = KeySlot(key);
  absl::StatusOr<int> src = cluster->PrimaryOf(slot);
  ASSERT_OK(src);
  int dst = -1;
  for (const std::string& p : client->Primaries()) {
    if (cluster->IndexOf(p) != *src) dst = cluster->IndexOf(p);
  }
  absl::StatusOr<std::string> src_id = cluster->IdOf(*src), dst_id = cluster->IdOf(dst);
  ASSERT_OK(src_id);
  ASSERT_OK(dst_id);
  for (int i = 1; i <= 3; ++i) ASSERT_EQ(IncrOrDie(*client, key), i);

  RedisServer& from = cluster->server(*src);
  RedisServer& to = cluster->server(dst);
  ASSERT_OK(to.Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", *src_id}));
  ASSERT_OK(from.Cli({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", *dst_id}));
  absl::StatusOr<std::string> migrated =
      from.Cli({"MIGRATE", "127.0.0.1", std::to_string(to.port()), key, "0", "5000"});
  ASSERT_OK(migrated);
  ASSERT_EQ(*migrated, "OK");

  EXPECT_EQ(IncrOrDie(*client, key), 4);            // moved key: ASK, found on the target
  EXPECT_EQ(IncrOrDie(*client, "{ask}:fresh"), 1);  // new key: ASK, created on the target
  RedisClientMetrics m = client->Metrics();
  EXPECT_EQ(m.ask, 2u);
  EXPECT_EQ(m.moved, 0u);
  EXPECT_EQ(client->PrimaryForSlot(slot), from.address());  // ASK does not change the map
  // The target holds both keys (read with ASKING on one connection, as the client does).
  absl::StatusOr<std::string> count = to.Cli({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)});
  ASSERT_OK(count);
  EXPECT_EQ(*count, "2");
}
// Commands queued while their primary has two writes awaiting replies do not wake the I/O
// thread: they wait for the next reply and then go out together, in one write. Here the server is
// stopped (SIGSTOP) with two commands written to it, 50 more are queued one after another, and
// the server continues: a few writes carry all 50, instead of one write each.
TEST(RedisClusterClientTest, CommandsQueuedWhileTheirPrimaryIsBusyShareOneWrite) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Seconds(30);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie((*server)->address(), options);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(IncrOrDie(*client, "q"), 1);
  const uint64_t before = client->Metrics().round_trips;

  (*server)->Pause();
  std::atomic<int> ok{0};
  std::atomic<int> remaining{52};
  absl::Notification all_done;
  auto count = [&](absl::StatusOr<Reply> r) {
    if (r.ok() && r->type == Reply::Type::kInteger) ++ok;
    if (--remaining == 0) all_done.Notify();
  };
  for (uint64_t written = 1; written <= 2; ++written) {
    client->Execute("q", {"INCR", "q"}, count);
    ASSERT_TRUE(Eventually([&] { return client->Metrics().round_trips == before + written; }));
  }
  for (int i = 0; i < 50; ++i) {
    client->Execute("q", {"INCR", "q"}, count);
    // Time for an I/O thread that was woken to take this command and write it alone (what a
    // client without this batching does); the assertions below do not depend on it.
    absl::SleepFor(absl::Milliseconds(1));
  }
  (*server)->Resume();
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(ok.load(), 52);
  const RedisClientMetrics m = client->Metrics();
  EXPECT_LE(m.round_trips - before, 5u);
  EXPECT_GE(m.max_pipeline_depth, 40u);
  EXPECT_EQ(IncrOrDie(*client, "q"), 54);
}

// The same batching never holds a command for one primary behind a reply awaited from another:
// with one primary stopped (SIGSTOP) and a command waiting on it, commands for the other
// primaries are answered at once.
TEST(RedisClusterClientTest, AStoppedPrimaryDoesNotHoldCommandsForTheOthers) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Seconds(60);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds(), options);
  ASSERT_NE(client, nullptr);
  const std::string stuck_key = "stuck";
  absl::StatusOr<int> stuck = cluster->PrimaryOf(KeySlot(stuck_key));
  ASSERT_OK(stuck);
  ASSERT_EQ(IncrOrDie(*client, stuck_key), 1);

  cluster->server(*stuck).Pause();
  absl::Notification stuck_done;
  client->Execute(stuck_key, {"INCR", stuck_key},
                  [&](absl::StatusOr<Reply>) { stuck_done.Notify(); });
  int others = 0;
  for (int i = 0; i < 32; ++i) {
    const std::string key = absl::StrCat("free:", i);
    if (client->PrimaryForSlot(KeySlot(key)) == cluster->server(*stuck).address()) continue;
    ++others;
    EXPECT_EQ(IncrOrDie(*client, key), 1) << key;
  }
  EXPECT_GT(others, 10);
  // Still waiting on the stopped primary: everything above was answered without it.
  EXPECT_FALSE(stuck_done.HasBeenNotified());
  cluster->server(*stuck).Resume();
  ASSERT_TRUE(stuck_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(IncrOrDie(*client, stuck_key), 3);
}

// 32 threads × 1000 INCRs over keys on every primary: exact totals, and commands of concurrent
// callers shared writes (a pipeline depth above one).
TEST(RedisClusterClientTest, ConcurrentCallersGetExactTotalsAndArePipelined) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Seconds(10);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds(), options);
  ASSERT_NE(client, nullptr);
  constexpr int kThreads = 32, kPerThread = 1000, kKeys = 16;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string key = absl::StrCat("total:", (t + i) % kKeys);
        absl::StatusOr<Reply> r = client->ExecuteSync(key, {"INCR", key});
        if (!r.ok() || r->type != Reply::Type::kInteger) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  int64_t total = 0;
  std::set<std::string> nodes;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = absl::StrCat("total:", k);
    absl::StatusOr<Reply> r = client->ExecuteSync(key, {"GET", key});
    ASSERT_OK(r);
    int64_t v = 0;
    ASSERT_TRUE(absl::SimpleAtoi(r->str, &v)) << r->DebugString();
    EXPECT_EQ(v, kThreads * kPerThread / kKeys) << key;
    total += v;
    nodes.insert(client->PrimaryForSlot(KeySlot(key)));
  }
  EXPECT_EQ(total, kThreads * kPerThread);
  EXPECT_EQ(nodes.size(), 3u);
  const RedisClientMetrics m = client->Metrics();
  EXPECT_GT(m.max_pipeline_depth, 1u);
  EXPECT_LT(m.round_trips, m.commands);
  EXPECT_EQ(m.errors, 0u);
}

TEST(RedisClusterClientTest, SyncCallFromACallbackIsRefusedNotADeadlock) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie((*server)->address());
  ASSERT_NE(client, nullptr);
  absl::Notification done;
  absl::Status inner;
  client->Execute("a", {"PING"}, [&](absl::StatusOr<Reply>) {
    inner = client->ExecuteSync("a", {"PING"}).status();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsFailedPrecondition(inner)) << inner;
}

}  // namespace
}  // namespace ratelimit::redis
