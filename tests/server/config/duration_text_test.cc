// The durations of the configuration files and the command line: every unit, days alone and
// before other units, and what is refused.
#include "server/config/duration_text.h"

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

TEST(DurationTextTest, TakesEveryUnitAndDays) {
  EXPECT_EQ(*ParseDurationText("500us"), absl::Microseconds(500));
  EXPECT_EQ(*ParseDurationText("250ms"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDurationText("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDurationText("1.5h"), absl::Minutes(90));
  EXPECT_EQ(*ParseDurationText("0s"), absl::ZeroDuration());
  EXPECT_EQ(*ParseDurationText("7d"), absl::Hours(168));
  EXPECT_EQ(*ParseDurationText("1.5d"), absl::Hours(36));
  EXPECT_EQ(*ParseDurationText("2d12h"), absl::Hours(60));
  EXPECT_EQ(*ParseDurationText("1d30m15s"),
            absl::Hours(24) + absl::Minutes(30) + absl::Seconds(15));
}

TEST(DurationTextTest, ADurationMustSayItsUnit) {
  for (const char* text :
       {"60", "0", "", "d", "xd", "1d2", "2d-3h", "2d+3h", "1dd", "infd", "1 s", "1x"}) {
    const absl::StatusOr<absl::Duration> d = ParseDurationText(text);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(d.status().message().find("not a duration"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace ratelimit
