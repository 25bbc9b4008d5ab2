#ifndef RATELIMIT_STORAGE_REDIS_REDIS_STORE_METRICS_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_STORE_METRICS_H_

#include <functional>
#include <vector>

#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/state_store.h"

namespace ratelimit {

// The Prometheus families of a Redis cluster client's counters (names without the "ratelimit_"
// prefix), each reading a fresh snapshot from `read` when scraped:
//   redis_commands_total, redis_command_errors_total{kind="error|timeout"},
//   redis_round_trips_total, redis_pipeline_batches_total{depth="1|2-3|...|256+"},
//   redis_pipeline_depth_max, redis_redirects_total{kind="moved|ask|tryagain|clusterdown"},
//   redis_slot_map_refreshes_total, redis_connects_total{outcome="ok|failed"},
//   redis_waits_total{outcome="enough|short"},
//   redis_replies_total{node}, redis_reply_seconds_total{node}, redis_reply_seconds_max{node}
//   (per node: replies, and the time from the write of a reply's batch to the reply).
// `read` must stay valid (and thread-safe) while the families are used.
std::vector<StateStore::MetricFamily> RedisClientMetricFamilies(
    std::function<redis::RedisClientMetrics()> read);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_STORE_METRICS_H_
