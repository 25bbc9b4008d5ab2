// ratelimit_wake_probe: how late this machine wakes a sleeping thread, with no RPC and no server
// involved: the floor under any latency measured here.
//
// One thread sleeps until each due time (clock_nanosleep on CLOCK_MONOTONIC, absolute, timer
// slack 1 ns), --rate times a second for --duration, exactly as ratelimit_loadgen's open-loop
// pacer does, and records how late it woke. On a virtual machine whose host preempts the vCPU,
// the tail of these lateness figures is time no process on the guest can win back: a server's
// p99 measured by an open-loop client cannot be lower than the p99 here.
//
// Usage: ratelimit_wake_probe [--rate=1000] [--duration=5s] [--json]
#include <sys/prctl.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "bench/latency.h"

ABSL_FLAG(double, rate, 1000, "wake-ups per second (1..1e6)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5), "how long to probe");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");

namespace ratelimit {
namespace {

int Run() {
  const double rate = absl::GetFlag(FLAGS_rate);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  if (!(rate >= 1 && rate <= 1e6) || duration <= absl::ZeroDuration()) {
    std::fprintf(stderr, "--rate must be 1..1e6 and --duration > 0\n");
    return 2;
  }
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  const int64_t interval_ns = static_cast<int64_t>(1e9 / rate);
  const int64_t count = static_cast<int64_t>(absl::ToDoubleSeconds(duration) * rate);
  std::vector<int64_t> lateness_ns;
  lateness_ns.reserve(static_cast<size_t>(count));
  int64_t due_ns = MonotonicNanos() + interval_ns;
  for (int64_t i = 0; i < count; ++i, due_ns += interval_ns) {
    const timespec due{static_cast<time_t>(due_ns / 1000000000),
                       static_cast<long>(due_ns % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nullptr) == EINTR) {
    }
    lateness_ns.push_back(MonotonicNanos() - due_ns);
  }
  const LatencySummary late = Summarize(lateness_ns);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"rate\": %.1f, \"wakeups\": %zu, \"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, "
        "\"p999_us\": %.1f, \"max_us\": %.1f}\n",
        rate, late.count, late.p50_us, late.p90_us, late.p99_us, late.p999_us, late.max_us);
  } else {
    std::printf(
        "%zu wake-ups at %.0f/s, late by (us): p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  "
        "max %.1f\n",
        late.count, rate, late.p50_us, late.p90_us, late.p99_us, late.p999_us, late.max_us);
  }
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_wake_probe [--rate=1000] [--duration=5s] [--json]: how late this machine wakes "
      "a sleeping thread");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
