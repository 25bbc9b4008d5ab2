// Overrides' patterns, their precedence, and the limits they make of configured ones.
#include "storage/overrides/override.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TokenBucket;

TEST(PatternTest, StarMatchesAnyRunOfBytes) {
  EXPECT_TRUE(PatternMatches("*", ""));
  EXPECT_TRUE(PatternMatches("*", "anything"));
  EXPECT_TRUE(PatternMatches("trial-*", "trial-"));
  EXPECT_TRUE(PatternMatches("trial-*", "trial-7"));
  EXPECT_FALSE(PatternMatches("trial-*", "trial"));
  EXPECT_FALSE(PatternMatches("trial-*", "free-trial-7"));
  EXPECT_TRUE(PatternMatches("*-eu", "org-1-eu"));
  EXPECT_FALSE(PatternMatches("*-eu", "org-1-eu-2"));
  EXPECT_TRUE(PatternMatches("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(PatternMatches("a*b*c", "aXcYb"));
  EXPECT_TRUE(PatternMatches("a**b", "ab"));
}

TEST(PatternTest, PrecedenceIsFewestStarsThenLongestPrefixThenMostLiterals) {
  std::vector<std::string> patterns = {"*", "trial-*-*", "trial-*", "t*-eu", "trial-*-eu", "*-eu"};
  std::sort(patterns.begin(), patterns.end(),
            [](const std::string& a, const std::string& b) { return MorePreciseThan(a, b); });
  EXPECT_EQ(patterns,
            (std::vector<std::string>{"trial-*-eu", "trial-*", "t*-eu", "*-eu", "*", "trial-*-*"}))
      << "one star before two; among one star the longer literal prefix, then more literals";
  EXPECT_FALSE(MorePreciseThan("a*", "a*"));
  EXPECT_TRUE(MorePreciseThan("a*", "b*"));  // a tie broken byte-wise, so one always wins
}

TEST(PatternTest, ValidatePatternNamesTheField) {
  EXPECT_OK(ValidatePattern("trial-*", "target.key_pattern"));
  for (const std::string& bad : {std::string(), std::string("no-star"), std::string("*********"),
                                 std::string(kMaxKeyBytes, '*') + "x"}) {
    const absl::Status s = ValidatePattern(bad, "target.key_pattern");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StartsWith(s.message(), "target.key_pattern: ")) << s;
  }
}

TEST(OverrideActionTest, UnsetFieldsKeepTheConfiguredValues) {
  const LimitConfig base = TokenBucket(10, kSecond, 20, 5);
  OverrideAction a;
  a.capacity = 200;
  const LimitConfig c = ApplyAction(base, a);
  EXPECT_EQ(c.rate, 10);
  EXPECT_EQ(c.period_us, kSecond);
  EXPECT_EQ(c.capacity, 200);
  EXPECT_EQ(c.max_reserved, 5);
  a.effect = OverrideAction::Effect::kBlocked;
  EXPECT_EQ(ApplyAction(base, a), base);
}

TEST(OverrideActionTest, CheckActionNamesTheBadField) {
  const LimitConfig bucket = TokenBucket(10, kSecond);
  OverrideAction a;
  EXPECT_TRUE(absl::StartsWith(CheckAction(bucket, a, "override.").message(), "override.limit: "));
  a.rate = -1;
  EXPECT_TRUE(
      absl::StartsWith(CheckAction(bucket, a, "override.").message(), "override.limit.rate: "));
  a.rate = 5;
  a.period_us = 2 * kSecond;
  EXPECT_OK(CheckAction(bucket, a, "override."));
  const absl::Status window = CheckAction(FixedWindow(10, kSecond), a, "override.");
  EXPECT_TRUE(absl::StartsWith(window.message(), "override.limit.period: ")) << window;
}

TEST(OverrideActionTest, AConcurrencyLimitTakesNoOverride) {
  LimitConfig jobs;
  jobs.kind = LimitKind::kConcurrency;
  jobs.capacity = 10;
  FillLeaseTtlDefaults(jobs);
  ASSERT_OK(ValidateLimitConfig(jobs, ""));
  for (OverrideAction::Effect effect :
       {OverrideAction::Effect::kLimit, OverrideAction::Effect::kUnlimited,
        OverrideAction::Effect::kBlocked}) {
    OverrideAction a;
    a.effect = effect;
    a.capacity = 20;
    const absl::Status s = CheckAction(jobs, a, "override.");
    EXPECT_TRUE(absl::StartsWith(s.message(), "override.target.name: ")) << s;
  }
}

TEST(OverrideTest, EndsAtTheEarlierOfDeletionAndExpiry) {
  Override o;
  EXPECT_TRUE(o.ActiveAt(0));
  o.expires_at_us = 100;
  EXPECT_TRUE(o.ActiveAt(99));
  EXPECT_FALSE(o.ActiveAt(100));
  o.deleted_at_us = 50;
  EXPECT_EQ(o.EndsAt(), 50);
  EXPECT_FALSE(o.ActiveAt(60));
}

}  // namespace
}  // namespace ratelimit
