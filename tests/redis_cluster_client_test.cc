#include "storage/redis/cluster/redis_cluster_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
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
#include "tests/support/redis_process.h"
#include "tests/support/test_support.h"

namespace ratelimit::redis {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::RedisCluster;
using ::ratelimit::testing::RedisServer;

std::unique_ptr<RedisClusterClient> ConnectOrDie(const std::string& seeds,
                                                 RedisClusterClient::Options options = {}) {
  options.seeds = seeds;
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> client = RedisClusterClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

int64_t IncrOrDie(RedisClusterClient& client, const std::string& key) {
  absl::StatusOr<Reply> r = client.ExecuteSync(key, {"INCR", key});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1;
  EXPECT_EQ(r->type, Reply::Type::kInteger) << r->DebugString();
  return r->integer;
}

std::unique_ptr<RedisCluster> StartCluster() {
  absl::StatusOr<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start(3, 1);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// A loopback port with nothing listening on it.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A scripted stand-in for a Redis node on a loopback port: answers CLUSTER SLOTS with every slot
// mapped to itself and every other command with what `answer` returns (raw RESP), counting the
// commands it saw. For replies a real server gives only in rare windows (TRYAGAIN, CLUSTERDOWN).
class ScriptedRedis {
 public:
  explicit ScriptedRedis(std::function<std::string(const std::vector<std::string>&, int n)> answer)
      : answer_(std::move(answer)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(listen_fd_, 16);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~ScriptedRedis() {
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int fd : clients_) shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : workers_) t.join();
    for (int fd : clients_) close(fd);
    close(listen_fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int commands() const { return commands_.load(); }

 private:
  void AcceptLoop() {
    while (true) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard<std::mutex> l(mu_);
      clients_.push_back(fd);
      workers_.emplace_back([this, fd] { Serve(fd); });
    }
  }
  // Parses one RESP array of bulk strings from the front of `buf`; false if incomplete.
  static bool Parse(std::string& buf, std::vector<std::string>* args) {
    size_t pos = 0;
    auto line = [&](int64_t* n) {
      const size_t end = buf.find("\r\n", pos);
      if (end == std::string::npos || !absl::SimpleAtoi(buf.substr(pos + 1, end - pos - 1), n)) {
        return false;
      }
      pos = end + 2;
      return true;
    };
    int64_t count = 0;
    if (!line(&count)) return false;
    args->clear();
    for (int64_t i = 0; i < count; ++i) {
      int64_t len = 0;
      if (!line(&len) || buf.size() < pos + len + 2) return false;
      args->push_back(buf.substr(pos, len));
      pos += len + 2;
    }
    buf.erase(0, pos);
    return true;
  }
  void Serve(int fd) {
    std::string buf;
    char chunk[4096];
    while (true) {
      const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return;
      buf.append(chunk, n);
      std::vector<std::string> args;
      while (Parse(buf, &args)) {
        std::string reply;
        if (args.size() == 2 && args[0] == "CLUSTER" && args[1] == "SLOTS") {
          reply =
              absl::StrCat("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:", port_, "\r\n");
        } else {
          reply = answer_(args, ++commands_);
        }
        if (send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
      }
    }
  }

  std::function<std::string(const std::vector<std::string>&, int n)> answer_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> commands_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> clients_;
  std::vector<std::thread> workers_;
};

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

// kill -9 of a primary: once its replica is promoted, commands for its slots succeed again,
// on the promoted replica, with the value replicated before the kill.
TEST(RedisClusterClientTest, RecoversAfterAPrimaryIsKilledAndItsReplicaPromoted) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Milliseconds(500);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(cluster->seeds(), options);
  ASSERT_NE(client, nullptr);
  const std::string key = "failover:counter";
  const int slot = KeySlot(key);
  for (int i = 1; i <= 5; ++i) ASSERT_EQ(IncrOrDie(*client, key), i);
  // The replica acknowledged the writes (it may still be in its first sync: ask again).
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<Reply> acked = client->ExecuteSync(key, {"WAIT", "1", "200"});
    return acked.ok() && acked->integer == 1;
  }));
  absl::StatusOr<int> primary = cluster->PrimaryOf(slot);
  ASSERT_OK(primary);
  absl::StatusOr<int> replica = cluster->ReplicaOf(*primary);
  ASSERT_OK(replica);

  cluster->server(*primary).Kill9();
  // Commands fail (UNAVAILABLE / DEADLINE_EXCEEDED) until the promotion, then succeed.
  int64_t value = -1;
  std::string last_error;
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<Reply> r = client->ExecuteSync(key, {"INCR", key});
        if (!r.ok()) {
          last_error = r.status().ToString();
          EXPECT_TRUE(absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status()))
              << r.status();
          return false;
        }
        if (r->is_error()) {
          last_error = r->str;
          return false;
        }
        value = r->integer;
        return true;
      },
      absl::Seconds(60)))
      << last_error;
  EXPECT_EQ(value, 6);
  absl::StatusOr<int> promoted = cluster->PrimaryOf(slot);
  ASSERT_OK(promoted);
  EXPECT_EQ(*promoted, *replica);
  EXPECT_EQ(client->PrimaryForSlot(slot), cluster->server(*replica).address());
  EXPECT_GE(client->Metrics().slot_map_refreshes, 2u);
}

// A command routed to a primary that is gone (its connection refused, the node in reconnect
// backoff) was never sent: the client refreshes the slot map and sends it to the new owner
// instead of failing it. Here the client's map is stale on purpose: read before the primary died
// and its replica took over, with nothing since that would have refreshed it.
TEST(RedisClusterClientTest, ACommandForAPrimaryThatIsGoneIsSentToTheNewOwner) {
  std::unique_ptr<RedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Seconds(2);
  const std::string key = "takeover:counter";
  const int slot = KeySlot(key);
  {
    std::unique_ptr<RedisClusterClient> writer = ConnectOrDie(cluster->seeds(), options);
    ASSERT_NE(writer, nullptr);
    ASSERT_EQ(IncrOrDie(*writer, key), 1);
    ASSERT_TRUE(Eventually([&] {
      absl::StatusOr<Reply> acked = writer->ExecuteSync(key, {"WAIT", "1", "200"});
      return acked.ok() && acked->integer == 1;
    }));
  }
  absl::StatusOr<int> primary = cluster->PrimaryOf(slot);
  ASSERT_OK(primary);
  absl::StatusOr<int> replica = cluster->ReplicaOf(*primary);
  ASSERT_OK(replica);
  // Connected (slot map read from the replica) while the primary serves the slot, but never
  // talked to it: nothing tells this client that the primary died.
  std::unique_ptr<RedisClusterClient> client =
      ConnectOrDie(cluster->server(*replica).address(), options);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(client->PrimaryForSlot(slot), cluster->server(*primary).address());

  cluster->server(*primary).Kill9();
  ASSERT_OK(cluster->server(*replica).Cli({"CLUSTER", "FAILOVER", "TAKEOVER"}));
  ASSERT_OK(cluster->WaitHealthy());
  ASSERT_EQ(client->PrimaryForSlot(slot), cluster->server(*primary).address());
  const uint64_t refreshes = client->Metrics().slot_map_refreshes;

  absl::StatusOr<Reply> r = client->ExecuteSync(key, {"INCR", key});
  ASSERT_OK(r);
  EXPECT_EQ(r->integer, 2) << r->DebugString();
  EXPECT_EQ(client->PrimaryForSlot(slot), cluster->server(*replica).address());
  const redis::RedisClientMetrics m = client->Metrics();
  EXPECT_GE(m.unreachable_retries, 1u);
  EXPECT_GT(m.slot_map_refreshes, refreshes);
}

// A stopped (SIGSTOP) server: commands fail with a timeout instead of hanging, and the client
// works again once the server continues.
TEST(RedisClusterClientTest, PausedServerTimesOutAndTheClientRecovers) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  RedisClusterClient::Options options;
  options.command_timeout = absl::Milliseconds(300);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie((*server)->address(), options);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(IncrOrDie(*client, "p"), 1);

  (*server)->Pause();
  const absl::Time start = absl::Now();
  absl::StatusOr<Reply> r = client->ExecuteSync("p", {"INCR", "p"});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status()) || absl::IsUnavailable(r.status()))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), (*server)->address())) << r.status();
  // Bounded by the command timeout (with slack for a loaded machine), not a hang.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Many callers at once: each gets its own error.
  std::atomic<int> errors{0};
  absl::Notification all_done;
  std::atomic<int> remaining{20};
  for (int i = 0; i < 20; ++i) {
    client->Execute("p", {"INCR", "p"}, [&](absl::StatusOr<Reply> r) {
      if (!r.ok()) ++errors;
      if (--remaining == 0) all_done.Notify();
    });
  }
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(errors.load(), 20);

  (*server)->Resume();
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<Reply> r = client->ExecuteSync("p", {"GET", "p"});
    return r.ok() && !r->is_error();
  }));
  EXPECT_GE(IncrOrDie(*client, "p"), 2);
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

// The server drops the client's connection (CLIENT KILL): the client notices, waits out its
// backoff, connects again and works, without being recreated.
TEST(RedisClusterClientTest, ReconnectsAfterTheServerDropsTheConnection) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie((*server)->address());
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(IncrOrDie(*client, "r"), 1);
  ASSERT_EQ(client->Metrics().connects, 1u);
  absl::StatusOr<std::string> killed = (*server)->Cli({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_OK(killed);
  ASSERT_EQ(*killed, "1");
  int64_t value = 0;
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<Reply> r = client->ExecuteSync("r", {"INCR", "r"});
    if (!r.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
      EXPECT_TRUE(absl::StrContains(r.status().message(), (*server)->address())) << r.status();
      return false;
    }
    value = r->integer;
    return true;
  }));
  EXPECT_EQ(value, 2);
  EXPECT_EQ(client->Metrics().connects, 2u);
}

TEST(RedisClusterClientTest, UnreachableSeedIsAClearErrorNamingTheAddress) {
  const std::string address = absl::StrCat("127.0.0.1:", ClosedPort());
  RedisClusterClient::Options options;
  options.seeds = address;
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> client = RedisClusterClient::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::IsUnavailable(client.status())) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), address)) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "refused")) << client.status();
}

// A peer that accepts the connection and never answers: a timeout naming it, not a hang.
TEST(RedisClusterClientTest, SilentSeedTimesOutWithAnErrorNamingTheAddress) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  RedisClusterClient::Options options;
  options.seeds = address;
  options.command_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> client = RedisClusterClient::Connect(options);
  close(fd);
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::IsUnavailable(client.status())) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), address)) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "timed out")) << client.status();
}

TEST(RedisClusterClientTest, BadSeedAddressIsInvalidArgument) {
  RedisClusterClient::Options options;
  options.seeds = "localhost";
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> client = RedisClusterClient::Connect(options);
  EXPECT_TRUE(absl::IsInvalidArgument(client.status())) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "localhost")) << client.status();
}

TEST(RedisClusterClientTest, WrongOrMissingPasswordIsAClearError) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server =
      RedisServer::Start({"--requirepass", "s3cret"});
  ASSERT_OK(server);
  RedisClusterClient::Options options;
  options.seeds = (*server)->address();
  options.password = "wrong";
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> wrong = RedisClusterClient::Connect(options);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(wrong.status())) << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "authentication failed"))
      << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), (*server)->address())) << wrong.status();

  options.password = "";
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> none = RedisClusterClient::Connect(options);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(none.status())) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), "no password")) << none.status();

  options.password = "s3cret";
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> right = RedisClusterClient::Connect(options);
  ASSERT_OK(right);
  EXPECT_EQ(IncrOrDie(**right, "auth"), 1);
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

TEST(RedisClusterClientTest, TryagainIsRetriedUntilItSucceeds) {
  ScriptedRedis node([](const std::vector<std::string>& args, int n) -> std::string {
    return n <= 2 ? "-TRYAGAIN Multiple keys request during rehashing of slot\r\n" : ":7\r\n";
  });
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(node.address());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->cluster_mode());
  absl::StatusOr<Reply> r = client->ExecuteSync("k", {"INCR", "k"});
  ASSERT_OK(r);
  EXPECT_EQ(r->integer, 7);
  EXPECT_EQ(node.commands(), 3);
  EXPECT_EQ(client->Metrics().tryagain, 2u);
}

TEST(RedisClusterClientTest, ClusterdownIsRetriedABoundedNumberOfTimes) {
  ScriptedRedis node([](const std::vector<std::string>& args, int n) -> std::string {
    return "-CLUSTERDOWN The cluster is down\r\n";
  });
  RedisClusterClient::Options options;
  options.max_redirects = 3;
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(node.address(), options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Reply> r = client->ExecuteSync("k", {"INCR", "k"});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "CLUSTERDOWN")) << r.status();
  EXPECT_EQ(node.commands(), 4);  // the first try and three retries
  EXPECT_EQ(client->Metrics().clusterdown, 4u);
}

TEST(RedisClusterClientTest, EndlessMovedIsBounded) {
  std::string self;
  ScriptedRedis node([&self](const std::vector<std::string>& args, int n) -> std::string {
    return absl::StrCat("-MOVED ", KeySlot("k"), " ", self, "\r\n");
  });
  self = node.address();
  RedisClusterClient::Options options;
  options.max_redirects = 2;
  std::unique_ptr<RedisClusterClient> client = ConnectOrDie(node.address(), options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Reply> r = client->ExecuteSync("k", {"GET", "k"});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "MOVED")) << r.status();
  EXPECT_EQ(node.commands(), 3);  // the first try and two redirections
  EXPECT_EQ(client->Metrics().moved, 3u);
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
