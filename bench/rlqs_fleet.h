#ifndef RATELIMIT_BENCH_RLQS_FLEET_H_
#define RATELIMIT_BENCH_RLQS_FLEET_H_

// Two ways for a fleet of clients to hold one global limit against a running ratelimit-server,
// in real time, for bench/rlqs_bench.cc:
//
// - RunRlqsFleet: simulated Envoys on Envoy's Rate Limit Quota Service. Each is a thread with
//   its own channel and stream (and a thread reading it); it opens its stream with the bucket's
//   first report, then reports the bucket's allowed and denied requests every reporting interval
//   (time_elapsed in whole seconds), offers its demand in arrivals every tick and decides them
//   locally with the assignment it holds (bench/local_quota.h).
// - RunRlsCallers: the same number of clients, each with its own channel, calling
//   envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit once per request from
//   calls_in_flight threads (an Envoy has several requests waiting for an answer at once), each
//   one call at a time, together paced at the client's demand (as fast as the answers come when
//   they cannot keep up).
//
// Client i offers demands[i] requests per second in both. What happens in [begin, end) is
// counted; before it is the warm-up.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace ratelimit::bench {

struct FleetSettings {
  std::string target;  // host:port of the server
  std::string domain;  // the Envoy domain of the bucket and of the descriptor
  std::string key;     // BucketId {key: value}; descriptor entry {key: value}
  std::string value;
  std::vector<double> demands;  // requests per second, one per client
  // RLQS: whole seconds, at least 1 s.
  absl::Duration reporting_interval = absl::Seconds(1);
  // RLQS: how often a simulated Envoy decides the requests that arrived since the last tick.
  absl::Duration tick = absl::Milliseconds(5);
  // RLS: calls in flight per client (threads sharing its channel), at least 1.
  int calls_in_flight = 4;
  // RLS: the deadline of each call.
  absl::Duration deadline = absl::Seconds(5);
};

// What a fleet did in the measured window.
struct FleetTally {
  uint64_t offered = 0;   // requests
  uint64_t admitted = 0;  // allowed (RLQS: locally; RLS: overall_code OK)
  uint64_t denied = 0;
  // RLQS: allowed without an assignment in force (none yet, or expired).
  uint64_t admitted_without_assignment = 0;
  // RLQS: the token rates the Envoys held at the end of the window, summed.
  double assigned_rate = 0;
  // RLQS: usage messages sent and bucket actions received, warm-up included.
  uint64_t reports = 0;
  uint64_t actions = 0;
  // Failed calls (RLS) or streams that ended with an error (RLQS), and the first such error.
  uint64_t errors = 0;
  std::string first_error;
};

// Opens the Envoys' streams one after another over the first reporting interval (as a fleet's
// timers are not aligned), runs them until `end`, then half-closes every stream and waits for
// the server to end it. `begin` must be at least one reporting interval after now.
FleetTally RunRlqsFleet(const FleetSettings& settings, absl::Time begin, absl::Time end);

// Runs one caller thread per demand until `end`.
FleetTally RunRlsCallers(const FleetSettings& settings, absl::Time begin, absl::Time end);

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_RLQS_FLEET_H_
