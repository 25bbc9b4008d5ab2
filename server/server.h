#ifndef RATELIMIT_SERVER_SERVER_H_
#define RATELIMIT_SERVER_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/admin/admin_auth.h"
#include "server/admin/health_service.h"
#include "server/config/watched_config.h"
#include "server/envoy/envoy_service.h"
#include "server/observability/health.h"
#include "server/observability/http_server.h"
#include "server/observability/metrics.h"
#include "server/observability/otlp_exporter.h"
#include "server/observability/periodic_task.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/observability/tracer.h"
#include "server/serving/decision_scheduler.h"
#include "server/serving/serving_loop.h"
#include "server/serving/store_executor.h"
#include "server/tls/tls.h"
#include "server/v1/limit_registry.h"
#include "server/v1/rate_limit_service.h"
#include "server/v1/receipt.h"
#include "storage/clock.h"
#include "storage/limiter.h"
#include "storage/state_store.h"

namespace ratelimit {

// Everything the composition root is configured with. A plain value: RateLimitServer keeps its
// own copy (callbacks included), read-only once started.
struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see RateLimitServer::port()). Served with
  // TLS when `tls` is enabled; plaintext otherwise, which Start refuses on an address that is not
  // loopback (IsLoopbackAddress) unless allow_insecure_listen is set.
  std::string listen_address = "127.0.0.1:8081";
  // TLS (and mTLS) on listen_address; see ServerTlsOptions. Default: off.
  ServerTlsOptions tls;
  // A second, plaintext listener with the same services (for a sidecar or probes on the same
  // host while listen_address is TLS); port 0 picks a free port (see plaintext_port()). Empty:
  // none. Loopback only unless allow_insecure_listen.
  std::string plaintext_listen;
  // Permits plaintext gRPC on addresses other than loopback (listen_address without TLS, or
  // plaintext_listen). Default false: such a configuration fails Start.
  bool allow_insecure_listen = false;
  // RocksDB data directory (ignored when a store is injected).
  std::string data_dir = "./data";
  // The state store: "rocksdb" (default, in data_dir) or "redis" (the redis_* fields; see
  // StoreOptions). Ignored when a store is injected.
  std::string store = "rocksdb";
  // Threads the RPC handlers run their store transactions on (server/store_executor.h), so that
  // a store waiting for the network does not park the serving threads: 0 runs them on the
  // serving threads; negative (default) picks 0 for the embedded stores and 64 for "redis".
  int store_threads = -1;
  // Threads serving every gRPC method (serving_loop.h), each deciding the Consume, Check and
  // Reserve calls of a burst together; 0: one per CPU the process may run on.
  int serving_threads = 0;
  // The scheduling of the serving threads and of the Redis client's I/O thread
  // (storage/worker_thread.h). Default: the process's policy (the binary's --batch_scheduling
  // picks kBatch).
  WorkerScheduling worker_scheduling = WorkerScheduling::kDefault;
  std::string redis_address;
  std::string redis_password_file;
  absl::Duration redis_timeout = absl::Seconds(1);
  std::string redis_key_prefix = "ratelimit:";
  // Replicas that must acknowledge each pipelined write (Redis WAIT); 0: no WAIT.
  int redis_wait_replicas = 0;
  // How long a take of a request spanning slots is remembered (--redis_hold_ttl).
  absl::Duration redis_hold_ttl = absl::Seconds(10);
  // The limits YAML file; empty: only inline configs.
  std::string limits_file;
  // How often the limits file is checked for changes.
  absl::Duration limits_reload_interval = absl::Seconds(1);
  // Called on the watcher's thread after each reload attempt of a changed configuration, with
  // the configuration ("limits" or "envoy") and the outcome (OK, or why the previous
  // configuration stays), once the outcome is counted in the metrics. May be empty (default).
  std::function<void(absl::string_view config, const absl::Status& outcome)> on_config_reload;
  // Bearer token for Reset; empty disables Reset by token.
  std::string admin_token;
  // URI/DNS SANs of client certificates allowed to call Reset (SPIFFE IDs are URI SANs); either
  // a listed identity or the token suffices (see AdminAuthenticator). REQUIRES, when not empty:
  // tls.client_ca_file (identities come only from verified client certificates).
  std::vector<std::string> admin_identities;
  FailurePolicy failure_policy = FailurePolicy::kClosed;
  // Whether ratelimit.v1 requests may define limits inline (default: allow).
  InlineLimits inline_limits = InlineLimits::kAllow;
  // fsync the WAL on every write group (power-loss durability).
  bool sync = false;
  // Memory bound of the RocksDB store's cache of hot states, in bytes; 0: only decisions waiting
  // for the WAL are kept. Default 256 MiB.
  size_t state_cache_bytes = size_t{256} << 20;
  // Open a data directory whose WAL does not replay cleanly, dropping the writes after the
  // corruption point (default: refuse to start).
  bool salvage_wal = false;
  // Write the WAL through a shared memory mapping instead of a write(2) per write group (equally
  // durable; see storage/mapped_wal_file_system.h). Default true.
  bool map_wal = true;
  // How often refilled states are collected (a flush and compaction of the store) even when
  // no writes trigger it. Zero or negative: never.
  absl::Duration gc_interval = absl::Hours(1);
  // How long Shutdown() lets in-flight calls finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(5);

  // Limits per gRPC connection, so that one client cannot take the server's memory:
  // At most this many calls in flight per HTTP/2 connection (advertised in SETTINGS; further
  // streams wait in the client).
  int max_concurrent_streams = 100;
  // The memory gRPC may use for its buffers (a grpc::ResourceQuota); under pressure it stops
  // reading from connections and drops idle ones.
  int64_t grpc_memory_limit_bytes = int64_t{1} << 30;
  // A connection without calls for this long is closed (GOAWAY); InfiniteDuration(): never.
  absl::Duration max_connection_idle = absl::Minutes(5);
  // Keepalive enforcement: a client pinging more often than this (without data) gets a strike,
  // and is disconnected (GOAWAY "too_many_pings") after keepalive_max_ping_strikes of them.
  absl::Duration keepalive_min_ping_interval = absl::Seconds(10);
  int keepalive_max_ping_strikes = 2;

  // host:port of the HTTP endpoint serving /metrics and /healthz; port 0 picks a free port
  // (see metrics_port()). Empty: no HTTP endpoint.
  std::string metrics_listen;
  // HTTPS for the metrics endpoint: PEM certificate chain and key, both or neither (neither:
  // plain HTTP). Re-read on the first connection after either file changes.
  std::string metrics_tls_cert_file;
  std::string metrics_tls_key_file;
  // Called with the HTTP endpoint's port as soon as it listens, before the store is opened (so
  // that /healthz can be watched during start-up). May be empty.
  std::function<void(int)> on_metrics_listening;
  // How often the store is probed for the health status.
  absl::Duration health_probe_interval = absl::Seconds(1);

  // OTLP/gRPC collector for traces: "https://host:port" is TLS (verified against otel_ca_file,
  // else the system roots), "http://host:port" or "host:port" plaintext. Empty: tracing is off
  // and costs nothing.
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

  // Receipts: a file of keys (first line the current key, further lines previous keys still
  // accepted; hex or base64, >= 32 bytes each), reloaded when it changes (checked every
  // limits_reload_interval). Empty: a key generated once and kept in the store (RocksDB: its
  // meta column family), so receipts survive restarts.
  std::string receipt_key_file;
  // A receipt older than this is refused by Settle; spent receipts are remembered this long.
  absl::Duration receipt_ttl = absl::Hours(1);
  // How long the answer to a Consume or Reserve carrying a request_id is remembered.
  absl::Duration request_id_ttl = absl::Minutes(10);

  // Envoy RLS v3 API (envoy.service.ratelimit.v3.RateLimitService, same port): a directory of
  // envoyproxy/ratelimit YAML files, one domain per file, checked for changes every
  // limits_reload_interval. Empty: the Envoy API is not served (calls get UNIMPLEMENTED).
  std::string envoy_config_dir;
  // Envoy API: add RateLimit-Limit / -Remaining / -Reset to response_headers_to_add.
  bool envoy_ratelimit_headers = false;
};

// The composition root: builds the store, limiter, registry, services and the gRPC server,
// owns them, and tears them down in order.
//
// Thread safety: Shutdown() may be called from any thread, once the server is started.
class RateLimitServer {
 public:
  // Starts a server. `clock` is not owned and must outlive the server. `store`, when given,
  // replaces the store OpenStateStore opens at options.data_dir (tests inject fakes this way).
  // Fails when the store cannot be opened, the limits file is invalid or the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<RateLimitServer>> Start(
      const ServerOptions& options, const Clock& clock = SystemClock::Default(),
      std::unique_ptr<StateStore> store = nullptr);

  RateLimitServer(const RateLimitServer&) = delete;
  RateLimitServer& operator=(const RateLimitServer&) = delete;
  ~RateLimitServer();  // calls Shutdown()

  // The port the server listens on.
  int port() const { return port_; }
  // The port of plaintext_listen (0 when there is none).
  int plaintext_port() const { return plaintext_port_; }

  // Reports NOT_SERVING, stops accepting calls, lets in-flight ones finish (up to
  // shutdown_grace), stops the reloader and the garbage collection, then flushes and closes
  // the store (an injected one too). Idempotent.
  void Shutdown();

  // Blocks until Shutdown() has completed.
  void Wait();

  // The store, for tools that inspect it (benchmarks, tests).
  StateStore& store() { return *store_; }

  // The HTTP endpoint's port (0 when there is none).
  int metrics_port() const { return http_ ? http_->port() : 0; }
  const HealthReporter& health() const { return health_; }
  // The trace exporter, nullptr when tracing is off.
  const OtlpExporter* exporter() const { return exporter_.get(); }

  // The Envoy RLS service (for its statistics); nullptr when envoy_config_dir is empty.
  const EnvoyRateLimitServiceImpl* envoy_service() const { return envoy_service_.get(); }

 private:
  explicit RateLimitServer(const ServerOptions& options) : options_(options) {}
  void RegisterStoreMetrics();
  void RegisterEnvoyMetrics();

  const ServerOptions options_;
  // Observability comes first so that it outlives everything that reports to it.
  HealthReporter health_;
  MetricsRegistry metrics_registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<OtlpExporter> exporter_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<Telemetry> telemetry_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<StoreProbe> probe_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<PeriodicTask> gc_;  // null when gc_interval is not positive
  // Writes the summaries of repeated log events (repeated_log.h) once their interval passed.
  std::unique_ptr<PeriodicTask> log_flusher_;
  std::unique_ptr<Limiter> limiter_;
  // After the limiter and store (its tasks use them), before the services and the gRPC server
  // (it outlives the calls they run on it).
  std::unique_ptr<StoreExecutor> executor_;
  std::unique_ptr<DecisionScheduler> scheduler_;  // schedules every decision of the services below
  LimitRegistry registry_;
  std::unique_ptr<LimitsFileWatcher> watcher_;
  ConfigSnapshot<ReceiptKeys> receipt_keys_;
  std::unique_ptr<WatchedConfig<ReceiptKeys, std::string>> receipt_watcher_;
  std::unique_ptr<AdminAuthenticator> admin_;
  std::unique_ptr<RateLimitServiceImpl> service_;
  EnvoyConfigRegistry envoy_registry_;
  std::unique_ptr<EnvoyConfigWatcher> envoy_watcher_;
  std::unique_ptr<EnvoyRateLimitServiceImpl> envoy_service_;  // null when the API is off
  // Declared before the gRPC server: its queues are shut down after the server's, and destroyed
  // after it.
  std::unique_ptr<ServingLoop> serving_loop_;
  std::unique_ptr<LoopHealthService> health_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int plaintext_port_ = 0;
  bool started_ = false;  // Start() succeeded; set before it returns, never changed after

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVER_H_
