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
#include "server/envoy/xds/xds_client.h"
#include "server/observability/health.h"
#include "server/observability/http_server.h"
#include "server/observability/metrics.h"
#include "server/observability/otlp_exporter.h"
#include "server/observability/periodic_task.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/observability/tracer.h"
#include "server/options.h"
#include "server/overrides/override_refresher.h"
#include "server/overrides/override_service.h"
#include "server/rlqs/rlqs_admin_service.h"
#include "server/rlqs/rlqs_service.h"
#include "server/serving/decision_scheduler.h"
#include "server/serving/serving_loop.h"
#include "server/serving/store_executor.h"
#include "server/tls/tls.h"
#include "server/v1/lease_stream.h"
#include "server/v1/lease_sweeper.h"
#include "server/v1/limit_registry.h"
#include "server/v1/rate_limit_service.h"
#include "server/v1/receipt.h"
#include "storage/clock.h"
#include "storage/limiter.h"
#include "storage/state_store.h"

namespace ratelimit {

// The composition root: builds the store, limiter, registry, services and the gRPC server,
// owns them, and tears them down in order.
//
// Thread safety: Shutdown() may be called from any thread, once the server is started.
class RateLimitServer {
 public:
  // Starts a server. `clock` is not owned and must outlive the server. `store`, when given,
  // replaces the store OpenStateStore opens from options.store.open (tests inject fakes this
  // way). Fails when the options are invalid (ValidateServerOptions), the store cannot be
  // opened, the limits file is invalid or the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RateLimitServer>> Start(
      const ServerOptions& options, const Clock& clock = SystemClock::Default(),
      std::unique_ptr<StateStore> store = nullptr);

  RateLimitServer(const RateLimitServer&) = delete;
  RateLimitServer& operator=(const RateLimitServer&) = delete;
  ~RateLimitServer();  // calls Shutdown()

  // The port the server listens on.
  int port() const { return port_; }
  // The port of listen.plaintext_address (0 when there is none).
  int plaintext_port() const { return plaintext_port_; }

  // Reports NOT_SERVING, stops accepting calls, lets in-flight ones finish (up to
  // listen.shutdown_grace), stops the reloader and the garbage collection, then flushes and closes
  // the store (an injected one too). Idempotent.
  void Shutdown();

  // Blocks until Shutdown() has completed.
  void Wait();

  // Once Shutdown() has completed: OK, or why the store did not close cleanly (a full disk, say:
  // what it acknowledged is in its write-ahead log, replayed at the next start). The server
  // process exits 1 then.
  absl::Status ShutdownStatus();

  // The store, for tools that inspect it (benchmarks, tests).
  StateStore& store() { return *store_; }

  // The HTTP endpoint's port (0 when there is none).
  int metrics_port() const { return http_ ? http_->port() : 0; }
  const HealthReporter& health() const { return health_; }
  // One pass of the leak sweep, as the server runs it every store.lease_sweep_interval
  // (RateLimitServiceImpl::SweepLeakedLeases): how many leases it counted.
  absl::StatusOr<int64_t> SweepLeakedLeases() { return service_->SweepLeakedLeases(); }
  // The trace exporter, nullptr when tracing is off.
  const OtlpExporter* exporter() const { return exporter_.get(); }

  // The Envoy RLS service (for its statistics); nullptr when the Envoy API is off (neither
  // limits.envoy_config_dir nor limits.envoy_xds).
  const EnvoyRateLimitServiceImpl* envoy_service() const { return envoy_service_.get(); }
  // The xDS client; nullptr unless limits.envoy_xds is enabled.
  const EnvoyXdsClient* envoy_xds_client() const { return envoy_xds_client_.get(); }
  // The RLQS service; nullptr unless rlqs.enabled.
  RlqsService* rlqs_service() const { return rlqs_service_.get(); }

 private:
  explicit RateLimitServer(const ServerOptions& options) : options_(options) {}
  void RegisterStoreMetrics();
  void RegisterEnvoyMetrics();
  void RegisterEnvoyXdsMetrics();
  void RegisterOverrideMetrics();
  // ratelimit_lease_slots_held{limit}, from held_slots_.
  void RegisterLeaseMetrics();

  const ServerOptions options_;
  const Clock* clock_ = nullptr;  // Start's, not owned
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
  // The runtime overrides decisions apply, kept at the store's version by the refresher (null,
  // and the override service refuses, when the store keeps none).
  OverrideRegistry overrides_;
  std::unique_ptr<OverrideRefresher> override_refresher_;
  std::unique_ptr<OverrideServiceImpl> override_service_;
  std::unique_ptr<HeldSlots> held_slots_;  // before service_, which reports into it
  std::unique_ptr<RateLimitServiceImpl> service_;
  EnvoyConfigRegistry envoy_registry_;
  std::unique_ptr<EnvoyConfigWatcher> envoy_watcher_;
  std::unique_ptr<EnvoyXdsClient> envoy_xds_client_;  // null unless limits.envoy_xds is enabled
  std::unique_ptr<EnvoyRateLimitServiceImpl> envoy_service_;  // null when the API is off
  std::unique_ptr<RlqsService> rlqs_service_;                 // null unless rlqs.enabled
  std::unique_ptr<PeriodicTask> rlqs_ticker_;                 // its divisions
  std::unique_ptr<RlqsAdminServiceImpl> rlqs_admin_service_;  // FAILED_PRECONDITION without it
  // The leak sweep on service_, and its turns (both null when store.lease_sweep_interval is
  // zero).
  std::unique_ptr<LeaseSweeper> lease_sweeper_;
  std::unique_ptr<PeriodicTask> lease_sweep_task_;
  // Declared before the gRPC server: its queues are shut down after the server's, and destroyed
  // after it.
  std::unique_ptr<ServingLoop> serving_loop_;
  std::unique_ptr<LoopHealthService> health_service_;
  std::unique_ptr<LeaseStreams> lease_streams_;  // RateLimitService/LeaseStream
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int plaintext_port_ = 0;
  bool started_ = false;  // Start() succeeded; set before it returns, never changed after

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVER_H_
