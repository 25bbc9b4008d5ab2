// A command line read as absl's parser reads it, before it runs (cmdline/flags_check.h).
#include "cmdline/flags_check.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, cli_test_count, 1, "a number flag of this test");
ABSL_FLAG(bool, cli_test_wait, false, "a boolean flag of this test");

namespace ratelimit {
namespace {

TEST(FlagsGivenTest, NamesEveryFormOfAFlagUpToABareDoubleDash) {
  const char* argv[] = {"ratelimit", "consume",           "--name=a",   "--cli_test_count",   "7",
                        "-count=2",  "--nocli_test_wait", "--notaflag", "--nocli_test_count", "--",
                        "--ttl=1s"};
  EXPECT_EQ(FlagsGiven(11, argv),
            (std::vector<std::string>{"name", "cli_test_count", "count", "cli_test_wait",
                                      "notaflag", "nocli_test_count"}));
}

// A value written after its flag is the flag's, whatever it starts with, as absl's parser takes it
// (`--key -1` named a flag "1", which the command then refused as one it does not take).
TEST(FlagsGivenTest, AValueAfterItsFlagIsNoFlagEvenWhenItStartsWithADash) {
  const char* argv[] = {"ratelimit", "consume", "--cli_test_count", "-5", "--cli_test_wait",
                        "--name",    "--x"};
  EXPECT_EQ(FlagsGiven(7, argv),
            (std::vector<std::string>{"cli_test_count", "cli_test_wait", "name", "x"}));
  EXPECT_TRUE(CheckFlags(4, argv).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), -5);
}

// What absl's parser would refuse, found before it runs (so that --json can answer in JSON).
TEST(CheckFlagsTest, NamesAnUnknownFlagAMissingValueOrAValueOfTheWrongType) {
  auto check = [](std::vector<const char*> args) {
    args.insert(args.begin(), "ratelimit");
    return CheckFlags(static_cast<int>(args.size()), args.data());
  };
  EXPECT_TRUE(
      check({"consume", "--cli_test_count=3", "--cli_test_wait", "--nocli_test_wait"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 3);  // set as the parser would set it
  EXPECT_TRUE(check({"--cli_test_count", "4", "consume", "--", "--bogus"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 4);
  const struct {
    std::vector<const char*> args;
    const char* starts;
  } bad[] = {
      {{"consume", "--bogus=1"}, "--bogus: no such flag"},
      {{"-bogus"}, "--bogus: no such flag"},
      {{"--nocli_test_count"}, "--nocli_test_count: no such flag"},
      {{"--cli_test_count=abc"}, "--cli_test_count: "},
      {{"--cli_test_count"}, "--cli_test_count: needs a value"},
      {{"--cli_test_wait=maybe"}, "--cli_test_wait: "},
  };
  for (const auto& b : bad) {
    const absl::Status s = check(b.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.starts;
    EXPECT_EQ(s.message().rfind(b.starts, 0), 0u) << s;
  }
}

// A server takes no positional argument: they are found as the parser would leave them, a
// flag's value written after it not among them.
TEST(PositionalArgumentsTest, AreWhatIsNeitherAFlagNorItsValue) {
  const char* argv[] = {
      "ratelimit-server", "data", "--cli_test_count", "7", "--cli_test_wait", "on", "-",
      "--name=x",         "--",   "--cli_test_count"};
  EXPECT_EQ(PositionalArguments(10, argv),
            (std::vector<std::string>{"data", "on", "-", "--cli_test_count"}));
  const char* none[] = {"ratelimit-server", "--cli_test_count", "-3", "--nocli_test_wait"};
  EXPECT_TRUE(PositionalArguments(4, none).empty());
}

}  // namespace
}  // namespace ratelimit
