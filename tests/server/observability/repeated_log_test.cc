// RepeatedLog: an event repeated as often as requests arrive is written once, then summarised
// per interval, and the lines account for every occurrence.
#include "server/observability/repeated_log.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::Lines;
using ::ratelimit::testing::LoggedOccurrences;

TEST(RepeatedLogTest, AHundredThousandOccurrencesMakeAFewLinesThatAddUp) {
  FakeClock clock;
  ::testing::internal::CaptureStderr();
  {
    RepeatedLog log(LogLevel::kError, "store failure", clock, absl::Seconds(10));
    // 100,000 failures over 60 s of the fake clock, a flush every simulated second.
    for (int i = 0; i < 100000; ++i) {
      log.Log({{"error", "disk full"}});
      if (i % 1667 == 0) {
        clock.Advance(kSecond);
        log.Flush();
      }
    }
  }  // the destructor writes the last summary
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  EXPECT_LE(lines.size(), 14u);  // about two per 10 s interval
  EXPECT_GE(lines.size(), 6u);
  EXPECT_EQ(LoggedOccurrences(lines, "store failure"), 100000u);
  EXPECT_NE(lines.front().find("ERROR store failure error=\"disk full\""), std::string::npos)
      << lines.front();
  EXPECT_NE(lines[1].find("store failure repeated "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(" times in the last 10s"), std::string::npos) << lines[1];
}

TEST(RepeatedLogTest, AnOccurrenceAfterAQuietIntervalIsWrittenInFull) {
  FakeClock clock;
  ::testing::internal::CaptureStderr();
  RepeatedLog log(LogLevel::kWarning, "reset refused", clock, absl::Seconds(10));
  log.Log({{"peer", "a"}});
  clock.Advance(30 * kSecond);
  log.Flush();  // nothing was counted: no summary
  log.Log({{"peer", "b"}});
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("reset refused peer=a"), std::string::npos);
  EXPECT_NE(lines[1].find("reset refused peer=b"), std::string::npos);
}

TEST(RepeatedLogTest, GroupedOccurrencesAreCountedAndFlushedByTheProcessWideFlush) {
  FakeClock clock;
  ::testing::internal::CaptureStderr();
  RepeatedLog log(LogLevel::kError, "store failure", clock, absl::Seconds(10));
  log.Log({{"batch_entries_failed", "100"}}, 100);  // one line, 99 more counted
  log.Log({{"batch_entries_failed", "50"}}, 50);
  FlushRepeatedLogs();  // the interval has not passed: nothing yet
  clock.Advance(11 * kSecond);
  FlushRepeatedLogs();
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("store failure repeated 149 times in the last 10s"), std::string::npos)
      << lines[1];
}

}  // namespace
}  // namespace ratelimit
