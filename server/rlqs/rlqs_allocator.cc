#include "server/rlqs/rlqs_allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ratelimit {

std::vector<FairShare> DivideFairly(double global_rate, double global_burst,
                                    const FairShareSettings& settings,
                                    absl::Span<const std::optional<double>> demands) {
  const size_t n = demands.size();
  std::vector<FairShare> out(n);
  if (n == 0) return out;
  const double keep = 1.0 - std::clamp(settings.newcomer_reserve, 0.0, 1.0);
  const double rate = std::max(0.0, global_rate) * keep;
  const double burst = std::max(0.0, global_burst) * keep;

  // Water-filling: the subscribers by demand, smallest first; each takes the smaller of its
  // demand and an equal part of what is left.
  constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto want = [&](size_t i) { return demands[i] ? std::max(0.0, *demands[i]) : kUnbounded; };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return want(a) < want(b); });
  double left = rate;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    const double equal = left / static_cast<double>(n - k);
    out[i].rate = std::min(want(i), equal);
    left -= out[i].rate;
  }
  // Every demand met and rate left over: equal headroom for all.
  if (left > 0) {
    const double extra = left / static_cast<double>(n);
    for (FairShare& s : out) s.rate += extra;
  }
  // Rounding never makes the sum exceed the distributable rate.
  double sum = 0;
  for (const FairShare& s : out) sum += s.rate;
  if (sum > rate && sum > 0) {
    const double scale = rate / sum;
    for (FairShare& s : out) s.rate *= scale;
  }
  for (FairShare& s : out) {
    s.burst = rate > 0 ? burst * (s.rate / rate) : burst / static_cast<double>(n);
  }
  return out;
}

bool ShareMoved(const FairShare& held, const FairShare& next, const FairShareSettings& settings) {
  if (held.rate <= 0) return next.rate != held.rate;
  return std::abs(next.rate - held.rate) > settings.reassign_threshold * held.rate;
}

void DemandEstimator::AddReport(uint64_t requests, int64_t elapsed_us, double smoothing) {
  // Saturating: a sum past 2^64 requests or 10,000 years is no report a client makes.
  constexpr uint64_t kMaxRequests = std::numeric_limits<uint64_t>::max();
  constexpr int64_t kMaxMicros = std::numeric_limits<int64_t>::max();
  carried_requests_ =
      requests > kMaxRequests - carried_requests_ ? kMaxRequests : carried_requests_ + requests;
  carried_us_ = elapsed_us > kMaxMicros - carried_us_ ? kMaxMicros : carried_us_ + elapsed_us;
  if (carried_us_ < kMicrosPerSecond) return;
  const double sample = static_cast<double>(carried_requests_) /
                        (static_cast<double>(carried_us_) / kMicrosPerSecond);
  carried_requests_ = 0;
  carried_us_ = 0;
  const double a = std::clamp(smoothing, 0.0, 1.0);
  demand_ = demand_ ? a * sample + (1 - a) * *demand_ : sample;
}

WholeSecondTokenBucket ToWholeSecondTokenBucket(const FairShare& share) {
  constexpr int64_t kMaxFillSeconds = 60;
  constexpr int64_t kMaxLongFillSeconds = 86400;
  const double rate = std::max(0.0, share.rate);
  WholeSecondTokenBucket best;
  best.fill_interval_seconds = kMaxFillSeconds;
  double best_rate = -1;
  for (int64_t f = 1; f <= kMaxFillSeconds; ++f) {
    const double tokens = std::floor(std::min(rate * static_cast<double>(f), 4294967295.0));
    const double got = tokens / static_cast<double>(f);
    if (got > best_rate) {
      best_rate = got;
      best.tokens_per_fill = static_cast<uint32_t>(tokens);
      best.fill_interval_seconds = f;
    }
    if (rate > 0 && got >= 0.99 * rate) break;
  }
  if (best.tokens_per_fill == 0 && rate > 0) {
    // Below one token a minute: one token every ceil(1 / rate) seconds, up to a day.
    int64_t f = static_cast<int64_t>(std::ceil(std::min(1.0 / rate, 1e12)));
    if (std::floor(rate * static_cast<double>(f)) < 1) ++f;  // rate × f fell short of 1 by rounding
    if (f <= kMaxLongFillSeconds) {
      best.tokens_per_fill = 1;
      best.fill_interval_seconds = f;
    }
  }
  if (best.tokens_per_fill == 0) best.fill_interval_seconds = 1;
  // Envoy's bucket refills continuously at tokens_per_fill / fill_interval, up to max_tokens: the
  // burst is max_tokens itself, at least the one token without which nothing passes.
  if (best.tokens_per_fill > 0) {
    const double burst = std::floor(std::clamp(share.burst, 1.0, 4294967295.0));
    best.max_tokens = static_cast<uint32_t>(burst);
  }
  return best;
}

}  // namespace ratelimit
