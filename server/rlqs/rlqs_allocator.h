#ifndef RATELIMIT_SERVER_RLQS_RLQS_ALLOCATOR_H_
#define RATELIMIT_SERVER_RLQS_RLQS_ALLOCATOR_H_

// The fair division of one bucket's global budget among its subscribers (the Envoy instances
// reporting it over RLQS), and the demand estimate each division starts from. Pure functions and
// a value type: no clock, no protos, no locks.
//
// Division (max-min fair share): the distributable rate is the global rate less the reserve for
// newcomers. A subscriber whose demand is below the equal share of what is left gets its demand;
// the rest is split the same way among the others, until every remaining subscriber wants at
// least the equal share, which each then gets. When every demand is satisfied and rate is left
// over, the surplus is split equally among all subscribers as headroom, so a subscriber whose
// demand grows is not denied before the next division sees it. A subscriber without an estimate
// yet (a newcomer) counts as wanting everything. The burst is divided in proportion to the rates.
// The rates always sum to at most the distributable rate, the bursts to at most the global burst
// less the same reserve.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace ratelimit {

// The RLQS code's one unit conversion: reports, intervals and TTLs are kept in microseconds.
inline constexpr int64_t kMicrosPerSecond = 1000000;

// How a bucket's budget is divided. Defaults as documented in docs/envoy.md ("quota_buckets").
struct FairShareSettings {
  // Fraction of the global rate and burst never assigned, so that a newcomer's first assignment
  // fits before the others' smaller shares reach them. [0, 0.5]; default 0.05.
  double newcomer_reserve = 0.05;
  // A subscriber's new share is pushed when it differs from the one it holds by more than this
  // fraction of the one it holds (joins and leaves are always pushed). [0, 1]; default 0.1.
  double reassign_threshold = 0.1;
  // Weight of the newest report in the smoothed demand (1: no smoothing). (0, 1]; default 0.7.
  double smoothing = 0.7;

  friend bool operator==(const FairShareSettings&, const FairShareSettings&) = default;
};

// One subscriber's part of a bucket, in requests per second and tokens.
struct FairShare {
  double rate = 0;
  double burst = 0;
};

// What a division of `whole` may hand out once `held` (shares still enforced elsewhere: a
// departed stream's or a gone replica's) and the newcomers' reserve are set aside, never below
// zero. The reserve is `newcomer_reserve` (clamped to [0, 1]) of the whole, not of what is left:
// while a departed share is held, the reserve stays whole instead of shrinking with what is left
// and going to the subscribers that stayed. Divide the result with a reserve of 0.
inline FairShare Distributable(const FairShare& whole, const FairShare& held,
                               double newcomer_reserve) {
  const double reserve = std::clamp(newcomer_reserve, 0.0, 1.0);
  const double rate = whole.rate - held.rate - reserve * whole.rate;
  const double burst = whole.burst - held.burst - reserve * whole.burst;
  return FairShare{rate > 0 ? rate : 0.0, burst > 0 ? burst : 0.0};
}

// Divides `global_rate` (requests per second, >= 0) and `global_burst` (tokens, >= 0) among
// `demands.size()` subscribers by max-min fair share (see the top of this file). demands[i] is
// subscriber i's smoothed demand in requests per second, nullopt when unknown (treated as
// unbounded). The result has one share per demand, in the same order; empty for no demands.
std::vector<FairShare> DivideFairly(double global_rate, double global_burst,
                                    const FairShareSettings& settings,
                                    absl::Span<const std::optional<double>> demands);

// True when `next` should be pushed to a subscriber holding `held`: its rate moved by more than
// settings.reassign_threshold of the held rate (any change when the held rate is 0).
bool ShareMoved(const FairShare& held, const FairShare& next, const FairShareSettings& settings);

// A subscriber's demand from its usage reports: (allowed + denied) per second of time_elapsed,
// exponentially smoothed. Reports that add up to less than a second (an Envoy reporting more
// often, or one that truncates time_elapsed to whole seconds and sends 0) are carried, their
// requests and their time, into the next report instead of being a sample.
// A value type; not thread-safe.
class DemandEstimator {
 public:
  // Adds a report of `requests` (allowed + denied) over `elapsed_us` microseconds.
  void AddReport(uint64_t requests, int64_t elapsed_us, double smoothing);
  // The smoothed demand in requests per second; nullopt before a second has been reported.
  std::optional<double> demand() const { return demand_; }

 private:
  std::optional<double> demand_;
  uint64_t carried_requests_ = 0;
  int64_t carried_us_ = 0;
};

// A token bucket Envoy's quota client can enforce: it reads fill_interval in whole seconds.
struct WholeSecondTokenBucket {
  uint32_t max_tokens = 0;
  uint32_t tokens_per_fill = 0;
  int64_t fill_interval_seconds = 1;

  friend bool operator==(const WholeSecondTokenBucket&, const WholeSecondTokenBucket&) = default;
};

// The token bucket closest to `share` that never exceeds it: tokens_per_fill / fill_interval
// <= share.rate with fill_interval in 1..60 s (the shortest that is within 1% of the rate, else
// the most precise), or for a rate below one a minute one token every ceil(1 / rate) seconds, up
// to a day; max_tokens = floor(share.burst), at least 1: Envoy's bucket refills continuously at
// the assigned rate, so max_tokens is the burst it lets through (a burst below one fill stays
// below it). A rate below one a day gets tokens_per_fill 0 and max_tokens 0, which Envoy's
// TokenBucket does not take: the caller sends DENY_ALL for it.
WholeSecondTokenBucket ToWholeSecondTokenBucket(const FairShare& share);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_ALLOCATOR_H_
