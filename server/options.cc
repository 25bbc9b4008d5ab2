#include "server/options.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/envoy/envoy_convert.h"
#include "server/rlqs/rlqs_buckets.h"
#include "storage/limit_config.h"

namespace ratelimit {

namespace {

constexpr absl::Duration kYear = absl::Hours(24 * 366);

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
}

// An address's port, when it names one past 65535 (which the socket layer would take modulo
// 65536, listening elsewhere than the logs say): an error naming `flag`.
absl::Status ValidatePort(absl::string_view flag, absl::string_view address) {
  if (address.empty() || absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  const size_t close = address.rfind(']');
  if (colon == absl::string_view::npos || (close != absl::string_view::npos && colon < close)) {
    return absl::OkStatus();
  }
  const absl::string_view port = address.substr(colon + 1);
  uint64_t n = 0;
  if (!port.empty() && absl::SimpleAtoi(port, &n) && n > 65535) {
    return Invalid(flag, absl::StrCat(address, ": port ", port, " is not in 0..65535"));
  }
  return absl::OkStatus();
}

// A duration flag that must be positive (`zero_ok`: or zero), naming it when it is not.
absl::Status ValidateInterval(absl::string_view flag, absl::Duration d, bool zero_ok) {
  if (d > absl::ZeroDuration() || (zero_ok && d == absl::ZeroDuration())) return absl::OkStatus();
  return Invalid(flag, absl::StrCat(zero_ok ? "must not be negative" : "must be positive", "; got ",
                                    absl::FormatDuration(d)));
}

absl::Status ValidateListen(const ListenOptions& o, const AdminOptions& admin) {
  if (absl::Status s = ValidatePort("--listen", o.address); !s.ok()) return s;
  if (absl::Status s = ValidatePort("--plaintext_listen", o.plaintext_address); !s.ok()) return s;
  if (absl::Status s = ValidateInterval("--shutdown_grace", o.shutdown_grace, /*zero_ok=*/true);
      !s.ok()) {
    return s;
  }
  if (o.serving_threads < 0 || o.serving_threads > 256) {
    return Invalid("--serving_threads", "must be 0 (one per CPU) to 256");
  }
  if (!o.allow_insecure && !o.plaintext_address.empty() &&
      !IsLoopbackAddress(o.plaintext_address)) {
    return Invalid("--plaintext_listen",
                   absl::StrCat(o.plaintext_address,
                                " is not a loopback address; plaintext gRPC elsewhere needs "
                                "--allow_insecure_listen"));
  }
  if (!admin.identities.empty() && o.tls.client_ca_file.empty()) {
    return Invalid("--admin_identities",
                   "requires --tls_client_ca_file (identities come from verified client "
                   "certificates)");
  }
  if (!o.tls.enabled() && !o.allow_insecure && !IsLoopbackAddress(o.address)) {
    return Invalid("--listen", absl::StrCat(o.address,
                                            ": plaintext gRPC on an address that is not "
                                            "loopback; configure --tls_cert_file and "
                                            "--tls_key_file, or pass --allow_insecure_listen"));
  }
  if (o.max_concurrent_streams < 1) return Invalid("--max_concurrent_streams", "must be >= 1");
  if (o.grpc_memory_limit_bytes < (int64_t{1} << 20) ||
      o.grpc_memory_limit_bytes > (int64_t{1} << 60)) {
    return Invalid("--grpc_memory_limit_mb", "must be between 1 and 2^40");
  }
  if (o.max_connection_idle <= absl::ZeroDuration()) {
    return Invalid("--max_connection_idle", "must be positive (inf: never)");
  }
  if (o.keepalive_min_ping_interval < absl::ZeroDuration()) {
    return Invalid("--keepalive_min_ping_interval", "must not be negative");
  }
  if (o.keepalive_max_ping_strikes < 0) {
    return Invalid("--keepalive_max_ping_strikes", "must not be negative");
  }
  return absl::OkStatus();
}

absl::Status ValidateStore(const ServerStoreOptions& o) {
  if (absl::Status s = ValidateInterval("--gc_interval", o.gc_interval, /*zero_ok=*/true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateInterval("--health_probe_interval", o.health_probe_interval,
                                        /*zero_ok=*/false);
      !s.ok()) {
    return s;
  }
  if (o.threads < -1 || o.threads > 4096) {
    return Invalid("--store_threads", "must be -1 (automatic) or 0 to 4096");
  }
  if (o.lease_sweep_interval < absl::ZeroDuration() ||
      o.lease_sweep_interval > ServerStoreOptions::kMaxLeaseSweepInterval) {
    return Invalid("--lease_sweep_interval",
                   absl::StrCat("must be 0 (no sweep) up to ",
                                absl::FormatDuration(ServerStoreOptions::kMaxLeaseSweepInterval),
                                " (a store keeps an expired lease a minute); got ",
                                absl::FormatDuration(o.lease_sweep_interval)));
  }
  return ValidateStoreOptions(o.open);  // the backends' rules, kept by the factory
}

absl::Status ValidateReceipts(const ReceiptOptions& o) {
  if (o.ttl <= absl::ZeroDuration() || o.ttl > kYear) {
    return Invalid("--receipt_ttl", "must be positive and at most a year");
  }
  if (o.request_id_ttl <= absl::ZeroDuration() || o.request_id_ttl > kYear) {
    return Invalid("--request_id_ttl", "must be positive and at most a year");
  }
  return absl::OkStatus();
}

absl::Status ValidateObservability(const ObservabilityOptions& o) {
  if (!o.metrics_listen.empty()) {
    const size_t colon = o.metrics_listen.rfind(':');
    int port = 0;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(o.metrics_listen.substr(colon + 1), &port)) {
      return Invalid("--metrics_listen",
                     absl::StrCat("expected host:port, got ", o.metrics_listen));
    }
    if (absl::Status s = ValidatePort("--metrics_listen", o.metrics_listen); !s.ok()) return s;
  }
  if (!(o.otel_sample_ratio >= 0 && o.otel_sample_ratio <= 1)) {
    return Invalid("--otel_sample_ratio", "must be in [0, 1]");
  }
  if (!o.otel_ca_file.empty() && !absl::StartsWith(o.otel_endpoint, "https://")) {
    return Invalid("--otel_ca_file",
                   absl::StrCat("set, but the collector endpoint \"", o.otel_endpoint,
                                "\" is not https:// (traces would travel in clear)"));
  }
  return absl::OkStatus();
}

// The Envoy API's settings from the reference (--envoy_near_limit_ratio, header names).
absl::Status ValidateEnvoyReference(const LimitsOptions& o) {
  if (!(o.envoy_near_limit_ratio > 0 && o.envoy_near_limit_ratio <= 1)) {
    return Invalid("--envoy_near_limit_ratio", "must be in (0, 1]");
  }
  for (const auto& [flag, name] :
       {std::pair<absl::string_view, const std::string*>{"--envoy_ratelimit_limit_header",
                                                         &o.envoy_ratelimit_limit_header},
        {"--envoy_ratelimit_remaining_header", &o.envoy_ratelimit_remaining_header},
        {"--envoy_ratelimit_reset_header", &o.envoy_ratelimit_reset_header}}) {
    if (!IsHttpHeaderName(*name)) {
      return Invalid(flag, absl::StrCat("\"", *name,
                                        "\" is not an HTTP header name (letters, digits and "
                                        "!#$%&'*+-.^_`|~, at least one)"));
    }
  }
  return absl::OkStatus();
}

// The Envoy configuration's source: a directory or a management server, not both.
absl::Status ValidateEnvoyXds(const LimitsOptions& o) {
  if (o.envoy_xds.enabled() && !o.envoy_config_dir.empty()) {
    return Invalid("--envoy_xds_server",
                   "set together with --envoy_config_dir: the Envoy configuration comes from one "
                   "or the other");
  }
  return ValidateEnvoyXdsOptions(o.envoy_xds);
}

// The RLQS service's settings (--rlqs_*).
absl::Status ValidateRlqs(const RlqsServerOptions& o, const LimitsOptions& limits) {
  if (!o.enabled) return absl::OkStatus();
  if (limits.envoy_config_dir.empty() && !limits.envoy_xds.enabled()) {
    return Invalid("--rlqs",
                   "needs the Envoy configuration (--envoy_config_dir or "
                   "--envoy_xds_server): its domains hold the quota_buckets");
  }
  // Upper bounds against a typo: an assignment lives three of the longer interval, and a report
  // counts as covering at most kMaxRlqsReportingIntervalSeconds.
  if (o.reallocation_interval <= absl::ZeroDuration() || o.reallocation_interval > absl::Hours(1)) {
    return Invalid("--rlqs_reallocation_interval", "must be positive and at most 1h");
  }
  if (o.reporting_interval < absl::Seconds(1) ||
      o.reporting_interval > absl::Seconds(kMaxRlqsReportingIntervalSeconds)) {
    return Invalid("--rlqs_reporting_interval", "must be 1s .. 5m");
  }
  if (o.idle_abandon < absl::Seconds(1) || o.idle_abandon > absl::Hours(24)) {
    return Invalid("--rlqs_idle_abandon", "must be 1s .. 24h");
  }
  if (o.max_buckets_per_stream < 1) {
    return Invalid("--rlqs_max_buckets_per_stream", "must be at least 1");
  }
  if (o.max_streams_per_connection < 1) {
    return Invalid("--rlqs_max_streams_per_connection", "must be at least 1");
  }
  if (o.max_message_bytes < static_cast<int>(kMaxRequestBytes) ||
      o.max_message_bytes > (64 << 20)) {
    return Invalid("--rlqs_max_message_bytes", "must be 65536 (64 KiB) .. 67108864 (64 MiB)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateServerOptions(const ServerOptions& options) {
  if (absl::Status s = ValidateInterval("--limits_reload_interval", options.limits.reload_interval,
                                        /*zero_ok=*/false);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateListen(options.listen, options.admin); !s.ok()) return s;
  if (absl::Status s = ValidateStore(options.store); !s.ok()) return s;
  if (absl::Status s = ValidateReceipts(options.receipts); !s.ok()) return s;
  if (absl::Status s = ValidateEnvoyReference(options.limits); !s.ok()) return s;
  if (absl::Status s = ValidateEnvoyXds(options.limits); !s.ok()) return s;
  if (absl::Status s = ValidateRlqs(options.rlqs, options.limits); !s.ok()) return s;
  return ValidateObservability(options.observability);
}

}  // namespace ratelimit
