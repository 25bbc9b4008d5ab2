// ratelimit_lease_loadgen as a process against a real ratelimit-server (port 0, its own
// directory): a short run counts acquire+release pairs on one hot key and on many keys, releases
// every lease it acquired, counts refused acquires as denied; bad flags are refused naming the
// flag. Its figures are measured by scripts/bench.sh (SECTIONS=leases), never asserted here.
#include <signal.h>

#include <string>
#include <vector>

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

std::string LeaseLoadgen(const std::vector<std::string>& flags) {
  return absl::StrCat(BinaryPath("ratelimit_lease_loadgen"), " ", absl::StrJoin(flags, " "));
}

// A short closed-loop run of `slots` slots on one thread.
std::pair<int, std::string> ShortRun(const ServerProcess& server, int slots,
                                     const std::vector<std::string>& more) {
  std::vector<std::string> flags = {"--target=" + server.target(),
                                    absl::StrCat("--concurrency=", slots),
                                    "--threads=1",
                                    "--warmup=0s",
                                    "--duration=300ms",
                                    "--json"};
  flags.insert(flags.end(), more.begin(), more.end());
  return RunCommand(LeaseLoadgen(flags));
}

TEST(LeaseLoadgenTest, CountsPairsOnOneHotKeyAndOnManyKeys) {
  TempDir dir;
  auto server = ServerProcess::Start({"--data_dir=" + dir.File("data")}, dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  for (const char* keys : {"--keys=1", "--keys=100"}) {
    const auto [code, out] = ShortRun(**server, 4, {keys});
    ASSERT_EQ(code, 0) << keys << ": " << out;
    EXPECT_GT(JsonNumber(out, "", "pairs"), 0) << out;
    // A pair is two decisions (printed to 0.1 each).
    EXPECT_NEAR(JsonNumber(out, "", "decisions_per_s"), 2 * JsonNumber(out, "", "pairs_per_s"), 0.2)
        << out;
    EXPECT_NEAR(JsonNumber(out, "", "pairs_per_s"), JsonNumber(out, "", "pairs") / 0.3, 0.1) << out;
    EXPECT_EQ(JsonNumber(out, "", "errors"), 0) << out;
    EXPECT_EQ(JsonNumber(out, "", "denied"), 0) << out;
    EXPECT_EQ(JsonNumber(out, "", "not_held"), 0) << out;
    EXPECT_GT(JsonNumber(out, "", "p50_us"), 0) << out;
    EXPECT_GE(JsonNumber(out, "", "p99_us"), JsonNumber(out, "", "acquire_p50_us")) << out;
  }
  (*server)->StopWith(SIGTERM);
}

TEST(LeaseLoadgenTest, ReleasesEveryLeaseItAcquiredAndCountsRefusals) {
  TempDir dir;
  auto server = ServerProcess::Start({"--data_dir=" + dir.File("data")}, dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  // As many slots of capacity as slots of the load generator, one-hour leases: an Acquire is
  // refused only if a lease of an earlier pair (of this run or the one before) was not released.
  for (int run = 0; run < 2; ++run) {
    const auto [code, out] = ShortRun(**server, 3, {"--capacity=3", "--ttl=1h"});
    ASSERT_EQ(code, 0) << out;
    EXPECT_GT(JsonNumber(out, "", "pairs"), 0) << out;
    EXPECT_EQ(JsonNumber(out, "", "denied"), 0) << "run " << run << ": " << out;
    EXPECT_EQ(JsonNumber(out, "", "errors"), 0) << out;
  }
  // One slot for four: the others' acquires are refused while it is held.
  const auto [code, out] = ShortRun(**server, 4, {"--capacity=1", "--name=one_slot"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_GT(JsonNumber(out, "", "pairs"), 0) << out;
  EXPECT_GT(JsonNumber(out, "", "denied"), 0) << out;
  EXPECT_EQ(JsonNumber(out, "", "errors"), 0) << out;
  (*server)->StopWith(SIGTERM);
}

// --stream (bench/lease_stream_slots.cc): the same pairs as ops of one LeaseStream a channel,
// every lease released (a second run on the same key finds all three slots free), refusals
// counted, and a result matched to its slot over two streams.
TEST(LeaseLoadgenTest, StreamPairsReleaseEveryLeaseOverOneStreamAChannel) {
  TempDir dir;
  auto server = ServerProcess::Start({"--data_dir=" + dir.File("data")}, dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  for (int run = 0; run < 2; ++run) {
    const auto [code, out] =
        ShortRun(**server, 3, {"--stream", "--capacity=3", "--ttl=1h", "--channels=2"});
    ASSERT_EQ(code, 0) << out;
    EXPECT_NE(out.find("\"transport\": \"stream\""), std::string::npos) << out;
    EXPECT_GT(JsonNumber(out, "", "pairs"), 0) << out;
    EXPECT_EQ(JsonNumber(out, "", "denied"), 0) << "run " << run << ": " << out;
    EXPECT_EQ(JsonNumber(out, "", "errors"), 0) << out;
  }
  const auto [code, out] = ShortRun(**server, 4, {"--stream", "--capacity=1", "--name=one_slot"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_GT(JsonNumber(out, "", "pairs"), 0) << out;
  EXPECT_GT(JsonNumber(out, "", "denied"), 0) << out;
  EXPECT_EQ(JsonNumber(out, "", "errors"), 0) << out;
  (*server)->StopWith(SIGTERM);
}

TEST(LeaseLoadgenTest, BadFlagsAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--concurrency=0", "--concurrency"},
      {"--channels=0", "--channels"},
      {"--threads=0", "--threads"},
      {"--duration=0s", "--duration"},
      {"--warmup=-1s", "--warmup"},
      {"--keys=0", "--keys"},
      {"--capacity=0", "--capacity"},
      {"--capacity=1000000001", "--capacity"},
      {"--ttl=0s", "--ttl"},
  };
  for (const auto& [flag, named] : cases) {
    const auto [code, out] = RunCommand(LeaseLoadgen({"--target=127.0.0.1:1", flag}));
    EXPECT_EQ(code, 2) << flag << ": " << out;
    EXPECT_NE(out.find(named), std::string::npos) << flag << ": " << out;
  }
}

}  // namespace
}  // namespace ratelimit
