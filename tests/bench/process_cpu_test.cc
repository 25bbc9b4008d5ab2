// Reading another process's CPU time from /proc/<pid>/stat.
#include "bench/process_cpu.h"

#include <unistd.h>

#include <time.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace ratelimit::bench {
namespace {

int64_t CpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

TEST(ProcessCpuTest, ParsesUserPlusSystemTicksAfterTheCommandName) {
  // A command name with a space and a parenthesis; utime 250, stime 50.
  const char stat[] =
      "4242 (rl (serv) er) S 1 4242 4242 0 -1 4194560 1061 0 0 0 250 50 0 0 20 0 9 0 100 "
      "1000 200";
  absl::StatusOr<uint64_t> ticks = ParseProcStatCpuTicks(stat);
  ASSERT_TRUE(ticks.ok()) << ticks.status();
  EXPECT_EQ(*ticks, 300u);
}

TEST(ProcessCpuTest, MalformedStatIsRefused) {
  EXPECT_EQ(ParseProcStatCpuTicks("4242 server S 1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcStatCpuTicks("4242 (server) S 1 2 3").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcStatCpuTicks("4242 (s) S 1 1 1 0 -1 0 0 0 0 0 x 5 0").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProcessCpuTest, ReadsARunningProcessAndGrowsWithItsWork) {
  absl::StatusOr<int64_t> before = ProcessCpuMicros(getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  // Spin for 30 ms of this process's CPU, three ticks of the usual 10 ms.
  const int64_t until = CpuNanos() + 30000000;
  volatile uint64_t sink = 0;
  while (CpuNanos() < until) sink = sink + 1;
  absl::StatusOr<int64_t> after = ProcessCpuMicros(getpid());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(*after, *before);
}

TEST(ProcessCpuTest, NoSuchProcessIsNotFound) {
  // Process ids stop well below INT32_MAX (pid_max is at most 2^22).
  EXPECT_EQ(ProcessCpuMicros(2000000000).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ratelimit::bench
