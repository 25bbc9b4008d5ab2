#ifndef RATELIMIT_SERVER_OPTIONS_H_
#define RATELIMIT_SERVER_OPTIONS_H_

// Everything the server is configured with, one struct per concern: where it listens (and its
// TLS), its store (one nested struct per backend, the factory's own StoreOptions), its limits,
// its receipts, its observability and its administration. Plain values; the flags are mapped to
// them in one file (server/flags.cc) and ValidateServerOptions checks them all, once, in one
// place, before anything starts.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/envoy/xds/xds_options.h"
#include "server/observability/otlp_encoder.h"
#include "server/observability/otlp_exporter.h"
#include "server/tls/tls.h"
#include "server/v1/convert.h"
#include "server/v1/rate_limit_service.h"
#include "storage/factory/state_store_factory.h"
#include "storage/worker_thread.h"

namespace ratelimit {

// Where and how gRPC is served.
struct ListenOptions {
  // host:port; port 0 picks a free port (RateLimitServer::port()). TLS when `tls` is enabled;
  // plaintext otherwise, refused on an address that is not loopback unless allow_insecure.
  std::string address = "127.0.0.1:8081";
  // TLS (and mTLS) on `address`; see ServerTlsOptions. Default: off.
  ServerTlsOptions tls;
  // A second, plaintext listener with the same services (a sidecar or probes on the same host
  // while `address` is TLS); port 0 picks a free port. Empty: none. Loopback unless
  // allow_insecure.
  std::string plaintext_address;
  // Permits plaintext gRPC on addresses other than loopback. Default false.
  bool allow_insecure = false;
  // Threads serving every gRPC method (serving_loop.h); 0: one per CPU the process may run on.
  int serving_threads = 0;
  // The scheduling of the serving threads and of the store's I/O thread (worker_thread.h).
  WorkerScheduling scheduling = WorkerScheduling::kDefault;
  // Limits per gRPC connection, so that one client cannot take the server's memory: calls in
  // flight per HTTP/2 connection (SETTINGS), the memory gRPC may use for its buffers, the idle
  // time after which a connection is closed (InfiniteDuration(): never), and keepalive
  // enforcement (a client pinging faster gets a strike; too many: GOAWAY "too_many_pings").
  int max_concurrent_streams = 100;
  int64_t grpc_memory_limit_bytes = int64_t{1} << 30;
  absl::Duration max_connection_idle = absl::Minutes(5);
  absl::Duration keepalive_min_ping_interval = absl::Seconds(10);
  int keepalive_max_ping_strikes = 2;
  // How long Shutdown() lets in-flight calls finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(5);
};

// The state store and how decisions use it.
struct ServerStoreOptions {
  // What OpenStateStore opens (the backend and its nested options). Ignored when a store is
  // injected (RateLimitServer::Start).
  StoreOptions open = [] {
    StoreOptions o;
    o.rocksdb.path = "./data";
    return o;
  }();
  // Threads synchronous store work runs on (store_executor.h), so that a store waiting for the
  // network does not park the serving threads: 0 runs it on the serving threads; negative
  // (default) picks 0 for a store that decides batches locally and 64 for one that waits for a
  // peer (Redis).
  int threads = -1;
  // How often refilled states are collected (a flush and compaction) even when no writes
  // trigger it. Zero or negative: never.
  absl::Duration gc_interval = absl::Hours(1);
  // How often the leak sweep looks for leases that expired unreleased on keys no call decides
  // again, to count them (docs/leases.md, the leak detector): at most kMaxLeaseSweepInterval,
  // since a store keeps such a lease only a minute past its expiry. Zero: never (a leak is then
  // counted only by a decision on its key within that minute).
  absl::Duration lease_sweep_interval = absl::Seconds(10);
  static constexpr absl::Duration kMaxLeaseSweepInterval = absl::Seconds(30);
  // What a decision answers when the store fails.
  FailurePolicy failure_policy = FailurePolicy::kClosed;
  // How often the store is probed for the health status.
  absl::Duration health_probe_interval = absl::Seconds(1);
};

// The limits' configuration: the limits file, inline limits, and the Envoy API's directory.
struct LimitsOptions {
  // The limits YAML file; empty: only inline configs.
  std::string file;
  // How often the configuration files (limits, Envoy, receipt keys) are checked for changes.
  absl::Duration reload_interval = absl::Seconds(1);
  // Whether ratelimit.v1 requests may define limits inline (default: allow).
  InlineLimits inline_limits = InlineLimits::kAllow;
  // Envoy RLS v3 API (same port): a directory of envoyproxy/ratelimit YAML files, one domain per
  // file. Empty, and envoy_xds not enabled: the Envoy API is not served (calls get
  // UNIMPLEMENTED).
  std::string envoy_config_dir;
  // Envoy API, the reference's settings: NEAR_LIMIT_RATIO (in (0, 1]), RESPONSE_DYNAMIC_METADATA,
  // and the header names LIMIT_LIMIT_HEADER / LIMIT_REMAINING_HEADER / LIMIT_RESET_HEADER (HTTP
  // header names).
  double envoy_near_limit_ratio = 0.8;
  bool envoy_response_dynamic_metadata = false;
  std::string envoy_ratelimit_limit_header = "RateLimit-Limit";
  std::string envoy_ratelimit_remaining_header = "RateLimit-Remaining";
  std::string envoy_ratelimit_reset_header = "RateLimit-Reset";
  // Envoy API: add RateLimit-Limit / -Remaining / -Reset to response_headers_to_add.
  bool envoy_ratelimit_headers = false;
  // Envoy API: no request is denied (an OVER_LIMIT overall code is answered OK).
  bool envoy_shadow_mode = false;
  // Envoy API: every descriptor is a quota descriptor (quota_mode on every rule).
  bool envoy_quota_mode = false;
  // Envoy RLS v3 API configured by an xDS management server instead of envoy_config_dir (one or
  // the other). Default: off.
  EnvoyXdsOptions envoy_xds;
  // Called on the watcher's thread after each reload attempt of a changed configuration
  // ("limits", "envoy" or "receipt_keys"; "envoy" also for each xDS response, on the xDS
  // client's thread) with its outcome (OK, or why the previous
  // configuration stays), once the outcome is counted. May be empty (default).
  std::function<void(absl::string_view config, const absl::Status& outcome)> on_config_reload;
};

// Receipts (Settle) and remembered answers (request_id).
struct ReceiptOptions {
  // A file of keys (first line the current key, further lines previous keys still accepted; hex
  // or base64, >= 32 bytes each), reloaded when it changes. Empty: a key generated once and kept
  // in the store, so receipts survive restarts.
  std::string key_file;
  // A receipt older than this is refused by Settle; spent receipts are remembered this long.
  absl::Duration ttl = absl::Hours(1);
  // How long the answer to a Consume or Reserve carrying a request_id is remembered.
  absl::Duration request_id_ttl = absl::Minutes(10);
};

// Metrics, health endpoint and traces.
struct ObservabilityOptions {
  // host:port of the HTTP endpoint serving /metrics and /healthz; port 0 picks a free port.
  // Empty: no HTTP endpoint.
  std::string metrics_listen;
  // HTTPS for that endpoint: PEM certificate chain and key, both or neither.
  std::string metrics_tls_cert_file;
  std::string metrics_tls_key_file;
  // Called with the HTTP endpoint's port as soon as it listens, before the store is opened.
  std::function<void(int)> on_metrics_listening;
  // OTLP/gRPC collector for traces: "https://host:port" is TLS (verified against otel_ca_file,
  // else the system roots), "http://host:port" or "host:port" plaintext. Empty: tracing off.
  std::string otel_endpoint;
  // PEM CA bundle that verifies an https:// collector. REQUIRES, when set: an https:// endpoint.
  std::string otel_ca_file;
  // Probability of sampling a trace the caller did not start (callers' sampled flag wins).
  double otel_sample_ratio = 1.0;
  // Resource attributes of the spans; service.name defaults to "ratelimit".
  Resource otel_resource;
  // Record limit keys as span attributes (keys can be personal data).
  bool trace_keys = false;
  // Exporter tuning (defaults in OtlpExporterOptions).
  OtlpExporterOptions otel_exporter;
};

// Who may call the admin RPCs (Reset): a bearer token or a client certificate's identity.
struct AdminOptions {
  // Empty disables Reset by token.
  std::string token;
  // URI/DNS SANs of client certificates allowed (SPIFFE IDs are URI SANs). REQUIRES, when not
  // empty: listen.tls.client_ca_file (identities come only from verified client certificates).
  std::vector<std::string> identities;
};

// Envoy's Rate Limit Quota Service (server/rlqs, docs/envoy.md), on the same port as the others,
// with the `quota_buckets` of the Envoy configuration's domains.
struct RlqsServerOptions {
  bool enabled = false;  // --rlqs; needs limits.envoy_config_dir or limits.envoy_xds
  // How often every bucket is divided again. Default 1 s; > 0, at most 1 h.
  absl::Duration reallocation_interval = absl::Seconds(1);
  // The clients' reporting interval assumed until their reports show it. Default 5 s; 1 s .. 5 min.
  absl::Duration reporting_interval = absl::Seconds(5);
  // A subscription without a report for this long is abandoned. Default 5 min; 1 s .. 24 h.
  absl::Duration idle_abandon = absl::Minutes(5);
  // The most buckets one stream may report. Default 10000; >= 1.
  int max_buckets_per_stream = 10000;
  // The most streams one client connection may hold at once. Default 16; >= 1.
  int max_streams_per_connection = 16;
  // The largest message a stream may send: a periodic report carries every bucket of the stream.
  // Default 4 MiB; 64 KiB .. 64 MiB. Every other call keeps the 64 KiB of kMaxRequestBytes.
  int max_message_bytes = 4 << 20;
};

struct ServerOptions {
  ListenOptions listen;
  ServerStoreOptions store;
  LimitsOptions limits;
  ReceiptOptions receipts;
  ObservabilityOptions observability;
  AdminOptions admin;
  RlqsServerOptions rlqs;
};

// Every rule the options must keep, checked once: OK, or INVALID_ARGUMENT naming the flag that
// sets the offending field (--serving_threads, --redis_hold_ttl, ...) and why. Files are not read
// here (their checks belong to what loads them).
absl::Status ValidateServerOptions(const ServerOptions& options);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OPTIONS_H_
