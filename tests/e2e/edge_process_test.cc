// The real binaries at the edge: start-up failures (a wrong command line, a port or data directory
// in use) exit promptly with one line, --help lists the flags, and the OTLP resource carries
// process.pid as an integer.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "storage/file_util.h"
#include "tests/support/fake_collector.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::FakeCollector;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;

struct Exit {
  bool exited = false;  // false: still running at the deadline (then killed)
  int code = -1;
  std::string stderr_text;
};

// Runs `binary` with `args`, standard error to a file, and waits up to `deadline` for it to
// exit; a process still running then is killed (by its pid) and reported as not exited.
Exit RunToExit(const std::string& binary, std::vector<std::string> args,
               const std::string& stderr_path, absl::Duration deadline) {
  args.insert(args.begin(), binary);
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* err = std::freopen(stderr_path.c_str(), "w", stderr);
    (void)err;
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Exit result;
  const absl::Time end = absl::Now() + deadline;
  int status = 0;
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      result.exited = true;
      result.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (absl::Now() >= end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    // Polling a child's exit; there is no event to wait on with a deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.stderr_text = ReadFileToString(stderr_path).value_or("");
  return result;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(EdgeProcessTest, SecondServerOnTheSameDataDirExitsPromptlyWithOneLine) {
  TempDir dir;
  auto first = ServerProcess::Start({"--data_dir=" + dir.File("data")}, dir.path());
  ASSERT_OK(first);
  for (int i = 0; i < 20; ++i) {
    const Exit e = RunToExit(
        BinaryPath("ratelimit-server"),
        {"--data_dir=" + dir.File("data"), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"},
        dir.File("second-" + std::to_string(i) + ".log"), absl::Seconds(60));
    ASSERT_TRUE(e.exited) << "run " << i << " hung during start-up: " << e.stderr_text;
    EXPECT_NE(e.code, 0) << "run " << i;
    const std::vector<std::string> lines = Lines(e.stderr_text);
    ASSERT_EQ(lines.size(), 1u) << "run " << i << ": " << e.stderr_text;
    EXPECT_TRUE(absl::StrContains(lines[0], "start-up failed")) << lines[0];
    EXPECT_TRUE(absl::StrContains(lines[0], "lock")) << lines[0];
  }
}

TEST(EdgeProcessTest, SecondServerOnTheSamePortExitsNonZero) {
  TempDir dir;
  auto first = ServerProcess::Start({"--data_dir=" + dir.File("a")}, dir.path());
  ASSERT_OK(first);
  const Exit e = RunToExit(
      BinaryPath("ratelimit-server"),
      {"--data_dir=" + dir.File("b"), "--listen=127.0.0.1:" + std::to_string((*first)->port()),
       "--metrics_listen=127.0.0.1:0"},
      dir.File("second.log"), absl::Seconds(60));
  ASSERT_TRUE(e.exited) << e.stderr_text;
  EXPECT_NE(e.code, 0) << e.stderr_text;
  // Every line is the server's (gRPC's own, "E1205 15:20:40.015 ... chttp2_server.cc", were
  // written beside it), and the failure names its cause.
  int errors = 0;
  for (const std::string& line : Lines(e.stderr_text)) {
    EXPECT_TRUE(absl::StartsWith(line, "20")) << line;
    if (!absl::StrContains(line, " ERROR ")) continue;
    ++errors;
    EXPECT_TRUE(absl::StrContains(line, "start-up failed")) << line;
    EXPECT_TRUE(absl::StrContains(line, "Address already in use")) << line;
  }
  EXPECT_EQ(errors, 1) << e.stderr_text;
}

// A flag that does not exist, a value its flag cannot read, or an argument that is not a flag
// (it was dropped unseen, and the server started) is one start-up failure line naming it.
TEST(EdgeProcessTest, AWrongCommandLineIsOneLineNamingIt) {
  TempDir dir;
  const struct {
    std::vector<std::string> args;
    const char* names;
  } cases[] = {
      {{"--no_such_flag=1"}, "--no_such_flag: no such flag"},
      {{"--gc_interval=soon"}, "--gc_interval: "},
      {{"--data_dir=" + dir.File("data"), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
        "serve"},
       "unexpected argument \\\"serve\\\""},
  };
  for (const auto& c : cases) {
    const Exit e =
        RunToExit(BinaryPath("ratelimit-server"), c.args, dir.File("err.log"), absl::Seconds(60));
    ASSERT_TRUE(e.exited) << c.names << ": still running";
    EXPECT_EQ(e.code, 1) << e.stderr_text;
    const std::vector<std::string> lines = Lines(e.stderr_text);
    ASSERT_EQ(lines.size(), 1u) << e.stderr_text;
    EXPECT_TRUE(absl::StrContains(lines[0], "ERROR start-up failed")) << lines[0];
    EXPECT_TRUE(absl::StrContains(lines[0], c.names)) << lines[0];
  }
}

TEST(EdgeProcessTest, BusyMetricsPortSaysWhy) {
  TempDir dir;
  auto first = ServerProcess::Start({"--data_dir=" + dir.File("a")}, dir.path());
  ASSERT_OK(first);
  const Exit e =
      RunToExit(BinaryPath("ratelimit-server"),
                {"--data_dir=" + dir.File("b"), "--listen=127.0.0.1:0",
                 "--metrics_listen=127.0.0.1:" + std::to_string((*first)->metrics_port())},
                dir.File("second.log"), absl::Seconds(60));
  ASSERT_TRUE(e.exited) << e.stderr_text;
  EXPECT_NE(e.code, 0);
  EXPECT_TRUE(absl::StrContains(e.stderr_text, "Address already in use")) << e.stderr_text;
}

TEST(EdgeProcessTest, HelpListsTheFlagsOfBothBinaries) {
  auto help = [&](const std::string& binary) {
    return ::ratelimit::testing::RunCommand(BinaryPath(binary) + " --help").second;
  };
  const std::string server_help = help("ratelimit-server");
  for (const char* flag :
       {"--listen", "--data_dir", "--limits_file", "--port_file", "--metrics_port_file",
        "--limits_reload_interval", "--max_concurrent_streams", "--grpc_memory_limit_mb",
        "--max_connection_idle", "--keepalive_min_ping_interval", "--keepalive_max_ping_strikes"}) {
    EXPECT_TRUE(absl::StrContains(server_help, flag)) << flag << " missing:\n" << server_help;
  }
  const std::string cli_help = help("ratelimit");
  for (const char* flag : {"--target", "--name", "--key", "--count", "--json", "--timeout"}) {
    EXPECT_TRUE(absl::StrContains(cli_help, flag)) << flag << " missing:\n" << cli_help;
  }
}

TEST(EdgeProcessTest, ProcessPidIsAnIntegerResourceAttribute) {
  TempDir dir;
  FakeCollector collector;
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--otel_endpoint=" + collector.target()}, dir.path());
  ASSERT_OK(server);
  auto client = RateLimitClient::Connect((*server)->target(), ClientOptions{absl::Seconds(10), ""});
  v1::RateLimitRequest request = MakeRequest("api", "k");
  v1::LimitConfig* c = request.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(10);
  c->mutable_period()->set_seconds(1);
  ASSERT_OK(client->Consume(request));
  ASSERT_TRUE(collector.WaitForSpans(1));
  const auto requests = collector.Requests();
  ASSERT_FALSE(requests.empty());
  bool found = false;
  for (const auto& attr : requests[0].resource_spans(0).resource().attributes()) {
    if (attr.key() != "process.pid") continue;
    found = true;
    EXPECT_EQ(attr.value().value_case(), opentelemetry::proto::common::v1::AnyValue::kIntValue);
    EXPECT_EQ(attr.value().int_value(), (*server)->pid());
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace ratelimit
