// The cluster client when its peers fail: a primary killed and its replica promoted, a primary
// gone from a stale slot map, a stopped (SIGSTOP) server, a dropped connection, unreachable,
// silent and malformed seeds, a wrong password, and the replies a real server gives only in rare
// windows (TRYAGAIN, CLUSTERDOWN, endless MOVED), from a scripted stand-in.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_slot.h"
#include "tests/storage/redis/cluster_client_test_util.h"
#include "tests/support/redis_process.h"
#include "tests/support/test_support.h"

namespace ratelimit::redis {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::RedisCluster;
using ::ratelimit::testing::RedisServer;

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

}  // namespace
}  // namespace ratelimit::redis
