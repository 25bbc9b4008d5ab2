#include "storage/redis/redis_store_metrics.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

using Samples = StateStore::MetricFamily::Samples;
using Metrics = redis::RedisClientMetrics;

double D(uint64_t v) { return static_cast<double>(v); }

// The label of histogram bucket i: depths in [2^i, 2^(i+1)), the last one open.
std::string DepthLabel(size_t i, size_t buckets) {
  const uint64_t lo = uint64_t{1} << i;
  if (i + 1 == buckets) return absl::StrCat(lo, "+");
  const uint64_t hi = (uint64_t{1} << (i + 1)) - 1;
  return lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "-", hi);
}

}  // namespace

std::vector<StateStore::MetricFamily> RedisClientMetricFamilies(std::function<Metrics()> read) {
  auto shared = std::make_shared<std::function<Metrics()>>(std::move(read));
  std::vector<StateStore::MetricFamily> out;
  auto add = [&](std::string name, std::string help, std::string type,
                 std::vector<std::string> labels, std::function<Samples(const Metrics&)> f) {
    out.push_back(StateStore::MetricFamily{std::move(name), std::move(help), std::move(type),
                                           std::move(labels),
                                           [shared, f = std::move(f)] { return f((*shared)()); }});
  };
  add("redis_commands_total", "Redis commands completed (redirections and retries included).",
      "counter", {}, [](const Metrics& m) {
        return Samples{{{}, D(m.commands)}};
      });
  add("redis_command_errors_total",
      "Redis commands that failed (kind=timeout: no reply in --redis_timeout; error: any other "
      "failure, timeouts excluded).",
      "counter", {"kind"}, [](const Metrics& m) {
        return Samples{{{"error"}, D(m.errors - m.timeouts)}, {{"timeout"}, D(m.timeouts)}};
      });
  add("redis_round_trips_total", "Pipelined writes to Redis nodes (one round trip each).",
      "counter", {}, [](const Metrics& m) {
        return Samples{{{}, D(m.round_trips)}};
      });
  add("redis_pipeline_batches_total", "Pipelined writes by the number of commands they carried.",
      "counter", {"depth"}, [](const Metrics& m) {
        Samples s;
        const size_t n = m.pipeline_depth_histogram.size();
        for (size_t i = 0; i < n; ++i) {
          s.push_back({{DepthLabel(i, n)}, D(m.pipeline_depth_histogram[i])});
        }
        return s;
      });
  add("redis_pipeline_depth_max", "The most commands carried by one pipelined write so far.",
      "gauge", {}, [](const Metrics& m) {
        return Samples{{{}, D(m.max_pipeline_depth)}};
      });
  add("redis_redirects_total",
      "Redis Cluster redirections and retries: MOVED, ASK, TRYAGAIN, CLUSTERDOWN answers, and "
      "commands resent because their node was unreachable.",
      "counter", {"kind"}, [](const Metrics& m) {
        return Samples{{{"moved"}, D(m.moved)},
                       {{"ask"}, D(m.ask)},
                       {{"tryagain"}, D(m.tryagain)},
                       {{"clusterdown"}, D(m.clusterdown)},
                       {{"unreachable"}, D(m.unreachable_retries)}};
      });
  add("redis_slot_map_refreshes_total", "Slot maps read from the cluster (CLUSTER SLOTS).",
      "counter", {}, [](const Metrics& m) {
        return Samples{{{}, D(m.slot_map_refreshes)}};
      });
  add("redis_connects_total", "Connection attempts to Redis nodes, by outcome.", "counter",
      {"outcome"}, [](const Metrics& m) {
        return Samples{{{"ok"}, D(m.connects - std::min(m.connects, m.connect_failures))},
                       {{"failed"}, D(m.connect_failures)}};
      });
  add("redis_waits_total",
      "WAITs after pipelined writes (--redis_wait_replicas), by whether enough replicas "
      "acknowledged.",
      "counter", {"outcome"}, [](const Metrics& m) {
        return Samples{{{"enough"}, D(m.waits - m.wait_shortfalls)},
                       {{"short"}, D(m.wait_shortfalls)}};
      });
  add("redis_replies_total", "Replies per Redis node.", "counter", {"node"}, [](const Metrics& m) {
    Samples s;
    for (const auto& [node, l] : m.latency_by_node) s.push_back({{node}, D(l.count)});
    return s;
  });
  add("redis_reply_seconds_total",
      "Time from the write of a reply's batch to the reply, summed per Redis node (divide by "
      "ratelimit_redis_replies_total for the mean).",
      "counter", {"node"}, [](const Metrics& m) {
        Samples s;
        for (const auto& [node, l] : m.latency_by_node) {
          s.push_back({{node}, D(l.total_micros) / 1e6});
        }
        return s;
      });
  add("redis_reply_seconds_max", "The slowest reply so far per Redis node.", "gauge", {"node"},
      [](const Metrics& m) {
        Samples s;
        for (const auto& [node, l] : m.latency_by_node) {
          s.push_back({{node}, D(l.max_micros) / 1e6});
        }
        return s;
      });
  return out;
}

}  // namespace ratelimit
