#ifndef RATELIMIT_BENCH_LATENCY_H_
#define RATELIMIT_BENCH_LATENCY_H_

// Latency samples and their percentiles, shared by the store benchmark and the load generator.

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ratelimit {

// Nanoseconds on CLOCK_MONOTONIC. A vDSO call with no system call on Linux (about 20 ns with the
// tsc clocksource), cheap next to what is being timed.
inline int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Summary of a set of latency samples, in microseconds. Percentiles are nearest-rank: p50 is the
// smallest sample at least half of the samples are <= to. All zero when there are no samples.
struct LatencySummary {
  size_t count = 0;
  double mean_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
};

// Summarizes `samples_ns` (nanoseconds). Sorts the vector in place.
LatencySummary Summarize(std::vector<int64_t>& samples_ns);

}  // namespace ratelimit

#endif  // RATELIMIT_BENCH_LATENCY_H_
