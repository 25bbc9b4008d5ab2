#include "server/server.h"

#include <sched.h>

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_plan.h"
#include "server/observability/log.h"
#include "server/serving/listen_check.h"
#include "server/tls/tls_files.h"
#include "storage/factory/state_store_factory.h"
#include "storage/file_util.h"
#include "storage/limit_config.h"
#include "storage/replica_board.h"

namespace ratelimit {
namespace {
constexpr char kServiceName[] = "ratelimit.v1.RateLimitService";
constexpr char kEnvoyServiceName[] = "envoy.service.ratelimit.v3.RateLimitService";
constexpr char kRlqsServiceName[] = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";
// How often a server reads the store's override version (docs/overrides.md: a replica applies a
// change within about this long).
constexpr absl::Duration kOverrideRefreshInterval = absl::Milliseconds(250);

// A reload observer counting the outcomes of `config` ("limits", "envoy") in the metrics, then
// reporting them to `hook` (ServerOptions::on_config_reload) when it is set.
std::function<void(const absl::Status&)> CountReloads(
    ServerMetrics& metrics, const char* config,
    const std::function<void(absl::string_view, const absl::Status&)>& hook) {
  return [&metrics, config, hook](const absl::Status& st) {
    metrics.config_reloads.With({config, st.ok() ? "ok" : "failed"}).Increment();
    if (hook) hook(config, st);
  };
}

// The receipt key file: read whole, parsed by ReceiptKeys::Parse; a file that stops parsing or
// goes missing keeps the keys in force.
WatchedConfigSpec<ReceiptKeys, std::string> ReceiptKeyFileSpec(const std::string& path) {
  WatchedConfigSpec<ReceiptKeys, std::string> spec;
  spec.source_field = "file";
  spec.source_name = path;
  spec.read = [path]() -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> bytes = ReadFileToString(path);
    if (!bytes.ok()) {
      return absl::Status(bytes.status().code(),
                          absl::StrCat("receipt key file ", path, ": ", bytes.status().message()));
    }
    return bytes;
  };
  spec.parse = [](const std::string& bytes) { return ReceiptKeys::Parse(bytes); };
  spec.on_loaded = [path](const ReceiptKeys& keys, const std::string&) {
    Log(LogLevel::kInfo, "receipt keys loaded",
        {{"file", path}, {"keys", std::to_string(keys.size())}});
  };
  spec.reload_failed_message = "receipt key reload failed; keeping the previous keys";
  spec.missing_message = "receipt key file missing; keeping the previous keys";
  return spec;
}

// Milliseconds for a gRPC channel argument; InfiniteDuration() (or more than INT_MAX ms): INT_MAX,
// which gRPC reads as "never".
int ChannelArgMillis(absl::Duration d) {
  if (d >= absl::Milliseconds(std::numeric_limits<int>::max())) {
    return std::numeric_limits<int>::max();
  }
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

// Calls requested ahead on each serving thread's queue (ServingLoop::AddUnary): of each method
// callers send at volume, and of each administrative one. Few, since Debian's libgrpc looks each
// completed tag up among all those outstanding on its queue (32 of each: 1.2% of the server's CPU;
// 4: 0.35%, and Consume and lease calls 1.9% and 2.6% faster; docs/performance-log.md).
constexpr int kHotCallsReady = 4;
constexpr int kColdCallsReady = 2;

// The CPUs this process may run on (its affinity), at least 1.
int CpusAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// The per-connection limits of `options` and an exclusive port.
void ConfigureTransport(const ListenOptions& options, grpc::ServerBuilder& builder) {
  // gRPC sets SO_REUSEPORT by default: a second instance could then bind the same port and the
  // kernel would split the traffic (and the limits) between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             ChannelArgMillis(options.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             ChannelArgMillis(options.keepalive_min_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, options.keepalive_max_ping_strikes);
  // Pings on a connection without calls are fine at the enforced rate (the idle timeout still
  // closes such a connection).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  grpc::ResourceQuota quota("ratelimit");
  quota.Resize(static_cast<size_t>(options.grpc_memory_limit_bytes));
  builder.SetResourceQuota(quota);
}
// The credentials of the main gRPC listener: TLS when configured (its files checked here),
// plaintext otherwise (ValidateServerOptions allowed it).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const ListenOptions& options) {
  if (options.tls.enabled()) return MakeServerTlsCredentials(options.tls);
  return grpc::InsecureServerCredentials();
}

// The exporter options for options.otel_endpoint, with the collector's CA when it is TLS.
absl::StatusOr<OtlpExporterOptions> ExporterOptions(const ObservabilityOptions& options) {
  OtlpExporterOptions eo = options.otel_exporter;
  eo.endpoint = options.otel_endpoint;
  eo.resource = options.otel_resource;
  if (!options.otel_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemCertificates("--otel_ca_file", options.otel_ca_file);
    if (!ca.ok()) return ca.status();
    eo.tls_ca_pem = *std::move(ca);
  }
  return eo;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RateLimitServer>> RateLimitServer::Start(
    const ServerOptions& options, const Clock& clock, std::unique_ptr<StateStore> store) {
  // The options and the security files are checked before anything starts, so that a bad one is
  // the only error.
  if (absl::Status s = ValidateServerOptions(options); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ListenerCredentials(options.listen);
  if (!credentials.ok()) return credentials.status();
  const ObservabilityOptions& observability = options.observability;
  absl::StatusOr<OtlpExporterOptions> exporter_options = ExporterOptions(observability);
  if (!exporter_options.ok()) return exporter_options.status();
  HttpServerTls metrics_tls{observability.metrics_tls_cert_file,
                            observability.metrics_tls_key_file};
  if (metrics_tls.enabled()) {
    absl::StatusOr<PemKeyPair> pair =
        ReadPemKeyPair("--metrics_tls_cert_file", metrics_tls.cert_file, "--metrics_tls_key_file",
                       metrics_tls.key_file);
    if (!pair.ok()) return pair.status();
  }

  std::unique_ptr<RateLimitServer> s(new RateLimitServer(options));
  s->clock_ = &clock;
  s->health_.SetStarting();

  // Observability first: /healthz answers STARTING while the store opens.
  s->metrics_ = std::make_unique<ServerMetrics>(s->metrics_registry_);
  if (const std::string& listen = observability.metrics_listen; !listen.empty()) {
    const size_t colon = listen.rfind(':');
    int port = 0;
    (void)absl::SimpleAtoi(listen.substr(colon + 1), &port);  // validated
    absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
        listen.substr(0, colon), port, s->metrics_registry_, s->health_, metrics_tls);
    if (!http.ok()) return http.status();
    s->http_ = *std::move(http);
    if (observability.on_metrics_listening) observability.on_metrics_listening(s->http_->port());
  }
  if (!observability.otel_endpoint.empty()) {
    s->exporter_ = std::make_unique<OtlpExporter>(*exporter_options);
    s->tracer_ =
        std::make_unique<Tracer>(TracerOptions{observability.otel_sample_ratio}, *s->exporter_);
  }
  // The configuration files are read, and the listening addresses checked, before the store
  // opens: a start-up that fails on them leaves the data directory as it was.
  if (!options.limits.file.empty()) {
    s->watcher_ = std::make_unique<LimitsFileWatcher>(
        options.limits.file, s->registry_, options.limits.reload_interval,
        CountReloads(*s->metrics_, "limits", options.limits.on_config_reload));
    if (absl::Status st = s->watcher_->Load(); !st.ok()) return st;
  }
  if (!options.receipts.key_file.empty()) {
    s->receipt_watcher_ = std::make_unique<WatchedConfig<ReceiptKeys, std::string>>(
        ReceiptKeyFileSpec(options.receipts.key_file), s->receipt_keys_,
        options.limits.reload_interval,
        CountReloads(*s->metrics_, "receipt_keys", options.limits.on_config_reload));
    if (absl::Status st = s->receipt_watcher_->Load(); !st.ok()) return st;
  }
  // A new Envoy configuration is divided among the RLQS subscribers at once (the service exists
  // before the watcher's thread or the xDS client starts).
  auto envoy_reloaded = [server = s.get(), hook = options.limits.on_config_reload](
                            absl::string_view config, const absl::Status& st) {
    if (st.ok() && server->rlqs_service_) server->rlqs_service_->Tick();
    if (hook) hook(config, st);
  };
  if (!options.limits.envoy_config_dir.empty() && !options.limits.envoy_xds.enabled()) {
    s->envoy_watcher_ = std::make_unique<EnvoyConfigWatcher>(
        options.limits.envoy_config_dir, s->envoy_registry_, options.limits.reload_interval,
        CountReloads(*s->metrics_, "envoy", envoy_reloaded));
    if (absl::Status st = s->envoy_watcher_->Load(); !st.ok()) return st;
  }
  // gRPC's own failure to bind names no cause; the check does.
  if (absl::Status st = CheckCanListen(options.listen.address); !st.ok()) return st;
  if (!options.listen.plaintext_address.empty()) {
    if (absl::Status st = CheckCanListen(options.listen.plaintext_address); !st.ok()) return st;
  }
  const bool injected = store != nullptr;
  if (injected) {
    s->store_ = std::move(store);
  } else {
    StoreOptions so = options.store.open;
    so.clock = &clock;
    absl::StatusOr<OpenedStateStore> opened = OpenStateStore(so);
    if (!opened.ok()) {
      if (opened.status().code() != absl::StatusCode::kDataLoss) return opened.status();
      return absl::DataLossError(absl::StrCat(
          opened.status().message(),
          "; back up the data directory, then start with --salvage_wal to open it anyway"));
    }
    const StoreOpenReport& report = opened->report;
    for (const std::string& warning : report.warnings) Log(LogLevel::kWarning, warning);
    if (!report.recovery.empty()) {
      Log(report.salvaged ? LogLevel::kWarning : LogLevel::kInfo, "store recovered",
          {{"data_dir", options.store.open.rocksdb.path}, {"recovery", report.recovery}});
    }
    if (report.upgraded_states) {
      Log(LogLevel::kInfo, "state store upgraded to format 2",
          {{"data_dir", options.store.open.rocksdb.path},
           {"states_moved_to_limits_file_namespace", std::to_string(*report.upgraded_states)}});
    }
    s->store_ = std::move(opened->store);
  }
  s->telemetry_ = std::make_unique<Telemetry>(s->metrics_.get(), s->tracer_.get(),
                                              observability.trace_keys, s->store_->backend_name());
  s->RegisterStoreMetrics();
  s->limiter_ = std::make_unique<Limiter>(*s->store_, clock);
  if (options.receipts.key_file.empty()) {
    absl::StatusOr<std::string> key = s->store_->Secret("receipt_key", NewReceiptKey);
    if (!key.ok()) {
      Log(LogLevel::kWarning,
          "the store keeps no receipt key; receipts of this process are not valid after a "
          "restart (set --receipt_key_file)",
          {{"reason", std::string(key.status().message())}});
      key = NewReceiptKey();
    }
    s->receipt_keys_.Replace(
        std::make_shared<const ReceiptKeys>(*std::move(key), std::vector<std::string>()));
  }
  SettleOptions settle;
  settle.keys = &s->receipt_keys_;
  settle.receipt_ttl_us = absl::ToInt64Microseconds(options.receipts.ttl);
  settle.request_id_ttl_us = absl::ToInt64Microseconds(options.receipts.request_id_ttl);
  settle.clock = &clock;
  s->admin_ = std::make_unique<AdminAuthenticator>(options.admin.token, options.admin.identities);
  // A store whose batches wait for a peer (Redis) has its synchronous transactions run on store
  // threads, so that a serving thread is never parked on a round trip.
  const int store_threads = options.store.threads >= 0            ? options.store.threads
                            : s->limiter_->BatchesDecideLocally() ? 0
                                                                  : 64;
  s->executor_ = std::make_unique<StoreExecutor>(store_threads);
  s->scheduler_ = std::make_unique<DecisionScheduler>(*s->limiter_, s->executor_.get());
  s->service_ = std::make_unique<RateLimitServiceImpl>(*s->scheduler_, s->registry_, *s->admin_,
                                                       options.store.failure_policy, *s->telemetry_,
                                                       options.limits.inline_limits, settle);
  s->held_slots_ = std::make_unique<HeldSlots>(clock);
  s->service_->set_held_slots(s->held_slots_.get());
  // This replica's name on the store's board (replicas sharing Redis), new with each start, so
  // that a restarted replica is a newcomer there.
  const std::string replica = NewReplicaName();
  if (options.store.lease_sweep_interval > absl::ZeroDuration()) {
    s->lease_sweeper_ = std::make_unique<LeaseSweeper>(
        LeaseSweeper::Options{absl::ToInt64Microseconds(options.store.lease_sweep_interval),
                              replica},
        s->store_->replica_board(), clock,
        [service = s->service_.get()] { return service->SweepLeakedLeases(); });
  }
  s->RegisterLeaseMetrics();
  if (OverrideStore* overrides = s->store_->overrides()) {
    s->override_refresher_ =
        std::make_unique<OverrideRefresher>(*overrides, s->overrides_, kOverrideRefreshInterval);
    if (absl::Status st = s->override_refresher_->Refresh(); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("reading the overrides: ", st.message()));
    }
    s->service_->set_overrides(&s->overrides_, &clock);
  }
  s->override_service_ = std::make_unique<OverrideServiceImpl>(
      *s->scheduler_, s->registry_, *s->admin_, s->store_->overrides(),
      s->override_refresher_.get(), clock, *s->telemetry_);
  s->RegisterOverrideMetrics();

  // Every service is served by the serving loop; gRPC's default health service (a callback one)
  // is replaced by ours there (health_service.h).
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  ConfigureTransport(options.listen, builder);
  builder.AddListeningPort(options.listen.address, *credentials, &s->port_);
  if (!options.listen.plaintext_address.empty()) {
    builder.AddListeningPort(options.listen.plaintext_address, grpc::InsecureServerCredentials(),
                             &s->plaintext_port_);
  }
  s->serving_loop_ = std::make_unique<ServingLoop>(
      options.listen.serving_threads > 0 ? options.listen.serving_threads : CpusAvailable(),
      builder, options.listen.scheduling);
  builder.RegisterService(s->service_.get());
  s->serving_loop_->AddUnary(*s->service_, RateLimitServiceImpl::TrafficMethods(), kHotCallsReady);
  s->serving_loop_->AddUnary(*s->service_, RateLimitServiceImpl::AdminMethods(), kColdCallsReady);
  s->lease_streams_ = std::make_unique<LeaseStreams>(*s->service_);
  s->serving_loop_->AddStreams(*s->lease_streams_);
  s->metrics_registry_.AddGauge(
      "ratelimit_lease_streams_open", "LeaseStream streams open now (docs/leases.md).",
      [streams = s->lease_streams_.get()] { return static_cast<double>(streams->open_streams()); });
  builder.RegisterService(s->override_service_.get());
  s->serving_loop_->AddUnary(*s->override_service_, OverrideServiceImpl::Methods(),
                             kColdCallsReady);
  s->health_service_ = std::make_unique<LoopHealthService>();
  builder.RegisterService(s->health_service_.get());
  s->serving_loop_->AddUnary(*s->health_service_, {LoopHealthService::kCheckMethod},
                             kColdCallsReady);
  s->serving_loop_->AddStreams(*s->health_service_);
  // The Envoy RLS v3 API, on the same port, limiter and store.
  if (!options.limits.envoy_config_dir.empty() || options.limits.envoy_xds.enabled()) {
    if (options.limits.envoy_xds.enabled()) {
      // From a management server: the Envoy API starts with no domains and the client swaps in
      // each configuration it receives (see docs/envoy.md on readiness).
      absl::StatusOr<std::unique_ptr<EnvoyXdsClient>> xds =
          EnvoyXdsClient::Create(options.limits.envoy_xds, s->envoy_registry_,
                                 CountReloads(*s->metrics_, "envoy", envoy_reloaded));
      if (!xds.ok()) return xds.status();
      s->envoy_xds_client_ = *std::move(xds);
      s->RegisterEnvoyXdsMetrics();
    }
    s->service_->set_envoy_reset_resolver(
        [registry = &s->envoy_registry_](
            const ResetTarget& t) -> absl::StatusOr<RateLimitServiceImpl::EnvoyResetResolution> {
          if (!t.all_keys) {
            if (absl::Status s = ValidateEnvoyStateKey(t.key, t.envoy_path.size(), "key");
                !s.ok()) {
              return s;
            }
          }
          absl::StatusOr<EnvoyResetState> state = EnvoyResetStateName(
              *registry->Current(), t.envoy_domain, t.envoy_path, t.envoy_override);
          if (!state.ok()) return state.status();
          return RateLimitServiceImpl::EnvoyResetResolution{
              std::move(state->name), std::move(state->key_suffixes), state->concurrency};
        });
    EnvoyServiceOptions envoy_options;
    envoy_options.ratelimit_headers = options.limits.envoy_ratelimit_headers;
    envoy_options.shadow_mode = options.limits.envoy_shadow_mode;
    envoy_options.quota_mode = options.limits.envoy_quota_mode;
    envoy_options.near_limit_ratio = options.limits.envoy_near_limit_ratio;
    envoy_options.response_dynamic_metadata = options.limits.envoy_response_dynamic_metadata;
    envoy_options.header_names = {options.limits.envoy_ratelimit_limit_header,
                                  options.limits.envoy_ratelimit_remaining_header,
                                  options.limits.envoy_ratelimit_reset_header};
    s->envoy_service_ = std::make_unique<EnvoyRateLimitServiceImpl>(
        *s->scheduler_, clock, s->envoy_registry_, std::move(envoy_options), *s->telemetry_);
    s->envoy_service_->set_lease_observer(  // its leases' slots, in the v1 API's gauge
        [held = s->held_slots_.get()](const StateKey& key, int64_t slots, int64_t max_ttl_us,
                                      uint64_t seq) {
          held->Observe(key, slots, max_ttl_us, seq);
        });
    s->service_->set_envoy_lease_rule([registry = &s->envoy_registry_](absl::string_view state_name)
                                          -> std::optional<RateLimitServiceImpl::SweptLimit> {
      const std::shared_ptr<const EnvoyConfig> config = registry->Current();
      const EnvoyRateLimit* rule = FindEnvoyRule(*config, state_name);
      if (rule == nullptr || !rule->concurrency) return std::nullopt;
      return RateLimitServiceImpl::SweptLimit{rule->limit_name,
                                              EnvoyConcurrencyConfig(*rule->concurrency)};
    });
    // Runtime overrides of Envoy rules: set and checked through the OverrideService, applied to
    // ShouldRateLimit.
    s->override_service_->set_envoy(&s->envoy_registry_);
    if (s->override_refresher_) s->envoy_service_->set_overrides(&s->overrides_, &clock);
    s->RegisterEnvoyMetrics();
    builder.RegisterService(s->envoy_service_.get());
    s->serving_loop_->AddUnary(*s->envoy_service_,
                               {EnvoyRateLimitServiceImpl::kShouldRateLimitMethod}, kHotCallsReady);
  }
  // Envoy's Rate Limit Quota Service, on the same port, with the Envoy domains' quota_buckets
  // (a callback service: see rlqs_service.h).
  if (options.rlqs.enabled) {
    RlqsServiceOptions rlqs;
    rlqs.buckets.default_reporting_interval_seconds =
        absl::ToInt64Seconds(options.rlqs.reporting_interval);
    rlqs.buckets.idle_abandon = options.rlqs.idle_abandon;
    rlqs.buckets.max_buckets_per_stream = static_cast<size_t>(options.rlqs.max_buckets_per_stream);
    rlqs.buckets.reallocation_interval_us =
        absl::ToInt64Microseconds(options.rlqs.reallocation_interval);
    rlqs.max_streams_per_connection = static_cast<size_t>(options.rlqs.max_streams_per_connection);
    rlqs.tracer = s->tracer_.get();
    // Replicas sharing a store (Redis) share each bucket's global rate through its board.
    rlqs.board = s->store_->replica_board();
    // One server owning its data directory records how long its assignments last, so that a
    // restart after a crash waits for them (rlqs_horizon.h).
    if (!injected && options.store.open.backend == "rocksdb") {
      rlqs.horizon_path = options.store.open.rocksdb.path + "/rlqs-assignments";
    }
    rlqs.replicas.replica = replica;
    rlqs.replicas.interval_us = absl::ToInt64Microseconds(options.rlqs.reallocation_interval);
    s->rlqs_service_ = std::make_unique<RlqsService>(
        rlqs, clock, [registry = &s->envoy_registry_](absl::string_view domain) {
          const EnvoyDomain* d = registry->Current()->FindDomain(domain);
          return d ? d->quota_buckets : nullptr;
        });
    RegisterRlqsMetrics(s->metrics_registry_, *s->rlqs_service_);
    builder.RegisterService(s->rlqs_service_.get());
  }
  // The administrative view of the RLQS assignments, registered with or without --rlqs (it then
  // answers FAILED_PRECONDITION).
  s->rlqs_admin_service_ =
      std::make_unique<RlqsAdminServiceImpl>(s->rlqs_service_.get(), *s->admin_, *s->telemetry_);
  builder.RegisterService(s->rlqs_admin_service_.get());
  s->serving_loop_->AddUnary(*s->rlqs_admin_service_,
                             {RlqsAdminServiceImpl::kGetRlqsAssignmentsMethod}, kColdCallsReady);
  // The transport's bound is the largest any method takes: an RLQS report may be larger than
  // kMaxRequestBytes, which the serving loop holds every unary call to (LoopCall::OnEvent).
  builder.SetMaxReceiveMessageSize(
      options.rlqs.enabled
          ? std::max(static_cast<int>(kMaxRequestBytes), options.rlqs.max_message_bytes)
          : static_cast<int>(kMaxRequestBytes));
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen.address));
  }
  if (!options.listen.plaintext_address.empty() && s->plaintext_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen.plaintext_address));
  }
  s->serving_loop_->Start();
  std::vector<std::string> services = {"", kServiceName};
  if (s->envoy_service_) services.push_back(kEnvoyServiceName);
  if (s->rlqs_service_) services.push_back(kRlqsServiceName);
  s->health_.Attach(s->health_service_.get(), services);  // NOT_SERVING until ready

  s->probe_ =
      std::make_unique<StoreProbe>(*s->store_, s->health_, options.store.health_probe_interval);
  s->probe_->ProbeOnce();
  s->probe_->Start();
  if (options.store.gc_interval > absl::ZeroDuration()) {
    StateStore* store_ptr = s->store_.get();
    s->gc_ = std::make_unique<PeriodicTask>(options.store.gc_interval, [store_ptr] {
      const absl::Time start = absl::Now();
      if (absl::Status st = store_ptr->CollectGarbage(); !st.ok()) {
        Log(LogLevel::kWarning, "garbage collection failed",
            {{"error", std::string(st.message())}});
      } else {
        Log(LogLevel::kDebug, "garbage collected",
            {{"took", absl::FormatDuration(absl::Now() - start)}});
      }
    });
    s->gc_->Start();
  }
  if (s->lease_sweeper_) {
    s->lease_sweep_task_ =
        std::make_unique<PeriodicTask>(options.store.lease_sweep_interval,
                                       [sweeper = s->lease_sweeper_.get()] { sweeper->RunOnce(); });
    s->lease_sweep_task_->Start();
  }
  s->log_flusher_ = std::make_unique<PeriodicTask>(absl::Seconds(1), [] { FlushRepeatedLogs(); });
  s->log_flusher_->Start();
  if (s->watcher_) s->watcher_->Start();
  if (s->override_refresher_) s->override_refresher_->Start();
  if (s->receipt_watcher_) s->receipt_watcher_->Start();
  if (s->envoy_watcher_) s->envoy_watcher_->Start();
  if (s->envoy_xds_client_) s->envoy_xds_client_->Start();
  if (s->rlqs_service_) {
    s->rlqs_ticker_ = std::make_unique<PeriodicTask>(
        options.rlqs.reallocation_interval, [rlqs = s->rlqs_service_.get()] { rlqs->Tick(); });
    s->rlqs_ticker_->Start();
  }
  s->health_.SetServing();
  s->started_ = true;
  if (!options.listen.tls.enabled() && !IsLoopbackAddress(options.listen.address)) {
    Log(LogLevel::kWarning, "plaintext gRPC on an address that is not loopback",
        {{"address", options.listen.address}, {"allowed_by", "--allow_insecure_listen"}});
  }
  Log(LogLevel::kInfo, "listening",
      {{"address", options.listen.address},
       {"port", std::to_string(s->port_)},
       {"tls", !options.listen.tls.enabled()               ? "off"
               : options.listen.tls.client_ca_file.empty() ? "tls"
                                                           : "mtls"},
       {"plaintext_port", s->plaintext_port_ ? std::to_string(s->plaintext_port_) : ""},
       {"metrics_port", s->http_ ? std::to_string(s->http_->port()) : ""},
       {"data_dir", injected ? std::string("(injected)") : options.store.open.rocksdb.path},
       {"admin", s->admin_->enabled() ? "enabled" : "disabled"},
       {"failure_policy", options.store.failure_policy == FailurePolicy::kOpen ? "open" : "closed"},
       {"tracing", observability.otel_endpoint.empty() ? "off" : observability.otel_endpoint}});
  return s;
}

RateLimitServer::~RateLimitServer() { Shutdown(); }

void RateLimitServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // A server that failed to start tears down quietly: its caller reports the one error.
  const LogLevel level = started_ ? LogLevel::kInfo : LogLevel::kDebug;
  Log(level, "shutting down: draining in-flight calls");
  health_.SetDraining();
  // Ends the Watch streams, which would otherwise hold the server's shutdown for its grace.
  if (health_service_) health_service_->Shutdown();
  // The lease streams answer what they have read and end, so that their clients move on.
  if (lease_streams_) lease_streams_->Shutdown();
  // Envoys fall back at once (TTL 0) and the RLQS streams end, instead of holding the grace.
  if (rlqs_ticker_) rlqs_ticker_->Stop();
  if (rlqs_service_) rlqs_service_->Shutdown();
  // Returns once no call is left, closing the idle connections then (serving_loop.h).
  if (server_) {
    serving_loop_->ShutdownServer(
        *server_, absl::Now() + options_.listen.shutdown_grace, [this](absl::Time deadline) {
          return health_service_->AwaitWatchesEnded(deadline) &&
                 lease_streams_->AwaitStreamsEnded(deadline) &&
                 (!rlqs_service_ || rlqs_service_->AwaitStreamsEnded(deadline));
        });
  }
  // No call is left: the loop's queues may go.
  if (serving_loop_) serving_loop_->Stop();
  Log(LogLevel::kDebug, "grpc server shut down");
  if (probe_) probe_->Stop();
  if (watcher_) watcher_->Stop();
  if (override_refresher_) override_refresher_->Stop();
  if (receipt_watcher_) receipt_watcher_->Stop();
  if (envoy_watcher_) envoy_watcher_->Stop();
  if (envoy_xds_client_) envoy_xds_client_->Stop();
  if (exporter_) exporter_->Shutdown(options_.listen.shutdown_grace);
  if (gc_) gc_->Stop();
  if (lease_sweep_task_) lease_sweep_task_->Stop();
  absl::Status closed;
  if (store_) {
    closed = store_->Close();
    if (!closed.ok()) {
      Log(LogLevel::kError, "closing the store failed", {{"error", std::string(closed.message())}});
    }
  }
  if (http_) http_->Stop();
  if (log_flusher_) log_flusher_->Stop();
  FlushRepeatedLogs(/*force=*/true);  // the counts of the last interval
  Log(level, "stopped");
  absl::MutexLock lock(&mu_);
  close_status_ = closed;
  stopped_ = true;
}

void RateLimitServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

absl::Status RateLimitServer::ShutdownStatus() {
  absl::MutexLock lock(&mu_);
  return close_status_;
}

}  // namespace ratelimit
