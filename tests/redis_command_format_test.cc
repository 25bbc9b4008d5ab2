// FormatCommand: the RESP bytes of a command, checked against fixed encodings and against
// hiredis' own formatter (an independent implementation of the same protocol).
#include <hiredis/hiredis.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_connection.h"

namespace ratelimit::redis {
namespace {

std::string HiredisFormat(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* out = nullptr;
  const int n =
      redisFormatCommandArgv(&out, static_cast<int>(args.size()), argv.data(), lengths.data());
  EXPECT_GE(n, 0);
  std::string wire(out, n);
  redisFreeCommand(out);
  return wire;
}

TEST(FormatCommandTest, EncodesEachArgumentAsABulkString) {
  EXPECT_EQ(FormatCommand({"PING"}), "*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(FormatCommand({"SET", "k", ""}), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
  // Bytes pass through as they are, CR, LF and NUL included: lengths frame them.
  EXPECT_EQ(FormatCommand({"GET", std::string("a\r\n\0b", 5)}),
            std::string("*2\r\n$3\r\nGET\r\n$5\r\na\r\n\0b\r\n", 24));
}

TEST(FormatCommandTest, CountsAndLengthsOfSeveralDigits) {
  std::vector<std::string> args(12, "x");
  args[0] = std::string(1234, 'v');
  const std::string wire = FormatCommand(args);
  EXPECT_EQ(wire.substr(0, 12), "*12\r\n$1234\r\n");
  EXPECT_EQ(wire.size(), 5 + (7 + 1234 + 2) + 11 * (4 + 1 + 2));
}

TEST(FormatCommandTest, AgreesWithHiredisOnRandomCommands) {
  std::mt19937_64 rng(20261127);
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::string> args(1 + rng() % 20);
    for (std::string& a : args) {
      // Mostly short arguments, some past 9, 99 and 999 bytes (the length's digit count).
      const size_t len = rng() % 4 == 0 ? rng() % 1500 : rng() % 12;
      a.resize(len);
      for (char& c : a) c = static_cast<char>(rng() % 256);
    }
    ASSERT_EQ(FormatCommand(args), HiredisFormat(args)) << "round " << round;
  }
}

}  // namespace
}  // namespace ratelimit::redis
