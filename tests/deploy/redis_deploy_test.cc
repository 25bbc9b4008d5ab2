// deploy/redis: the scripts start a 3-primary / 3-replica cluster on loopback with redis.conf (on
// free ports found at run time, in a temporary directory), a ratelimit-server runs on it, and
// the scripts stop it again.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "storage/file_util.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

const std::string kScripts = std::string(RATELIMIT_SOURCE_DIR) + "/deploy/redis";

// The nodes the scripts started under `dir`: SIGKILLed on destruction if still running, whatever
// the test's outcome. The scripts daemonize them; this process is made their subreaper, so they
// become its children once orphaned and are reaped here, not left to init.
class ClusterDir {
 public:
  explicit ClusterDir(const TempDir& dir, std::vector<int> ports)
      : dir_(dir), ports_(std::move(ports)) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~ClusterDir() {
    for (int pid : Pids()) kill(pid, SIGKILL);
    Reap();
    prctl(PR_SET_CHILD_SUBREAPER, 0);
  }
  // Reaps the nodes that exited.
  static void Reap() {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
  std::vector<int> Pids() const {
    std::vector<int> pids;
    for (int port : ports_) {
      auto text = ReadFileToString(dir_.File(absl::StrCat("cluster/", port, "/redis.pid")));
      int pid = 0;
      if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) && pid > 0) {
        pids.push_back(pid);
      }
    }
    return pids;
  }

 private:
  const TempDir& dir_;
  const std::vector<int> ports_;
};

bool Running(int pid) {
  if (kill(pid, 0) != 0) return false;
  auto status = ReadFileToString(absl::StrCat("/proc/", pid, "/status"));
  return !(status.ok() && absl::StrContains(*status, "State:\tZ"));
}

TEST(RedisDeployTest, TheClusterScriptsStartACluster3x3TheServerRunsOnAndStopIt) {
  ASSERT_TRUE(testing::RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  TempDir dir;
  std::vector<int> ports;
  std::string command =
      absl::StrCat("timeout 120 sh ", kScripts, "/start-cluster.sh ", dir.File("cluster"));
  for (int i = 0; i < 6; ++i) {
    ports.push_back(testing::FreeRedisPort());
    ASSERT_GT(ports.back(), 0);
    absl::StrAppend(&command, " ", ports.back());
  }
  ClusterDir nodes(dir, ports);
  const auto [code, out] = RunCommand(command + " 2>&1");
  ASSERT_EQ(code, 0) << out;
  const std::string seeds(absl::StripAsciiWhitespace(out));
  EXPECT_EQ(seeds, absl::StrCat("127.0.0.1:", ports[0], ",127.0.0.1:", ports[1],
                                ",127.0.0.1:", ports[2], ",127.0.0.1:", ports[3],
                                ",127.0.0.1:", ports[4], ",127.0.0.1:", ports[5]));
  ASSERT_EQ(nodes.Pids().size(), 6u);
  // The recommended settings are in force.
  auto cli = [&](int port, const std::string& args) {
    return RunCommand(absl::StrCat("redis-cli -h 127.0.0.1 -p ", port, " ", args)).second;
  };
  EXPECT_TRUE(absl::StrContains(cli(ports[0], "CONFIG GET appendonly"), "yes"));
  EXPECT_TRUE(absl::StrContains(cli(ports[0], "CONFIG GET min-replicas-to-write"), "\n1"));
  EXPECT_TRUE(absl::StrContains(cli(ports[0], "CONFIG GET maxmemory-policy"), "noeviction"));
  const std::string info = cli(ports[0], "CLUSTER INFO");
  EXPECT_TRUE(absl::StrContains(info, "cluster_state:ok")) << info;
  EXPECT_TRUE(absl::StrContains(info, "cluster_size:3")) << info;
  EXPECT_TRUE(absl::StrContains(info, "cluster_known_nodes:6")) << info;

  // The server runs on it, with WAIT for one replica.
  WriteFileAtomically(dir.File("limits.yaml"), R"(limits:
  - name: api
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 3
)");
  {
    auto server = ServerProcess::Start(
        // A replica's acknowledgement can take longer than the default 1 s round trip on a
        // loaded machine (the CI runs tests in parallel): WAIT gets its share of 5 s.
        {"--store=redis", "--redis_address=" + seeds, "--redis_wait_replicas=1",
         "--redis_timeout=5s", "--limits_file=" + dir.File("limits.yaml"),
         "--data_dir=" + dir.File("unused")},
        dir.path());
    ASSERT_OK(server);
    auto client = RateLimitClient::Connect((*server)->target());
    for (int i = 0; i < 3; ++i) {
      auto r = client->Consume(MakeRequest("api", "k"));
      ASSERT_OK(r);
      EXPECT_TRUE(r->allowed()) << i;
    }
    auto denied = client->Consume(MakeRequest("api", "k"));
    ASSERT_OK(denied);
    EXPECT_FALSE(denied->allowed());
  }

  const std::vector<int> pids = nodes.Pids();
  const auto [stop_code, stop_out] = RunCommand(
      absl::StrCat("timeout 60 sh ", kScripts, "/stop-cluster.sh ", dir.File("cluster"), " 2>&1"));
  EXPECT_EQ(stop_code, 0) << stop_out;
  for (int pid : pids) EXPECT_FALSE(Running(pid)) << pid;
  ClusterDir::Reap();
}

}  // namespace
}  // namespace ratelimit
