#ifndef RATELIMIT_BENCH_LOAD_FLAGS_H_
#define RATELIMIT_BENCH_LOAD_FLAGS_H_

// The flags the closed-loop load generators share (ratelimit_loadgen, ratelimit_lease_loadgen):
// where to send, how many calls in flight over how many connections and threads, for how long,
// over how many keys, and how to print. Defined in load_flags.cc.

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/time/time.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(int, concurrency);
ABSL_DECLARE_FLAG(int, channels);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(absl::Duration, duration);
ABSL_DECLARE_FLAG(absl::Duration, warmup);
ABSL_DECLARE_FLAG(absl::Duration, deadline);
ABSL_DECLARE_FLAG(int64_t, keys);
ABSL_DECLARE_FLAG(bool, json);

#endif  // RATELIMIT_BENCH_LOAD_FLAGS_H_
