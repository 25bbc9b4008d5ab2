// Finding the patterns a key matches without trying each.
#include "storage/overrides/pattern_index.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/overrides/override.h"

namespace ratelimit {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<uint32_t> MatchOf(const PatternIndex& index, absl::string_view key) {
  const PatternIndex::Matches m = index.Match(key);
  return std::vector<uint32_t>(m.begin(), m.end());
}

TEST(PatternIndexTest, EmptyIndexMatchesNothing) {
  PatternIndex index;
  EXPECT_TRUE(index.empty());
  EXPECT_THAT(MatchOf(index, "a"), IsEmpty());
}

TEST(PatternIndexTest, FindsEveryMatchInTheOrderGiven) {
  const std::vector<std::string> patterns = {"trial-*-eu", "trial-*", "*-eu", "trial-*-*",
                                             "*",          "free-*",  "*eu*", "t*l*"};
  PatternIndex index(std::vector<absl::string_view>(patterns.begin(), patterns.end()));
  EXPECT_EQ(index.size(), patterns.size());
  EXPECT_THAT(MatchOf(index, "trial-7-eu"), ElementsAre(0, 1, 2, 3, 4, 6, 7));
  EXPECT_THAT(MatchOf(index, "trial-7"), ElementsAre(1, 4, 7));
  EXPECT_THAT(MatchOf(index, "free-1"), ElementsAre(4, 5));
  EXPECT_THAT(MatchOf(index, ""), ElementsAre(4));
}

TEST(PatternIndexTest, APatternWithoutWildcardMatchesItselfOnly) {
  const std::vector<absl::string_view> patterns = {"abc", "ab*"};
  PatternIndex index(patterns);
  EXPECT_THAT(MatchOf(index, "abc"), ElementsAre(0, 1));
  EXPECT_THAT(MatchOf(index, "abcd"), ElementsAre(1));
}

// Many patterns with the same ends ("*-<i>-*") are keyed by their middle literal; a key holding
// it twice still reports the pattern once.
TEST(PatternIndexTest, PatternsSharingTheirEndsAreFoundByTheirMiddle) {
  std::vector<std::string> patterns;
  for (int i = 0; i < 1000; ++i) patterns.push_back(absl::StrCat("*-", i, "-*"));
  patterns.push_back("*-*-*");
  patterns.push_back("**");
  PatternIndex index(std::vector<absl::string_view>(patterns.begin(), patterns.end()));
  EXPECT_THAT(MatchOf(index, "a-42-b-42-c"), ElementsAre(42, 1000, 1001));
  EXPECT_THAT(MatchOf(index, "a-42-"), ElementsAre(42, 1000, 1001));
  EXPECT_THAT(MatchOf(index, "-42"), ElementsAre(1001));
  EXPECT_THAT(MatchOf(index, "a-4242-b"), ElementsAre(1000, 1001));
}

TEST(PatternIndexTest, MatchesAsPatternMatchesDoes) {
  std::mt19937 rng(7);
  auto word = [&rng](int max_size) {
    std::string w(rng() % (max_size + 1), ' ');
    for (char& c : w) c = "ab-"[rng() % 3];
    return w;
  };
  for (int set = 0; set < 100; ++set) {
    std::vector<std::string> patterns;
    for (int i = 0, n = set % 5 == 0 ? 500 : 1 + rng() % 30; i < n; ++i) {
      std::string p = word(3);
      for (int stars = 1 + rng() % 4; stars > 0; --stars) absl::StrAppend(&p, "*", word(3));
      patterns.push_back(std::move(p));
    }
    PatternIndex index(std::vector<absl::string_view>(patterns.begin(), patterns.end()));
    for (int k = 0; k < 30; ++k) {
      const std::string key = word(12);
      std::vector<uint32_t> want;
      for (uint32_t i = 0; i < patterns.size(); ++i) {
        if (PatternMatches(patterns[i], key)) want.push_back(i);
      }
      ASSERT_EQ(MatchOf(index, key), want) << "set " << set << " key " << key;
    }
  }
}

}  // namespace
}  // namespace ratelimit
