// A Redis primary killed (SIGKILL) under load, through a real ratelimit-server on a 3-primary /
// 3-replica cluster: the replica is promoted and the service answers again within a bound derived
// from the cluster's node timeout; the writes lost by asynchronous replication (and the over-grant
// they cause) are measured, and with --redis_wait_replicas=1 nothing acknowledged is lost: neither
// a grant, nor a lease of the holders that acquire and release a concurrency key's slots through
// a second server beside the first, which never hold more slots than its capacity.
// Also the client's WAIT itself: a batch is acknowledged only once enough replicas have it.
// The lease holders themselves are in failover_lease_holders.h.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_slot.h"
#include "tests/e2e/failover_lease_holders.h"
#include "tests/support/redis_process.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::redis::RedisClusterClient;
using ::ratelimit::testing::kSlots;
using ::ratelimit::testing::LeaseHolders;
using ::ratelimit::testing::LeaseRun;
using ::ratelimit::testing::RedisCluster;
using ::ratelimit::testing::RedisServer;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

bool RedisInstalled() { return testing::RunCommand("command -v redis-server").first == 0; }

// ---- WAIT in the client -------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RedisClusterClient>> ClientOn(const std::string& seeds,
                                                             int wait_replicas) {
  RedisClusterClient::Options o;
  o.seeds = seeds;
  o.command_timeout = absl::Seconds(2);
  o.wait_replicas = wait_replicas;
  return RedisClusterClient::Connect(o);
}

TEST(RedisWaitTest, AWriteIsAcknowledgedOnceItsReplicaHasIt) {
  ASSERT_TRUE(RedisInstalled());
  auto primary = RedisServer::Start();
  ASSERT_OK(primary);
  auto replica =
      RedisServer::Start({"--replicaof", "127.0.0.1", std::to_string((*primary)->port())});
  ASSERT_OK(replica);
  ASSERT_TRUE(testing::Eventually([&] {
    auto info = (*primary)->Cli({"INFO", "replication"});
    return info.ok() && absl::StrContains(*info, "state=online");
  }));
  auto client = ClientOn((*primary)->address(), 1);
  ASSERT_OK(client);
  auto r = (*client)->ExecuteSync("k", {"INCRBY", "k", "5"});
  ASSERT_OK(r);
  EXPECT_EQ(r->integer, 5);
  // The replica had it when the reply came.
  auto on_replica = (*replica)->Cli({"GET", "k"});
  ASSERT_OK(on_replica);
  EXPECT_EQ(*on_replica, "5");
  const redis::RedisClientMetrics m = (*client)->Metrics();
  EXPECT_GE(m.waits, 1u);
  EXPECT_EQ(m.wait_shortfalls, 0u);
}

TEST(RedisWaitTest, AWriteNoReplicaAcknowledgesIsUnavailable) {
  ASSERT_TRUE(RedisInstalled());
  auto primary = RedisServer::Start();
  ASSERT_OK(primary);
  auto replica =
      RedisServer::Start({"--replicaof", "127.0.0.1", std::to_string((*primary)->port())});
  ASSERT_OK(replica);
  ASSERT_TRUE(testing::Eventually([&] {
    auto info = (*primary)->Cli({"INFO", "replication"});
    return info.ok() && absl::StrContains(*info, "state=online");
  }));
  (*replica)->Pause();  // connected, but acknowledges nothing
  auto client = ClientOn((*primary)->address(), 1);
  ASSERT_OK(client);
  auto r = (*client)->ExecuteSync("k", {"INCRBY", "k", "5"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "WAIT")) << r.status();
  EXPECT_GE((*client)->Metrics().wait_shortfalls, 1u);
  // An error reply is not held for the WAIT (nothing was written).
  auto bad = (*client)->ExecuteSync("k", {"HGET", "k", "f"});
  ASSERT_OK(bad);
  EXPECT_TRUE(bad->is_error());
  // Without WAIT the same write is answered.
  auto plain = ClientOn((*primary)->address(), 0);
  ASSERT_OK(plain);
  auto ok = (*plain)->ExecuteSync("k", {"INCRBY", "k", "1"});
  ASSERT_OK(ok);
  EXPECT_EQ((*plain)->Metrics().waits, 0u);
  (*replica)->Resume();
}

TEST(RedisWaitFlagTest, ANegativeCountOrOneWithoutTheRedisStoreIsRefused) {
  TempDir dir;
  const std::string server = absl::StrCat(
      "timeout -s KILL 60 ", testing::BinaryPath("ratelimit-server"),
      " --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --data_dir=", dir.File("data"));
  const auto [c1, o1] = testing::RunCommand(
      server + " --store=redis --redis_address=127.0.0.1:1 --redis_wait_replicas=-1 2>&1");
  EXPECT_NE(c1, 0);
  EXPECT_TRUE(absl::StrContains(o1, "--redis_wait_replicas: must not be negative")) << o1;
  const auto [c2, o2] = testing::RunCommand(server + " --redis_wait_replicas=1 2>&1");
  EXPECT_NE(c2, 0);
  EXPECT_TRUE(absl::StrContains(o2, "--redis_wait_replicas: require --store=redis")) << o2;
  const auto [c3, o3] = testing::RunCommand(server + " --helpfull 2>&1");
  EXPECT_TRUE(absl::StrContains(o3, "-redis_wait_replicas")) << o3;
}

TEST(RedisHoldTtlFlagTest, LessThanTwiceTheTimeoutIsRefusedNamingBothFlags) {
  TempDir dir;
  const std::string server = absl::StrCat(
      "timeout -s KILL 60 ", testing::BinaryPath("ratelimit-server"),
      " --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --data_dir=", dir.File("data"),
      " --store=redis --redis_address=127.0.0.1:1");
  const auto [code, out] =
      testing::RunCommand(server + " --redis_timeout=2s --redis_hold_ttl=3s 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_TRUE(
      absl::StrContains(out, "--redis_hold_ttl: (3s) must be at least twice --redis_timeout (2s)"))
      << out;
}

// ---- Failover of a primary under load, through the server ---------------------------------

struct FailoverRun {
  int allowed = 0;            // allowed answers
  double elapsed_s = 0;       // from the first call sent to the last answer
  double outage_s = 0;        // from the kill to the first allowed answer after it
  int acked_quota = 0;        // allowed answers (each took 1 from the quota)
  double quota_taken = 0;     // what the quota's state says was taken, after the failover
  int acked_last_second = 0;  // allowed answers in the second before the kill
  int in_flight_at_kill = 0;  // calls sent before the kill and answered after it
  std::string metrics;        // the server's /metrics after the run
};

constexpr double kCapacity = 10;
constexpr double kRate = 10;  // per second
constexpr double kQuota = 1000000;

// One server on a fresh 3+3 cluster; 16 callers send {hot, quota} requests on one key (both
// limits in one slot: one atomic call) for 2 s, then the key's primary is killed; the run goes
// on until 2 s after the first allowed answer following the kill.
// With WAIT the cluster has two replicas per primary, so that the promoted one still has a
// replica to acknowledge its writes (with one, every write after the failover is UNAVAILABLE,
// as WAIT 1 requires).
// With `leases`, a second server shares the cluster, and LeaseHolders acquire and release the
// slots of a concurrency key in the same slot through both servers beside the rate callers;
// the run goes on until both servers have acquired again after the kill, and `leases` gets
// their audit.
void RunFailover(int wait_replicas, FailoverRun* out, LeaseRun* leases = nullptr) {
  ASSERT_TRUE(RedisInstalled());
  auto cluster = RedisCluster::Start(3, wait_replicas == 0 ? 1 : 2);
  ASSERT_OK(cluster);
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), absl::StrCat(R"(limits:
  - name: hot
    kind: token_bucket
    rate: )",
                                                            kRate, R"(
    period: 1s
    capacity: )",
                                                            kCapacity, R"(
  - name: quota
    kind: token_bucket
    rate: 1
    period: 24h
    capacity: )",
                                                            kQuota, R"(
  - name: )",
                                                            testing::kLeaseLimit, R"(
    kind: concurrency
    capacity: )",
                                                            kSlots, R"(
    lease_ttl: 60s
)"));
  // Every lease outlives the run (well under a minute): a lease not held was released.
  const std::string admin_token = "t0ken-for-tests";
  WriteFileAtomically(dir.File("token"), admin_token + "\n");
  const absl::Duration redis_timeout = absl::Seconds(1);
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < (leases == nullptr ? 1 : 2); ++i) {
    auto server = ServerProcess::Start(
        {"--store=redis", "--redis_address=" + (*cluster)->seeds(),
         absl::StrCat("--redis_timeout=", absl::FormatDuration(redis_timeout)),
         absl::StrCat("--redis_wait_replicas=", wait_replicas),
         "--limits_file=" + dir.File("limits.yaml"), "--admin_token_file=" + dir.File("token"),
         "--data_dir=" + dir.File(absl::StrCat("unused", i))},
        dir.path());
    ASSERT_OK(server);
    servers.push_back(*std::move(server));
  }
  ServerProcess* server = servers[0].get();

  // One key for both limits: the hash tag puts them in one slot.
  const std::string key = "{failover}k";
  v1::RateLimitRequest request = MakeRequest("hot", key);
  *request.add_limits() = MakeRequest("quota", key).limits(0);
  const int slot = redis::KeySlot("failover");
  auto primary = (*cluster)->PrimaryOf(slot);
  ASSERT_OK(primary);
  auto replica = (*cluster)->ReplicaOf(*primary);
  ASSERT_OK(replica);

  constexpr int kCallers = 16;
  std::vector<std::unique_ptr<RateLimitClient>> clients;
  for (int i = 0; i < kCallers; ++i) {
    clients.push_back(RateLimitClient::Connect(server->target()));
  }
  absl::Mutex mu;
  struct Answer {
    absl::Time sent, answered;
  };
  std::vector<Answer> allowed;  // the allowed calls
  std::string last_error;       // the last failure, for the log
  std::atomic<bool> stop{false};
  std::atomic<int> in_flight_at_kill{0};
  absl::Time kill_time = absl::InfiniteFuture();
  std::unique_ptr<LeaseHolders> holders;
  if (leases != nullptr) {
    holders = std::make_unique<LeaseHolders>(
        std::vector<std::string>{servers[0]->target(), servers[1]->target()});
    ASSERT_OK(holders->Start());
  }
  const absl::Time begin = absl::Now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      while (!stop.load()) {
        const absl::Time sent = absl::Now();
        auto r = clients[i]->Consume(request);
        const absl::Time answered = absl::Now();
        absl::MutexLock l(&mu);
        if (sent < kill_time && answered >= kill_time) ++in_flight_at_kill;
        if (r.ok() && r->allowed()) allowed.push_back({sent, answered});
        if (!r.ok()) last_error = r.status().ToString();
      }
    });
  }
  absl::SleepFor(absl::Seconds(2));
  {
    absl::MutexLock l(&mu);
    kill_time = absl::Now();
  }
  (*cluster)->server(*primary).Kill9();
  // The primary is dead (reaped) from here on. A call answered after kill_time may still have
  // been decided by it just before the signal landed: only calls sent after this instant show
  // that the service is back.
  const absl::Time killed = absl::Now();
  if (holders != nullptr) holders->Killed(killed);
  // The service answers again within the failure detection (node timeout), the replica's election
  // (at most about one more node timeout) and a slot-map refresh after the client's reconnect
  // backoff and command timeout: bounded generously by 5 node timeouts + 2 command timeouts. An
  // election that gets too few votes is retried by Redis after 2 x its auth timeout (the auth
  // timeout being max(2 s, 2 node timeouts)); the bound allows one such retry (seen once in 31
  // runs: 7.2 s).
  const absl::Duration node_timeout = testing::kClusterNodeTimeout;
  const absl::Duration election_retry = 2 * std::max(absl::Seconds(2), 2 * node_timeout);
  const absl::Duration bound = 5 * node_timeout + 2 * redis_timeout + election_retry;
  absl::Time back = absl::InfiniteFuture();
  testing::Eventually(
      [&] {
        absl::MutexLock l(&mu);
        for (const Answer& a : allowed) {
          if (a.sent > killed) back = std::min(back, a.answered);
        }
        return back != absl::InfiniteFuture() &&
               (holders == nullptr || holders->BackOnEveryServer());
      },
      bound + absl::Seconds(10));
  if (back != absl::InfiniteFuture()) absl::SleepFor(absl::Seconds(2));
  stop = true;
  for (std::thread& t : threads) t.join();
  const absl::Time end = absl::Now();
  if (holders != nullptr) {
    *leases = holders->StopAndAudit(admin_token);
    for (int s = 0; s < 2; ++s) {
      leases->outage_s[s] = absl::ToDoubleSeconds(leases->back[s] - kill_time);
      EXPECT_LE(leases->back[s] - kill_time, bound) << "leases through server " << s;
    }
  }
  if (back == absl::InfiniteFuture()) {
    const std::string log = server->Stderr();
    std::string nodes;
    for (int i = 0; i < (*cluster)->size() && nodes.empty(); ++i) {
      if ((*cluster)->server(i).running()) {
        nodes = (*cluster)->server(i).Cli({"CLUSTER", "NODES"}).value_or("?");
      }
    }
    FAIL() << "no allowed answer after the kill; last error: " << last_error << "\ncluster:\n"
           << nodes << "\nreplica log:\n"
           << (*cluster)->server(*replica).Log() << "\nserver log (end):\n"
           << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  }
  out->outage_s = absl::ToDoubleSeconds(back - kill_time);
  EXPECT_LE(back - kill_time, bound) << "outage " << out->outage_s << " s";
  // No replica is promoted before the primary has been unreachable for a node timeout: an
  // outage shorter than that was measured on an answer the dead primary gave.
  EXPECT_GE(back - kill_time, node_timeout) << "outage " << out->outage_s << " s";
  out->elapsed_s = absl::ToDoubleSeconds(end - begin);
  out->allowed = static_cast<int>(allowed.size());
  out->acked_quota = out->allowed;
  for (const Answer& a : allowed) {
    if (a.answered <= kill_time && a.answered > kill_time - absl::Seconds(1)) {
      ++out->acked_last_second;
    }
  }
  out->in_flight_at_kill = in_flight_at_kill.load();
  auto balance = clients[0]->Check(MakeRequest("quota", key));
  ASSERT_OK(balance);
  out->metrics = testing::HttpGet(server->metrics_port(), "/metrics").second;
  // The quota refills 1 a day: well under 0.5 in a run, so the rounded balance counts the takes.
  out->quota_taken = std::llround(kQuota - balance->results(0).value());
}

TEST(RedisFailoverTest, APrimaryKilledUnderLoadFailsOverAndLosesAtMostItsReplicationLag) {
  FailoverRun run;
  RunFailover(/*wait_replicas=*/0, &run);
  if (HasFatalFailure()) return;
  // Acknowledged grants missing from the promoted replica's state: the writes asynchronous
  // replication lost (a call taken but not answered hides at most one lost write).
  const int64_t lost = std::max<int64_t>(0, run.acked_quota - run.quota_taken);
  const double over_grant = run.allowed - (kCapacity + kRate * run.elapsed_s);
  std::cerr << "failover (no WAIT): outage " << run.outage_s << " s, allowed " << run.allowed
            << " in " << run.elapsed_s << " s, over-grant " << over_grant
            << ", lost acknowledged writes " << lost << " (acknowledged in the last second "
            << run.acked_last_second << ")\n";
  RecordProperty("outage_ms", static_cast<int>(run.outage_s * 1000));
  RecordProperty("lost_writes", static_cast<int>(lost));
  // The bound the README states: lost writes are those acknowledged within the replication lag
  // (well under a second here), and the over-grant is at most the tokens they gave back.
  EXPECT_LE(lost, run.acked_last_second + run.in_flight_at_kill);
  EXPECT_LE(run.allowed, kCapacity + kRate * run.elapsed_s + lost);
  // The server's metrics saw the failover: failed connections to the dead primary, and a new
  // slot map; no WAIT was sent.
  EXPECT_TRUE(absl::StrContains(run.metrics, "ratelimit_redis_round_trips_total ")) << run.metrics;
  // The exposition, Redis families included, passes promtool's checks.
  TempDir dir;
  WriteFileAtomically(dir.File("metrics.txt"), run.metrics);
  const auto [code, lint] =
      testing::RunCommand("promtool check metrics < " + dir.File("metrics.txt"));
  EXPECT_EQ(code, 0) << lint;
  EXPECT_FALSE(
      absl::StrContains(run.metrics, "ratelimit_redis_connects_total{outcome=\"failed\"} 0\n"))
      << run.metrics;
  EXPECT_TRUE(absl::StrContains(run.metrics, "ratelimit_redis_waits_total{outcome=\"enough\"} 0\n"))
      << run.metrics;
}

// With WAIT, on two servers sharing the cluster: no acknowledged grant and no acknowledged lease
// is lost, and no slot is granted twice (the bound docs/redis.md states for leases).
TEST(RedisFailoverTest, WithWaitForOneReplicaAFailoverLosesNothingAcknowledged) {
  FailoverRun run;
  LeaseRun leases;
  RunFailover(/*wait_replicas=*/1, &run, &leases);
  if (HasFatalFailure()) return;
  const double over_grant = run.allowed - (kCapacity + kRate * run.elapsed_s);
  std::cerr << "failover (--redis_wait_replicas=1): outage " << run.outage_s << " s, allowed "
            << run.allowed << " in " << run.elapsed_s << " s, over-grant " << over_grant
            << ", acknowledged " << run.acked_quota << ", in the state " << run.quota_taken << "\n"
            << "leases: " << leases.acquired << " acquired (" << leases.replayed
            << " answered to a retry), " << leases.released << " released, "
            << leases.held_across_kill << " held across the kill, " << leases.failed_calls
            << " failed calls, most held at once " << leases.max_holding << " of " << kSlots
            << ", lost " << leases.lost.size() << ", held at the end " << leases.held_at_end.size()
            << "; acquiring again " << leases.outage_s[0] << " s and " << leases.outage_s[1]
            << " s after the kill\n";
  RecordProperty("outage_ms", static_cast<int>(run.outage_s * 1000));
  RecordProperty("lease_max_holding", leases.max_holding);
  // Every acknowledged grant reached a replica, and the promoted one (the most up to date) has it.
  EXPECT_GE(run.quota_taken, run.acked_quota);
  EXPECT_LE(run.allowed, kCapacity + kRate * run.elapsed_s);
  // Every batch waited: the metrics count the WAITs.
  EXPECT_FALSE(
      absl::StrContains(run.metrics, "ratelimit_redis_waits_total{outcome=\"enough\"} 0\n"))
      << run.metrics;
  EXPECT_TRUE(absl::StrContains(run.metrics, "ratelimit_redis_waits_total{outcome=\"enough\"} "))
      << run.metrics;

  // Leases. Never more slots held than the capacity, counted by the holders themselves.
  EXPECT_LE(leases.max_holding, kSlots);
  EXPECT_TRUE(leases.problems.empty()) << absl::StrJoin(leases.problems, "\n");
  // No release of a lease its holder still held answered NOT_HELD: no acknowledged acquire was
  // missing from the promoted replica.
  EXPECT_TRUE(leases.lost.empty()) << absl::StrJoin(leases.lost, ", ");
  EXPECT_GT(leases.acquired, kSlots);
  // After the failover each server shows exactly the leases the holders believe they hold (the
  // pinned one, acquired before the kill, among them), and Check's free slots agree.
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(leases.listed[s], leases.held_at_end) << "ListLeases through server " << s;
    EXPECT_EQ(leases.listed_held[s], leases.held_at_end.size()) << "server " << s;
    EXPECT_EQ(leases.free_slots[s], kSlots - static_cast<double>(leases.held_at_end.size()))
        << "server " << s;
  }
  // Each is released by its holder's lease id, and every slot is free again.
  ASSERT_EQ(leases.end_releases.size(), leases.held_at_end.size());
  for (v1::LeaseState state : leases.end_releases) EXPECT_EQ(state, v1::RELEASED);
  EXPECT_EQ(leases.free_after_release, kSlots);
}

}  // namespace
}  // namespace ratelimit
