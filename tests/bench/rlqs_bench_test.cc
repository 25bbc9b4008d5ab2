// ratelimit_rlqs_bench as a process against a real ratelimit-server (port 0, its own directory):
// a short run holds one limit both ways and reports what each admitted and cost; bad flags are
// refused naming the flag.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/support/json_number.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::JsonNumber;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

constexpr double kLimit = 2000;
constexpr double kBurst = 200;

std::string Bench(const std::vector<std::string>& flags) {
  return absl::StrCat(BinaryPath("ratelimit_rlqs_bench"), " ", absl::StrJoin(flags, " "));
}

TEST(RlqsBenchTest, HoldsOneLimitBothWaysAndReportsTheServersCpu) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("envoy"));
  WriteFileAtomically(dir.File("envoy/rlqs_bench.yaml"),
                      absl::StrCat(R"(domain: rlqs_bench
descriptors:
  - key: tenant
    value: bench
    rate_limit: {unit: second, requests_per_unit: )",
                                   kLimit, R"(, algorithm: token_bucket, burst: )", kBurst, R"(}
quota_buckets:
  rules:
    - {name: bench, match: {tenant: bench}, requests_per_unit: )",
                                   kLimit, R"(, unit: second, burst: )", kBurst, "}\n"));
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--rlqs", "--envoy_config_dir=" + dir.File("envoy")},
      dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  const double rls_seconds = 0.5;
  const auto [code, out] = RunCommand(
      Bench({"--target=" + (*server)->target(), absl::StrCat("--server_pid=", (*server)->pid()),
             absl::StrCat("--limit=", kLimit), "--clients=3", "--rls_in_flight=2",
             "--rlqs_warmup=1s", "--rlqs_duration=500ms", "--rls_warmup=0s",
             absl::StrCat("--rls_duration=", rls_seconds * 1000, "ms"), "--json"}));
  ASSERT_EQ(code, 0) << out;
  // RLQS: every Envoy held an assignment through the window, and together they never held more
  // than the limit.
  EXPECT_GT(JsonNumber(out, "rlqs", "admitted"), 0) << out;
  EXPECT_EQ(JsonNumber(out, "", "rlqs_admitted_without_assignment"), 0) << out;
  EXPECT_GT(JsonNumber(out, "", "rlqs_assigned_rate"), 0) << out;
  EXPECT_LE(JsonNumber(out, "", "rlqs_assigned_rate"), kLimit) << out;
  EXPECT_GT(JsonNumber(out, "", "rlqs_reports"), 0) << out;
  // Offered twice the limit, RLQS denied some.
  EXPECT_GT(JsonNumber(out, "rlqs", "denied_per_s"), 0) << out;
  // RLS v3: the server's token bucket let through at most its burst and its rate (and the calls
  // in flight when the window opened).
  EXPECT_GT(JsonNumber(out, "rls", "admitted"), 0) << out;
  EXPECT_LE(JsonNumber(out, "rls", "admitted"), kBurst + kLimit * rls_seconds + 3 * 2) << out;
  // The server answered every call: its CPU over the window is more than nothing.
  EXPECT_GT(JsonNumber(out, "rls", "server_cpu_s"), 0) << out;
  EXPECT_GT(JsonNumber(out, "rls", "cpu_us_per_admitted"), 0) << out;
  EXPECT_GE(JsonNumber(out, "", "cpu_per_admitted_ratio"), 0) << out;
  EXPECT_GE(JsonNumber(out, "", "rlqs_over_assignment_percent"), 0) << out;
  (*server)->StopWith(SIGTERM);
}

TEST(RlqsBenchTest, BadFlagsAreRefusedNamingTheFlag) {
  const std::string pid = absl::StrCat("--server_pid=", getpid());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--limit=100"}, "--server_pid"},
      {{pid}, "--limit"},
      {{pid, "--limit=100", "--clients=0"}, "--clients"},
      {{pid, "--limit=100", "--reporting_interval=1500ms"}, "--reporting_interval"},
      {{pid, "--limit=100", "--reporting_interval=2s", "--rlqs_warmup=1s"}, "--rlqs_warmup"},
      {{"--server_pid=2000000000", "--limit=100"}, "--server_pid"},
      {{pid, "--limit=100", "--idle_duration=-1s"}, "--idle_duration"},
  };
  for (const auto& [flags, named] : cases) {
    const auto [code, out] = RunCommand(Bench(flags));
    EXPECT_EQ(code, 2) << absl::StrJoin(flags, " ") << ": " << out;
    EXPECT_NE(out.find(named), std::string::npos) << absl::StrJoin(flags, " ") << ": " << out;
  }
}

}  // namespace
}  // namespace ratelimit
