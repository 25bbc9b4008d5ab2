#include "storage/redis/cluster/redis_slot.h"

#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/support/redis_process.h"
#include "tests/support/test_support.h"

namespace ratelimit::redis {
namespace {

TEST(Crc16Test, MatchesTheXmodemCheckValue) { EXPECT_EQ(Crc16("123456789"), 0x31C3); }

// Slots answered by redis-server 7.0's CLUSTER KEYSLOT.
TEST(KeySlotTest, FixedVectorsFromARealServer) {
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("hello"), 866);
  EXPECT_EQ(KeySlot("123456789"), 12739);
  EXPECT_EQ(KeySlot(""), 0);
  EXPECT_EQ(KeySlot("{user1000}.following"), 3443);
  EXPECT_EQ(KeySlot("{user1000}.followers"), 3443);
  EXPECT_EQ(KeySlot("foo{}{bar}"), 8363);     // empty first tag: the whole key
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), 4015);  // the tag is "{bar"
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), 5061);  // the first tag only: "bar"
  EXPECT_EQ(KeySlot("{}"), 15257);
  EXPECT_EQ(KeySlot("a{b"), 13340);    // no closing brace: the whole key
  EXPECT_EQ(KeySlot("a}b{c}"), 7365);  // a '}' before the first '{' does not count
  EXPECT_EQ(KeySlot("{a}"), 15495);
}

TEST(KeySlotTest, HashTagRules) {
  EXPECT_EQ(HashTagOf("plain"), "plain");
  EXPECT_EQ(HashTagOf("x{tag}y"), "tag");
  EXPECT_EQ(HashTagOf("x{}y{tag}"), "x{}y{tag}");
  EXPECT_EQ(HashTagOf("x{{tag}}"), "{tag");
  EXPECT_EQ(HashTagOf("x{tag"), "x{tag");
  EXPECT_EQ(KeySlot("org:{42}:user:7"), KeySlot("org:{42}:limit"));
}

// Random keys, many with braces, against CLUSTER KEYSLOT of a real (cluster-enabled) server.
TEST(KeySlotTest, AgreesWithClusterKeyslot) {
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
      testing::RedisServer::Start({"--cluster-enabled", "yes"});
  ASSERT_OK(server);
  std::mt19937 rng(12345);
  const std::string alphabet = "ab{}{}xyz0:";
  for (int i = 0; i < 200; ++i) {
    std::string key;
    const int len = static_cast<int>(rng() % 12);
    for (int j = 0; j < len; ++j) key += alphabet[rng() % alphabet.size()];
    absl::StatusOr<std::string> out = (*server)->Cli({"CLUSTER", "KEYSLOT", key});
    ASSERT_OK(out);
    int expected = -1;
    ASSERT_TRUE(absl::SimpleAtoi(*out, &expected)) << *out;
    EXPECT_EQ(KeySlot(key), expected) << "key \"" << key << "\"";
  }
}

}  // namespace
}  // namespace ratelimit::redis
