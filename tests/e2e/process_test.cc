// The real ratelimit-server binary as a child process on port 0: crash durability, graceful
// shutdown, hot reload of the limits file, the reset audit log, health, start-up errors and
// the CLI.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "client/cpp/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::kLimits;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFileAtomically(dir_.File("limits.yaml"), kLimits);
    WriteFileAtomically(dir_.File("token"), "t0ken-for-tests\n");
  }
  std::vector<std::string> Args() {
    return {"--data_dir=" + dir_.File("data"), "--limits_file=" + dir_.File("limits.yaml"),
            "--admin_token_file=" + dir_.File("token"), "--limits_reload_interval=20ms"};
  }
  std::unique_ptr<ServerProcess> Start() {
    auto p = ServerProcess::Start(Args(), dir_.path());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  TempDir dir_;
};

TEST_F(ProcessTest, KillNineLosesNoAcknowledgedConsume) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const std::string target = server->target();
  std::atomic<int64_t> acked{0}, attempted{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&] {
      auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(5), ""});
      while (!stop.load()) {
        ++attempted;
        auto r = client->Consume(MakeRequest("ledger", "acct"));
        if (!r.ok()) return;  // the server is gone
        if (r->allowed()) ++acked;
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return acked.load() >= 3000; }));
  ::kill(server->pid(), SIGKILL);  // mid-load, no warning
  stop = true;
  for (auto& t : clients) t.join();
  server->StopWith(SIGKILL);  // reap
  const int64_t acknowledged = acked.load();

  auto restarted = Start();
  ASSERT_NE(restarted, nullptr);
  auto client = RateLimitClient::Connect(restarted->target(), ClientOptions{absl::Seconds(5), ""});
  auto r = client->Check(MakeRequest("ledger", "acct"));
  ASSERT_OK(r);
  const double consumed = 1000000 - r->results(0).value();
  // Refill over the test is a few seconds at 1 token/day: well under one token.
  EXPECT_GE(consumed + 0.01, static_cast<double>(acknowledged))
      << "an acknowledged consume was lost";
  EXPECT_LE(consumed, static_cast<double>(attempted.load()) + 0.01);
}

TEST_F(ProcessTest, SigtermDrainsFlushesAndExitsCleanly) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = RateLimitClient::Connect(server->target(), ClientOptions{absl::Seconds(5), ""});
  ASSERT_OK(client->Consume(MakeRequest("ledger", "acct", 7)));
  const int status = server->StopWith(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(server->Stderr().find("stopped"), std::string::npos) << server->Stderr();

  auto restarted = Start();
  ASSERT_NE(restarted, nullptr);
  client = RateLimitClient::Connect(restarted->target(), ClientOptions{absl::Seconds(5), ""});
  auto r = client->Check(MakeRequest("ledger", "acct"));
  ASSERT_OK(r);
  EXPECT_NEAR(r->results(0).value(), 1000000 - 7, 0.01);
}

TEST_F(ProcessTest, SigtermWithAnIdleConnectionExitsWithoutWaitingTheGrace) {
  // The client holds its connection open between calls without reading it.
  ::ratelimit::testing::StopPollingIdleClientChannels();
  std::vector<std::string> args = Args();
  args.push_back("--shutdown_grace=60s");
  auto server = ServerProcess::Start(args, dir_.path());
  ASSERT_OK(server);
  auto client = RateLimitClient::Connect((*server)->target(), ClientOptions{absl::Seconds(5), ""});
  ASSERT_OK(client->Consume(MakeRequest("ledger", "acct")));  // connected, and now idle
  // gRPC alone would wait 20 s for the client to answer its GOAWAY, or the 60 s grace.
  const std::optional<int> status = (*server)->StopWithin(SIGTERM, absl::Seconds(15));
  ASSERT_TRUE(status.has_value()) << "still draining an idle connection";
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE((*server)->Stderr().find("stopped"), std::string::npos) << (*server)->Stderr();
}

TEST_F(ProcessTest, HotReloadAppliesGoodEditsAndKeepsTheOldOnBadOnes) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = RateLimitClient::Connect(server->target(), ClientOptions{absl::Seconds(5), ""});
  auto capacity = [&]() -> double {
    auto r = client->Check(MakeRequest("api", "k"));
    return r.ok() ? r->results(0).capacity() : -1;
  };
  ASSERT_EQ(capacity(), 10);
  // A new limit and a changed one.
  WriteFileAtomically(dir_.File("limits.yaml"), R"(limits:
  - name: api
    kind: token_bucket
    rate: 50
    period: 1s
  - name: fresh
    kind: fixed_window
    rate: 2
    period: 1m
)");
  ASSERT_TRUE(Eventually([&] { return capacity() == 50; }));
  auto fresh = client->Consume(MakeRequest("fresh", "k"));
  ASSERT_OK(fresh);
  EXPECT_DOUBLE_EQ(fresh->results(0).value(), 1);

  // A broken edit: logged with file and line, and the previous definitions stay.
  WriteFileAtomically(dir_.File("limits.yaml"), R"(limits:
  - name: api
    kind: token_bucket
    rate: -3
    period: 1s
)");
  ASSERT_TRUE(Eventually(
      [&] { return server->Stderr().find("limits reload failed") != std::string::npos; }));
  EXPECT_NE(server->Stderr().find("limits.yaml:4:11: limits[0].rate: must be > 0"),
            std::string::npos)
      << server->Stderr();
  EXPECT_EQ(capacity(), 50);
  EXPECT_OK(client->Consume(MakeRequest("fresh", "k")));
}

TEST_F(ProcessTest, ResetIsAuditedWithTheCallersAddress) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto admin = RateLimitClient::Connect(server->target(),
                                        ClientOptions{absl::Seconds(5), "t0ken-for-tests"});
  ASSERT_OK(admin->Reset("api", "user-9"));
  auto intruder = RateLimitClient::Connect(server->target(), ClientOptions{absl::Seconds(5), "x"});
  EXPECT_EQ(intruder->Reset("api", "user-9").status().code(), absl::StatusCode::kPermissionDenied);
  const std::string log = server->Stderr();
  EXPECT_NE(log.find("INFO reset peer=ipv4:127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("limit=api key=user-9"), std::string::npos) << log;
  EXPECT_NE(log.find("WARNING reset refused peer=ipv4:127.0.0.1:"), std::string::npos) << log;
}

TEST_F(ProcessTest, HealthReportsServing) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials()));
  for (const char* service : {"", "ratelimit.v1.RateLimitService"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(stub->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

// The scheduling policies of the threads of process `pid` named `name`.
std::vector<int> PoliciesOfThreads(pid_t pid, const std::string& name) {
  std::vector<int> policies;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string line;
    std::getline(comm, line);
    if (line == name) policies.push_back(sched_getscheduler(std::stoi(entry.path().filename())));
  }
  return policies;
}

TEST_F(ProcessTest, ServingThreadsRunUnderSchedBatchUnlessTurnedOff) {
  {
    auto server = Start();  // the default
    ASSERT_NE(server, nullptr);
    std::vector<int> policies = PoliciesOfThreads(server->pid(), "rl-serving");
    ASSERT_FALSE(policies.empty());
    for (int policy : policies) EXPECT_EQ(policy, SCHED_BATCH);
  }
  std::vector<std::string> args = Args();
  args.push_back("--batch_scheduling=false");
  auto p = ServerProcess::Start(args, dir_.path());
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int> policies = PoliciesOfThreads((*p)->pid(), "rl-serving");
  ASSERT_FALSE(policies.empty());
  for (int policy : policies) EXPECT_EQ(policy, sched_getscheduler(0));
}

TEST_F(ProcessTest, LongLivedThreadsAreNamed) {
  std::vector<std::string> args = Args();
  args.push_back("--store_threads=2");
  auto p = ServerProcess::Start(args, dir_.path());
  ASSERT_TRUE(p.ok()) << p.status();
  const pid_t pid = (*p)->pid();
  EXPECT_FALSE(PoliciesOfThreads(pid, "rl-serving").empty());
  // These name themselves once running, which need not be before the port is reported.
  EXPECT_TRUE(Eventually([&] { return PoliciesOfThreads(pid, "rl-wal-writer").size() == 1; }));
  EXPECT_TRUE(Eventually([&] { return PoliciesOfThreads(pid, "rl-store").size() == 2; }));
}

TEST_F(ProcessTest, InvalidLimitsFileFailsStartUpWithFileAndLine) {
  WriteFileAtomically(dir_.File("limits.yaml"), "limits:\n  - name: x\n    colour: blue\n");
  auto p = ServerProcess::Start(Args(), dir_.path());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("limits.yaml:3:5: limits[0]: unknown key \\\"colour\\\""),
            absl::string_view::npos)
      << p.status();
}

// Runs the CLI and returns (exit code, output).
std::pair<int, std::string> RunCli(const std::string& args) {
  return ::ratelimit::testing::RunCommand(::ratelimit::testing::BinaryPath("ratelimit") + " " +
                                          args);
}

// What a script and an operator get from the CLI: --help exits 0, --json errors are JSON on
// standard output, --timeout takes plain seconds, and Reset says what it deleted, refuses a
// name the limits file lacks (NOT_FOUND) and, on a server without a token, says Reset is
// disabled rather than asking for a credential.
TEST_F(ProcessTest, CliHelpJsonErrorsTimeoutsAndWhatResetDid) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const std::string t = "--target=" + server->target();
  auto [code, out] = RunCli("--help");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("--timeout="), std::string::npos) << out;

  std::tie(code, out) = RunCli("consume " + t + " --name=nope --key=k --json --timeout=5");
  EXPECT_EQ(code, 1) << out;
  EXPECT_EQ(out,
            "{\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"limits[0].name: limit "
            "\\\"nope\\\" is not defined and has no inline config\"}}\n");
  std::tie(code, out) = RunCli("consume " + t + " --name=cli --key=k --timeout=5x");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--timeout: \"5x\" is not a duration"), std::string::npos) << out;

  // A flag that does not exist is one error line, with or without --json.
  std::tie(code, out) = RunCli("consume " + t + " --name=cli --key=k --bogus=1");
  EXPECT_EQ(code, 1) << out;
  EXPECT_EQ(out, "ratelimit: INVALID_ARGUMENT: --bogus: no such flag (see --help)\n");

  // An admin call without the token says where the CLI reads it.
  std::tie(code, out) = RunCli("reset " + t + " --name=cli --key=r");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED: "), std::string::npos) << out;
  EXPECT_NE(out.find("(the CLI sends the token of --admin_token_file, else of "
                     "$RATELIMIT_ADMIN_TOKEN; neither is set)"),
            std::string::npos)
      << out;

  const std::string admin = " --admin_token_file=" + dir_.File("token");
  ASSERT_EQ(RunCli("consume " + t + " --name=cli --key=r --count=2").first, 0);
  std::tie(code, out) = RunCli("reset " + t + " --name=cli --key=r" + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("reset cli/r: 1 state deleted"), std::string::npos) << out;
  std::tie(code, out) = RunCli("reset " + t + " --name=cli --key=r --json" + admin);
  EXPECT_EQ(code, 0) << out;
  // (After the warning about the token file's mode, on standard error.)
  EXPECT_TRUE(absl::EndsWith(out, "\n{\"deleted\":\"0\",\"leases\":\"0\"}\n")) << out;
  std::tie(code, out) = RunCli("reset " + t + " --name=typo --key=r" + admin);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("NOT_FOUND: name: no limit \"typo\" in the limits file"), std::string::npos)
      << out;

  // A server started without a token.
  std::vector<std::string> no_token = {"--data_dir=" + dir_.File("data2"),
                                       "--limits_file=" + dir_.File("limits.yaml")};
  auto disabled = ServerProcess::Start(no_token, dir_.path());
  ASSERT_OK(disabled);
  std::tie(code, out) = RunCli("reset --target=" + (*disabled)->target() + " --name=cli --key=r");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("PERMISSION_DENIED: Reset is disabled"), std::string::npos) << out;
}

// `ratelimit override`: set (a raise the next consume uses), get, list, the audit and delete,
// with the admin token; without it, refused.
TEST_F(ProcessTest, CliOverrideSetGetListAuditDelete) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const std::string t = "--target=" + server->target();
  const std::string admin = " --admin_token_file=" + dir_.File("token");
  auto [code, out] = RunCli("override set " + t +
                            " --name=cli --key=vip --capacity=500 --expires_in=1h "
                            "--reason=incident --actor=alice" +
                            admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("set cli key vip: capacity=500 until "), std::string::npos) << out;
  EXPECT_NE(out.find(", by alice (token): incident"), std::string::npos) << out;
  std::tie(code, out) = RunCli("consume " + t + " --name=cli --key=vip --count=100");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("value=400 of 500"), std::string::npos) << out;

  std::tie(code, out) =
      RunCli("override set " + t + " --name=cli --key_pattern='bad-*' --blocked" + admin);
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) = RunCli("override get " + t + " --name=cli --key_pattern='bad-*'" + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("cli pattern bad-*: blocked"), std::string::npos) << out;
  std::tie(code, out) = RunCli("override list " + t + " --name=cli --page_size=1" + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("cli key vip: capacity=500"), std::string::npos) << out;
  EXPECT_NE(out.find("next page: --page_token="), std::string::npos) << out;
  std::tie(code, out) = RunCli("override list " + t + " --json" + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"key\":\"vip\""), std::string::npos) << out;

  std::tie(code, out) =
      RunCli("override delete " + t + " --name=cli --key=vip --reason=over" + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("deleted cli key vip"), std::string::npos) << out;
  std::tie(code, out) = RunCli("override audit " + t + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("#3 "), std::string::npos) << out;
  EXPECT_NE(out.find(" delete cli key vip by token: over"), std::string::npos) << out;

  std::tie(code, out) = RunCli("override get " + t + " --name=cli --key=vip" + admin);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("NOT_FOUND: target: no override of cli key vip"), std::string::npos) << out;
  std::tie(code, out) = RunCli("override set " + t + " --name=cli --key=k --capacity=1");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  std::tie(code, out) =
      RunCli("override set " + t + " --name=cli --key=k --capacity=1 --unlimited" + admin);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("exclude each other"), std::string::npos) << out;
}

TEST_F(ProcessTest, CliConsumesChecksReservesAndResets) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const std::string t = "--target=" + server->target();
  auto [code, out] = RunCli("consume " + t + " --name=cli --key=cli --count=4");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ALLOWED"), std::string::npos) << out;
  EXPECT_NE(out.find("cli/cli  allowed  value=6 of 10"), std::string::npos) << out;

  std::tie(code, out) = RunCli("consume " + t + " --name=cli --key=cli --count=7");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("DENIED by cli/cli: INSUFFICIENT_TOKENS, retry in"), std::string::npos) << out;

  std::tie(code, out) = RunCli("check " + t + " --name=cli --key=cli --json");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"value\":6"), std::string::npos) << out;

  std::tie(code, out) = RunCli("reserve " + t +
                               " --name=job --key=k --count=3 --kind=token_bucket --rate=1 "
                               "--period=1h --capacity=1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ALLOWED, run in 2h"), std::string::npos) << out;

  std::tie(code, out) = RunCli("reset " + t + " --name=cli --key=cli");
  EXPECT_EQ(code, 1) << out;  // no token
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  std::tie(code, out) =
      RunCli("reset " + t + " --name=cli --key=cli --admin_token_file=" + dir_.File("token"));
  EXPECT_EQ(code, 0) << out;

  std::tie(code, out) = RunCli("consume " + t + " --name=cli --key=");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("INVALID_ARGUMENT: limits[0].key: must not be empty"), std::string::npos)
      << out;
}

// The lease commands on an inline concurrency limit (--kind=concurrency): acquire, extend, leases
// (a page at a time) and release, each sending the config; a --count that is no whole number of
// slots is refused by the server, naming it, and takes nothing; a flag the command does not take
// is refused.
TEST_F(ProcessTest, CliLeaseCommandsOnAnInlineConcurrencyLimit) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const std::string t = "--target=" + server->target();
  const std::string limit = " --name=seats --key=k --kind=concurrency --capacity=2";
  const std::string admin = " --admin_token_file=" + dir_.File("token");
  for (const std::string count : {"0", "-1", "nan", "1.5"}) {
    auto [code, out] = RunCli("acquire " + t + limit + " --count=" + count);
    EXPECT_EQ(code, 1) << count << ": " << out;
    EXPECT_NE(out.find("INVALID_ARGUMENT: limits[0].count"), std::string::npos) << out;
  }
  auto [code, out] = RunCli("leases " + t + limit + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("seats/k: 0 of 2 slots held"), std::string::npos) << out;

  std::tie(code, out) = RunCli("acquire " + t + limit + " --holder=w1 --ttl=1m --json");
  ASSERT_EQ(code, 0) << out;
  const size_t at = out.find("\"id\":\"");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string id = out.substr(at + 6, 32);
  std::tie(code, out) = RunCli("extend " + t + limit + " --lease_id=" + id + " --ttl=2m");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("extended lease " + id), std::string::npos) << out;
  std::tie(code, out) = RunCli("leases " + t + limit + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("seats/k: 1 of 2 slots held"), std::string::npos) << out;
  EXPECT_NE(out.find("(w1)"), std::string::npos) << out;
  // A page at a time: w2's lease expires first, then w1's.
  std::tie(code, out) = RunCli("acquire " + t + limit + " --holder=w2 --ttl=30s");
  ASSERT_EQ(code, 0) << out;
  std::tie(code, out) = RunCli("leases " + t + limit + " --page_size=1" + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("seats/k: 2 of 2 slots held"), std::string::npos) << out;
  EXPECT_NE(out.find("(w2)"), std::string::npos) << out;
  const size_t next = out.find("next page: --page_token=");
  ASSERT_NE(next, std::string::npos) << out;
  const std::string token = out.substr(next + 24, out.find('\n', next) - next - 24);
  std::tie(code, out) =
      RunCli("leases " + t + limit + " --page_size=1 --page_token=" + token + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("(w1)"), std::string::npos) << out;
  EXPECT_EQ(out.find("next page"), std::string::npos) << out;

  std::tie(code, out) = RunCli("acquire " + t + limit + " --lease_id=" + id);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--lease_id: acquire does not take it"), std::string::npos) << out;
  std::tie(code, out) = RunCli("release " + t + limit + " --lease_id=" + id + " --ttl=1m");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--ttl: release does not take it"), std::string::npos) << out;

  std::tie(code, out) = RunCli("release " + t + limit + " --lease_id=" + id);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("released; 1 slot held now"), std::string::npos) << out;
  std::tie(code, out) = RunCli("release " + t + limit + " --lease_id=" + id);
  EXPECT_EQ(code, 2) << out;
  // The limit is inline: without its config the limits file has no "seats".
  std::tie(code, out) = RunCli("leases " + t + " --name=seats --key=k --source=inline" + admin);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("INVALID_ARGUMENT: config: required for source INLINE"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace ratelimit
