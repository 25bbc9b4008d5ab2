#include "bench/latency.h"

#include <algorithm>
#include <cmath>

namespace ratelimit {
namespace {

// Nearest-rank percentile of sorted samples, in microseconds. REQUIRES: !sorted.empty().
double PercentileUs(const std::vector<int64_t>& sorted, double fraction) {
  const double rank = std::ceil(fraction * static_cast<double>(sorted.size()));
  const size_t index = std::clamp<size_t>(static_cast<size_t>(rank), 1, sorted.size()) - 1;
  return static_cast<double>(sorted[index]) / 1000.0;
}

}  // namespace

LatencySummary Summarize(std::vector<int64_t>& samples_ns) {
  LatencySummary s;
  if (samples_ns.empty()) return s;
  std::sort(samples_ns.begin(), samples_ns.end());
  double total = 0;
  for (int64_t v : samples_ns) total += static_cast<double>(v);
  s.count = samples_ns.size();
  s.mean_us = total / static_cast<double>(s.count) / 1000.0;
  s.p50_us = PercentileUs(samples_ns, 0.50);
  s.p90_us = PercentileUs(samples_ns, 0.90);
  s.p99_us = PercentileUs(samples_ns, 0.99);
  s.p999_us = PercentileUs(samples_ns, 0.999);
  s.max_us = static_cast<double>(samples_ns.back()) / 1000.0;
  return s;
}

}  // namespace ratelimit
