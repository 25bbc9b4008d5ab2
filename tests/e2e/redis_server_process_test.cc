// A real ratelimit-server process on Redis (--store=redis): start-up refusals naming the address,
// and two server replicas sharing one Redis Cluster (no over-grant between them; one killed with
// SIGKILL, the other keeps answering and nothing acknowledged is lost; lease streams never hold
// more than the capacity).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::RedisServer;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::RefusingPort;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

// A loopback port that accepts TCP connections (the kernel completes them) and never answers.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::abort();
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPort() { close(fd_); }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Runs the server with `args` expecting it to refuse to start: (exit code, output). `timeout`
// bounds a server that would hang instead (exit code 124 then).
std::pair<int, std::string> RunRefused(const TempDir& dir, const std::vector<std::string>& args) {
  std::string command = absl::StrCat("timeout -s KILL 60 ", BinaryPath("ratelimit-server"),
                                     " --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0",
                                     " --data_dir=", dir.File("data"));
  for (const std::string& a : args) absl::StrAppend(&command, " '", a, "'");
  return RunCommand(command);
}

class RedisServerStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  }
  // One error line naming `address`, and a non-zero exit.
  void ExpectRefused(const std::vector<std::string>& args, const std::string& address,
                     const std::string& why) {
    const auto [code, output] = RunRefused(dir_, args);
    EXPECT_NE(code, 0) << output;
    EXPECT_NE(code, 124) << "hung: " << output;
    EXPECT_TRUE(absl::StrContains(output, address)) << output;
    EXPECT_TRUE(absl::StrContains(output, why)) << output;
    EXPECT_TRUE(absl::StrContains(output, "start-up failed")) << output;
  }
  TempDir dir_;
};

TEST_F(RedisServerStartTest, NothingListeningIsRefusedNamingTheAddress) {
  RefusingPort port;
  ExpectRefused({"--store=redis", "--redis_address=" + port.target(), "--redis_timeout=500ms"},
                port.target(), "no redis seed answered");
}

TEST_F(RedisServerStartTest, APortThatDoesNotSpeakRedisIsRefusedWithinTheTimeout) {
  SilentPort port;
  ExpectRefused({"--store=redis", "--redis_address=" + port.target(), "--redis_timeout=300ms"},
                port.target(), "no redis seed answered");
}

TEST_F(RedisServerStartTest, AWrongPasswordIsRefused) {
  auto redis = RedisServer::Start({"--requirepass", "right-one"});
  ASSERT_OK(redis);
  WriteFileAtomically(dir_.File("password"), "wrong-one\n");
  ExpectRefused({"--store=redis", "--redis_address=" + (*redis)->address(),
                 "--redis_password_file=" + dir_.File("password")},
                (*redis)->address(), "redis at");
  // And none at all.
  ExpectRefused({"--store=redis", "--redis_address=" + (*redis)->address()}, (*redis)->address(),
                "authentication required");
}

TEST_F(RedisServerStartTest, AClusterWithUnservedSlotsIsRefused) {
  auto node = RedisServer::Start({"--cluster-enabled", "yes"});
  ASSERT_OK(node);
  ExpectRefused({"--store=redis", "--redis_address=" + (*node)->address()}, (*node)->address(),
                "slots 0-16383 are not served");
}

TEST_F(RedisServerStartTest, BadCombinationsOfFlagsAreRefused) {
  // Refused before any connection; a refusing port in case one were attempted.
  RefusingPort nobody;
  const std::string address = "--redis_address=" + nobody.target();
  const auto [c1, o1] = RunRefused(dir_, {"--store=redis"});
  EXPECT_NE(c1, 0);
  EXPECT_TRUE(absl::StrContains(o1, "--redis_address: required by --store=redis")) << o1;
  const auto [c2, o2] = RunRefused(dir_, {address});
  EXPECT_NE(c2, 0);
  EXPECT_TRUE(absl::StrContains(o2, "require --store=redis")) << o2;
  const auto [c3, o3] = RunRefused(dir_, {"--store=etcd"});
  EXPECT_NE(c3, 0);
  EXPECT_TRUE(absl::StrContains(o3, "--store: unknown state store")) << o3;
  EXPECT_TRUE(absl::StrContains(o3, "(rocksdb, redis or memory)")) << o3;
  const auto [c4, o4] = RunRefused(dir_, {"--store=redis", address, "--sync"});
  EXPECT_NE(c4, 0);
  EXPECT_TRUE(absl::StrContains(o4, "--store=rocksdb only")) << o4;
  const auto [c5, o5] = RunRefused(dir_, {"--store=redis", address, "--redis_key_prefix=a{b}"});
  EXPECT_NE(c5, 0);
  EXPECT_TRUE(absl::StrContains(o5, "redis_key_prefix")) << o5;
}

// Two server replicas on one cluster, each with the limits file `limits`.
class TwoReplicasTest : public ::testing::Test {
 protected:
  void Start(const std::string& limits) {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = testing::StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    WriteFileAtomically(dir_.File("limits.yaml"), limits);
    for (int i = 0; i < 2; ++i) {
      auto server = ServerProcess::Start(
          {"--store=redis", "--redis_address=" + target_.seeds,
           "--redis_key_prefix=" + target_.key_prefix, "--limits_file=" + dir_.File("limits.yaml"),
           "--data_dir=" + dir_.File(absl::StrCat("unused", i))},
          dir_.path());
      ASSERT_OK(server);
      servers_.push_back(*std::move(server));
    }
  }
  TempDir dir_;
  RedisTestTarget target_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

TEST_F(TwoReplicasTest, SixtyFourCallersOnTwoReplicasNeverOverGrantOneKey) {
  Start(R"(limits:
  - name: hot
    kind: token_bucket
    rate: 10
    period: 1s
    capacity: 10
)");
  if (HasFatalFailure()) return;
  constexpr int kThreads = 64;
  std::vector<std::unique_ptr<RateLimitClient>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(RateLimitClient::Connect(servers_[t % 2]->target()));
    ASSERT_OK(clients.back()->Check(MakeRequest("hot", "warm-up")));  // connected
  }
  std::atomic<int> allowed{0}, errors{0};
  std::atomic<int64_t> max_latency_us{0};
  const absl::Duration run = absl::Seconds(3);
  const absl::Time begin = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (absl::Now() - begin < run) {
        const absl::Time sent = absl::Now();
        auto r = clients[t]->Consume(MakeRequest("hot", "k"));
        const int64_t us = absl::ToInt64Microseconds(absl::Now() - sent);
        int64_t seen = max_latency_us.load();
        while (us > seen && !max_latency_us.compare_exchange_weak(seen, us)) {
        }
        if (!r.ok()) {
          ++errors;
        } else if (r->allowed()) {
          ++allowed;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed_s = absl::ToDoubleSeconds(absl::Now() - begin);
  const double latency_s = static_cast<double>(max_latency_us.load()) / 1e6;
  // Every decision was made within [begin, end] by the primary's clock: at most the capacity
  // plus what refilled meanwhile can have been granted.
  const double most = 10 + 10 * elapsed_s;
  // With callers always waiting, a token goes unclaimed only before the first and after the last
  // decision (each within one round trip of `begin` and `end`), plus the fraction left at the end.
  const double least = 10 + 10 * (elapsed_s - 2 * latency_s) - 1;
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(allowed.load(), most) << "elapsed " << elapsed_s << " s";
  EXPECT_GE(allowed.load(), least) << "elapsed " << elapsed_s << " s, slowest call " << latency_s;
  RecordProperty("allowed", allowed.load());
  RecordProperty("elapsed_ms", static_cast<int>(elapsed_s * 1000));
  std::cerr << "allowed " << allowed.load() << " in " << elapsed_s << " s (bound " << most
            << ", least " << least << ")\n";
}

// Lease streams on Redis: each op is decided on a store thread and its result handed back to the
// stream's serving thread. Sixteen holders, each on a stream of its own to one of the two
// replicas, acquire and release one key of capacity 2: never more than 2 hold at once, and every
// op is answered.
TEST_F(TwoReplicasTest, LeaseStreamsOnTwoReplicasNeverHoldMoreThanTheCapacity) {
  Start(R"(limits:
  - name: jobs
    kind: concurrency
    capacity: 2
    lease_ttl: 1m
)");
  if (HasFatalFailure()) return;
  constexpr int kHolders = 16;
  std::atomic<int> holding{0}, most_holding{0}, acquired{0}, errors{0};
  const absl::Time end = absl::Now() + absl::Seconds(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < kHolders; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::RateLimitService::NewStub(
          grpc::CreateChannel(servers_[t % 2]->target(), grpc::InsecureChannelCredentials()));
      grpc::ClientContext context;
      auto stream = stub->LeaseStream(&context);
      uint64_t id = 0;
      // One op at a time: its result, or nullopt when the stream failed.
      auto send = [&](v1::LeaseOp op) -> std::optional<v1::LeaseOpResult> {
        op.set_id(++id);
        v1::LeaseStreamRequest request;
        *request.add_ops() = std::move(op);
        v1::LeaseStreamResponse response;
        if (!stream->Write(request) || !stream->Read(&response) || response.results_size() != 1 ||
            response.results(0).id() != id) {
          return std::nullopt;
        }
        return response.results(0);
      };
      while (absl::Now() < end) {
        v1::LeaseOp acquire;
        v1::LimitRequest* l = acquire.mutable_acquire()->add_limits();
        l->set_name("jobs");
        l->set_key("k");
        std::optional<v1::LeaseOpResult> a = send(acquire);
        if (!a || a->code() != 0) {
          ++errors;
          return;
        }
        if (!a->acquire().allowed()) continue;
        ++acquired;
        const int now = ++holding;
        int seen = most_holding.load();
        while (now > seen && !most_holding.compare_exchange_weak(seen, now)) {
        }
        --holding;  // before the release is sent: the slot may be someone else's once it is
        v1::LeaseOp release;
        release.mutable_release()->set_name("jobs");
        release.mutable_release()->set_key("k");
        release.mutable_release()->set_lease_id(a->acquire().lease().id());
        std::optional<v1::LeaseOpResult> r = send(release);
        if (!r || r->code() != 0 || r->release().state() != v1::RELEASED) {
          ++errors;
          return;
        }
      }
      stream->WritesDone();
      if (!stream->Finish().ok()) ++errors;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(most_holding.load(), 2);
  EXPECT_GT(acquired.load(), 0);
  std::cerr << "acquired " << acquired.load() << ", at most " << most_holding.load()
            << " held at once\n";
}

TEST_F(TwoReplicasTest, AReplicaKilledUnderLoadLeavesTheOtherAnsweringWithNothingLost) {
  // A quota that does not refill during the test.
  Start(R"(limits:
  - name: quota
    kind: token_bucket
    rate: 1
    period: 24h
    capacity: 1000000
)");
  if (HasFatalFailure()) return;
  constexpr int kThreads = 16;
  std::vector<std::unique_ptr<RateLimitClient>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(RateLimitClient::Connect(servers_[t % 2]->target()));
  }
  std::atomic<bool> killed{false}, stop{false};
  std::atomic<int> acked{0}, survivor_errors{0}, survivor_after_kill{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        const bool after_kill = killed.load();
        auto r = clients[t]->Consume(MakeRequest("quota", "k"));
        if (r.ok() && r->allowed()) ++acked;
        if (t % 2 == 1) {  // the survivor's callers
          if (!r.ok()) ++survivor_errors;
          if (r.ok() && after_kill) ++survivor_after_kill;
        }
      }
    });
  }
  ASSERT_TRUE(testing::Eventually([&] { return acked.load() >= 200; }));
  servers_[0]->StopWith(SIGKILL);
  killed = true;
  ASSERT_TRUE(testing::Eventually([&] { return survivor_after_kill.load() >= 200; }));
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(survivor_errors.load(), 0);
  auto balance = clients[1]->Check(MakeRequest("quota", "k"));
  ASSERT_OK(balance);
  // Every acknowledged grant is in the shared state (a call in flight on the killed replica may
  // have been taken without being acknowledged: at most one per caller of it).
  const double value = balance->results(0).value();
  EXPECT_LE(value, 1000000 - acked.load() + 1);
  EXPECT_GE(value, 1000000 - acked.load() - kThreads / 2);
}

}  // namespace
}  // namespace ratelimit
