// The server's own metric families, registered by RateLimitServer::Start beside those of the
// services (docs/operations.md lists them all): the Envoy rules' statistics, the slots leases
// hold, the overrides in force, the xDS client's, and the store's and the trace exporter's.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/server.h"

namespace ratelimit {

void RateLimitServer::RegisterEnvoyMetrics() {
  const EnvoyRateLimitServiceImpl* envoy = envoy_service_.get();
  metrics_registry_.AddCollector(
      "ratelimit_envoy_rule_hits_total",
      "Hits counted per Envoy rule (the reference's per-rule stats), by result: total, "
      "over_limit (shadow included), within_limit, shadow_mode, near_limit, negative_hits "
      "(refunded).",
      "counter", {"rule", "result"},
      [envoy] {
        std::vector<std::pair<std::vector<std::string>, double>> out;
        for (const auto& [rule, c] : envoy->stats().Snapshot()) {
          out.push_back({{rule, "total"}, static_cast<double>(c.total_hits)});
          out.push_back({{rule, "over_limit"}, static_cast<double>(c.over_limit)});
          out.push_back({{rule, "within_limit"}, static_cast<double>(c.within_limit)});
          out.push_back({{rule, "shadow_mode"}, static_cast<double>(c.shadow_mode)});
          out.push_back({{rule, "negative_hits"}, static_cast<double>(c.negative_hits)});
          out.push_back({{rule, "near_limit"}, static_cast<double>(c.near_limit)});
        }
        return out;
      },
      2000, "rule");
  metrics_registry_.AddCollector(
      "ratelimit_envoy_domain_not_found_total",
      "Envoy requests for a domain the Envoy configuration does not define, answered OK with no "
      "limit (the reference's domain_not_found): a misspelt domain in Envoy's configuration. The "
      "first 64 domains are counted apart, later ones under domain=\"(other)\".",
      "counter", {"domain"},
      [envoy] {
        std::vector<std::pair<std::vector<std::string>, double>> out;
        for (const auto& [domain, n] : envoy->stats().DomainsNotFound()) {
          out.push_back({{domain}, static_cast<double>(n)});
        }
        return out;
      },
      EnvoyStats::kMaxUnknownDomains, "domain");
  metrics_registry_.AddCounterFn(
      "ratelimit_envoy_global_shadow_mode_total",
      "Envoy requests answered OK only because of --envoy_shadow_mode (the reference's "
      "global_shadow_mode).",
      [envoy] { return static_cast<double>(envoy->stats().global_shadow_mode()); });
}

void RateLimitServer::RegisterLeaseMetrics() {
  HeldSlots* held = held_slots_.get();
  metrics_registry_.AddCollector(
      "ratelimit_lease_slots_held",
      "Slots of concurrency limits held, by limit name, as this server's own decisions last saw "
      "each key (a key is forgotten max_lease_ttl after its last decision here); 0 for a "
      "concurrency limit of the limits file with none held.",
      "gauge", {"limit"},
      [held, registry = &registry_] {
        MetricsRegistry::Samples out;
        absl::flat_hash_set<std::string> seen;
        for (auto& [limit, slots] : held->PerLimit()) {
          seen.insert(limit);
          out.push_back({{limit}, slots});
        }
        // The limits file's concurrency limits have a series from the start, 0 while nothing is
        // held, so that a graph or a rule sees 0 rather than no data.
        const std::shared_ptr<const LimitSet> defined = registry->Current();
        for (const auto& [name, config] : defined->limits) {
          if (config.kind == LimitKind::kConcurrency && !seen.contains(name)) {
            out.push_back({{name}, 0});
          }
        }
        return out;
      },
      2000, "limit");
  if (const LeaseSweeper* sweeper = lease_sweeper_.get()) {
    metrics_registry_.AddCollector(
        "ratelimit_lease_sweeps_total",
        "Turns of the leak sweep (every --lease_sweep_interval), by result: swept (this server "
        "searched the store), skipped (another replica sharing the store holds the turn), failed "
        "(the store or the replicas' board answered an error; logged).",
        "counter", {"result"},
        [sweeper] {
          return MetricsRegistry::Samples{{{"swept"}, static_cast<double>(sweeper->swept())},
                                          {{"skipped"}, static_cast<double>(sweeper->skipped())},
                                          {{"failed"}, static_cast<double>(sweeper->failed())}};
        },
        3, "result");
  }
}

void RateLimitServer::RegisterOverrideMetrics() {
  const OverrideRegistry* overrides = &overrides_;
  const Clock* clock = clock_;
  metrics_registry_.AddCollector(
      "ratelimit_overrides",
      "Runtime overrides in force on this server (set, not expired, not deleted), by source.",
      "gauge", {"source"}, [overrides, clock] {
        const std::shared_ptr<const OverrideIndex> index = overrides->Current();
        const int64_t now = clock->NowMicros();
        double in_force = 0;
        index->ForEach([&](const Override& o) {
          if (o.target.source == LimitSource::kDefined && o.ActiveAt(now)) ++in_force;
        });
        return MetricsRegistry::Samples{{{"limits_file"}, in_force}};
      });
}

void RateLimitServer::RegisterEnvoyXdsMetrics() {
  const EnvoyXdsClient* xds = envoy_xds_client_.get();
  metrics_registry_.AddCollector(
      "ratelimit_envoy_xds_updates_total",
      "Configurations received from the xDS management server, by outcome: applied (ACKed) or "
      "rejected (NACKed, the previous configuration stays).",
      "counter", {"outcome"}, [xds] {
        const EnvoyXdsClient::Stats st = xds->stats();
        return MetricsRegistry::Samples{{{"applied"}, static_cast<double>(st.applied)},
                                        {{"rejected"}, static_cast<double>(st.rejected)}};
      });
  metrics_registry_.AddCollector(
      "ratelimit_envoy_xds_config_info",
      "1, labelled with the version_info of the xDS configuration in force (empty before the "
      "first).",
      "gauge", {"version"}, [xds] {
        return MetricsRegistry::Samples{{{xds->stats().version}, 1.0}};
      });
  metrics_registry_.AddGauge("ratelimit_envoy_xds_connected",
                             "1 while the stream to the xDS management server is up and has "
                             "received a response, else 0.",
                             [xds] { return xds->stats().connected ? 1.0 : 0.0; });
}

void RateLimitServer::RegisterStoreMetrics() {
  MetricsRegistry& r = metrics_registry_;
  r.AddGauge("ratelimit_up", "1 while the server reports SERVING, else 0.",
             [this] { return health_.state() == ServingState::kServing ? 1.0 : 0.0; });
  for (StateStore::Gauge& g : store_->Gauges()) {
    r.AddGauge(absl::StrCat("ratelimit_", g.name), g.help, std::move(g.read));
  }
  for (StateStore::MetricFamily& f : store_->MetricFamilies()) {
    r.AddCollector(absl::StrCat("ratelimit_", f.name), f.help, f.type, std::move(f.labels),
                   std::move(f.read));
  }
  OtlpExporter* exporter = exporter_.get();
  auto stat = [exporter](uint64_t OtlpExporter::Stats::*field) {
    return [exporter, field] {
      return exporter ? static_cast<double>(exporter->stats().*field) : 0.0;
    };
  };
  r.AddGauge("ratelimit_trace_export_queue_spans", "Spans waiting to be exported.",
             stat(&OtlpExporter::Stats::queued));
  r.AddCounterFn("ratelimit_trace_spans_exported_total", "Spans the collector accepted.",
                 stat(&OtlpExporter::Stats::exported));
  r.AddCounterFn("ratelimit_trace_spans_dropped_total",
                 "Spans dropped: export queue full, or a batch that exhausted its retries.",
                 stat(&OtlpExporter::Stats::dropped));
  r.AddCounterFn("ratelimit_trace_export_failures_total", "Export calls that failed.",
                 stat(&OtlpExporter::Stats::failed_exports));
}

}  // namespace ratelimit
