#include "server/flags.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/admin_token.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8081",
          "host:port to serve gRPC on; port 0 picks a free port. TLS when --tls_cert_file is "
          "set; plaintext only on a loopback address unless --allow_insecure_listen");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain of the server: --listen serves TLS only (with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle: every client must present a certificate it signed (mTLS)");
ABSL_FLAG(absl::Duration, tls_reload_interval, absl::Minutes(1),
          "how often the TLS files are re-read (rotation without restart); at least 1s");
ABSL_FLAG(std::string, plaintext_listen, "",
          "an extra plaintext gRPC host:port (same services) beside a TLS --listen, for local "
          "sidecars and probes; loopback only unless --allow_insecure_listen; empty: none");
ABSL_FLAG(bool, allow_insecure_listen, false,
          "permit plaintext gRPC on addresses that are not loopback (--listen without TLS, "
          "--plaintext_listen)");
ABSL_FLAG(std::vector<std::string>, admin_identities, {},
          "comma-separated URI/DNS SANs (e.g. spiffe://example.org/admin) of client "
          "certificates allowed to call Reset; needs --tls_client_ca_file; either an identity or "
          "the admin token suffices");
ABSL_FLAG(std::string, data_dir, "./data", "RocksDB data directory (created if missing)");
ABSL_FLAG(std::string, store, "rocksdb",
          "state store: rocksdb (local, in --data_dir), redis (shared by every replica: "
          "--redis_address) or memory (nothing survives the process: for trying out and "
          "benchmarks)");
ABSL_FLAG(std::string, redis_address, "",
          "--store=redis: seed nodes host:port[,host:port...] of a Redis Cluster or of one "
          "standalone Redis server (detected at start)");
ABSL_FLAG(std::string, redis_password_file, "",
          "--store=redis: file holding the Redis AUTH password; empty: no AUTH");
ABSL_FLAG(absl::Duration, redis_timeout, absl::Seconds(1),
          "--store=redis: time to connect to a node and for one command's round trip");
ABSL_FLAG(absl::Duration, redis_hold_ttl, absl::Seconds(10),
          "--store=redis: how long the take of a request whose limits span slots is remembered, "
          "so that it can be refunded and a take arriving after its refund does nothing; at "
          "least twice --redis_timeout");
ABSL_FLAG(std::string, redis_key_prefix,
          "ratelimit:", "--store=redis: prefix of every Redis key (no '{' or '}')");
ABSL_FLAG(int, redis_wait_replicas, 0,
          "--store=redis: replicas that must acknowledge each pipelined batch of writes to a "
          "primary (one WAIT per batch) before its decisions are answered; fewer within "
          "--redis_timeout: UNAVAILABLE (--failure_policy applies). 0: no WAIT");
ABSL_FLAG(int, store_threads, -1,
          "threads the RPC handlers run their store transactions on, so that a store waiting "
          "for the network (Redis) does not park the serving threads; 0: on the serving threads; "
          "-1: 64 for --store=redis, 0 for rocksdb");
ABSL_FLAG(int, serving_threads, 0,
          "threads serving the gRPC methods, each over its own completion queue, deciding the "
          "Consume/Check/Reserve calls of a burst with one store call; 0: one per CPU the "
          "process may run on");
ABSL_FLAG(bool, batch_scheduling, true,
          "run the serving threads and the Redis client's I/O thread under SCHED_BATCH, so that "
          "waking one of them does not preempt the thread that woke it and each finishes its "
          "burst first; false: the process's scheduling policy (a woken thread preempts, which "
          "may answer sooner on CPUs shared with other busy processes)");
ABSL_FLAG(std::string, limits_file, "", "YAML file of named limits, hot-reloaded");
ABSL_FLAG(absl::Duration, limits_reload_interval, absl::Seconds(1),
          "how often the limits file is checked for changes");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin bearer token for Reset (else $RATELIMIT_ADMIN_TOKEN; "
          "neither: Reset is disabled)");
ABSL_FLAG(std::string, failure_policy, "closed",
          "when the store fails: closed (answer UNAVAILABLE) or open (allow, marked failed_open)");
ABSL_FLAG(std::string, inline_limits, "allow",
          "allow or deny limits defined inline in ratelimit.v1 requests (deny: PERMISSION_DENIED; "
          "only the limits file's limits can be used)");
ABSL_FLAG(std::string, receipt_key_file, "",
          "file of receipt signing keys, reloaded when it changes: first line the current key, "
          "further lines previous keys still accepted (hex or base64, >= 32 bytes each); empty: "
          "a key generated once and kept in the data directory");
ABSL_FLAG(absl::Duration, receipt_ttl, absl::Hours(1),
          "how long a receipt can be settled (Settle refuses older ones); spent receipts are "
          "remembered this long");
ABSL_FLAG(absl::Duration, request_id_ttl, absl::Minutes(10),
          "how long the answer to a Consume or Reserve carrying a request_id is remembered for "
          "retries");
ABSL_FLAG(bool, sync, false, "fsync the WAL on every write (survives power loss; slower)");
ABSL_FLAG(int64_t, state_cache_mb, 256,
          "memory bound of the cache of hot states in MiB (--store=rocksdb); 0: every decision "
          "reads RocksDB");
ABSL_FLAG(int64_t, lease_cache_mb, 64,
          "memory bound of the cache of lease sets of concurrency limits in MiB (--store=rocksdb); "
          "0: every lease decision reads RocksDB");
ABSL_FLAG(bool, salvage_wal, false,
          "open a data directory whose WAL is corrupt or truncated by recovering up to the last "
          "consistent record, losing the writes after it (default: refuse to start)");
ABSL_FLAG(bool, wal_mmap, true,
          "write the WAL through a shared memory mapping: as durable as a write(2) per write "
          "group (a killed process loses nothing), without the system call; false: write(2)");
ABSL_FLAG(absl::Duration, gc_interval, absl::Hours(1),
          "how often refilled states are collected (flush and compaction of the states) even "
          "without writes; 0: only when writes trigger compactions");
ABSL_FLAG(absl::Duration, lease_sweep_interval, absl::Seconds(10),
          "how often the leak sweep counts leases of concurrency limits that expired unreleased "
          "on keys no call decides again (ratelimit_leases_expired_total); at most 30s; 0: "
          "never");
ABSL_FLAG(std::string, port_file, "", "write the chosen port to this file once listening");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "how long in-flight calls may take to finish on SIGTERM");
ABSL_FLAG(int32_t, max_concurrent_streams, 100,
          "most calls in flight per gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)");
ABSL_FLAG(int64_t, grpc_memory_limit_mb, 1024,
          "memory gRPC may use for connection buffers, in MiB; under pressure it stops reading "
          "and drops idle connections");
ABSL_FLAG(absl::Duration, max_connection_idle, absl::Minutes(5),
          "close a gRPC connection without calls after this long (GOAWAY); inf: never");
ABSL_FLAG(absl::Duration, keepalive_min_ping_interval, absl::Seconds(10),
          "shortest interval between a client's keepalive pings that is tolerated");
ABSL_FLAG(int32_t, keepalive_max_ping_strikes, 2,
          "pings faster than --keepalive_min_ping_interval before the connection is closed "
          "(GOAWAY too_many_pings); 0: never");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "host:port of the HTTP endpoint for /metrics (Prometheus) and /healthz; empty: off");
ABSL_FLAG(std::string, metrics_tls_cert_file, "",
          "PEM certificate chain: the metrics endpoint serves HTTPS only (with "
          "--metrics_tls_key_file); re-read when the files change");
ABSL_FLAG(std::string, metrics_tls_key_file, "", "PEM private key of --metrics_tls_cert_file");
ABSL_FLAG(std::string, metrics_port_file, "", "write the HTTP endpoint's port to this file");
ABSL_FLAG(absl::Duration, health_probe_interval, absl::Seconds(1),
          "how often the store is probed for the health status");
ABSL_FLAG(std::string, otel_endpoint, "",
          "OTLP/gRPC trace collector host:port (else $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
          "$OTEL_EXPORTER_OTLP_ENDPOINT); https://host:port is TLS, host:port or http:// "
          "plaintext; empty: tracing off");
ABSL_FLAG(std::string, otel_ca_file, "",
          "PEM CA bundle verifying an https:// --otel_endpoint (else "
          "$OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE or $OTEL_EXPORTER_OTLP_CERTIFICATE; default: "
          "gRPC's root certificates)");
ABSL_FLAG(double, otel_sample_ratio, -1,
          "share of new traces sampled, 0..1 (else $OTEL_TRACES_SAMPLER/_ARG; default 1); a "
          "caller's traceparent sampled flag always wins");
ABSL_FLAG(std::string, otel_service_name, "",
          "service.name of the spans (else $OTEL_SERVICE_NAME, default \"ratelimit\"); more "
          "attributes from $OTEL_RESOURCE_ATTRIBUTES (k=v,k2=v2)");
ABSL_FLAG(bool, trace_keys, false,
          "record limit keys as span attributes (off by default: keys can be personal data)");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, log_format, "text", "text or json");
ABSL_FLAG(std::string, envoy_config_dir, "",
          "serve Envoy's RLS v3 API with the envoyproxy/ratelimit YAML files of this directory "
          "(one domain per file, hot-reloaded); empty: the Envoy API is off");
ABSL_FLAG(double, envoy_near_limit_ratio, 0.8,
          "Envoy API: share of a limit, in (0, 1], past which hits count as near_limit");
ABSL_FLAG(bool, envoy_response_dynamic_metadata, false,
          "Envoy API: return the request and the passed rules' metadata in dynamic_metadata");
ABSL_FLAG(std::string, envoy_ratelimit_limit_header, "RateLimit-Limit",
          "Envoy API: name of the limit header of --envoy_ratelimit_headers");
ABSL_FLAG(std::string, envoy_ratelimit_remaining_header, "RateLimit-Remaining",
          "Envoy API: name of the remaining header of --envoy_ratelimit_headers");
ABSL_FLAG(std::string, envoy_ratelimit_reset_header, "RateLimit-Reset",
          "Envoy API: name of the reset header of --envoy_ratelimit_headers");
ABSL_FLAG(bool, envoy_ratelimit_headers, false,
          "Envoy API: return RateLimit-Limit/-Remaining/-Reset in response_headers_to_add");
ABSL_FLAG(bool, envoy_shadow_mode, false,
          "Envoy API: never deny (an OVER_LIMIT answer becomes OK; statuses and statistics "
          "unchanged), as the reference's SHADOW_MODE");
ABSL_FLAG(bool, envoy_quota_mode, false,
          "Envoy API: every descriptor is a quota descriptor (a request is OVER_LIMIT only when "
          "every one is over), as the reference's QUOTA_MODE");
// Envoy's Rate Limit Quota Service (server/rlqs).
ABSL_FLAG(bool, rlqs, false,
          "serve Envoy's Rate Limit Quota Service (RLQS) on the same port: the quota_buckets of "
          "the Envoy configuration's domains divided among the reporting Envoys; needs "
          "--envoy_config_dir or --envoy_xds_server");
ABSL_FLAG(absl::Duration, rlqs_reallocation_interval, absl::Seconds(1),
          "RLQS: how often every bucket's budget is divided again (new shares are pushed); "
          "positive, at most 1h");
ABSL_FLAG(absl::Duration, rlqs_reporting_interval, absl::Seconds(5),
          "RLQS: the Envoys' reporting interval assumed until their reports show it (an "
          "assignment lives three intervals); 1s to 5m");
ABSL_FLAG(absl::Duration, rlqs_idle_abandon, absl::Minutes(5),
          "RLQS: a bucket an Envoy has not reported for this long is abandoned (AbandonAction); "
          "1s to 24h");
ABSL_FLAG(int, rlqs_max_buckets_per_stream, 10000,
          "RLQS: the most buckets one stream may report; past it the stream ends with "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int, rlqs_max_message_bytes, 4 << 20,
          "RLQS: the largest message a stream may send (a periodic report carries every bucket "
          "of the stream); a larger one ends the stream with RESOURCE_EXHAUSTED. 64 KiB .. 64 MiB; "
          "every other call is held to 64 KiB");
ABSL_FLAG(int, rlqs_max_streams_per_connection, 16,
          "RLQS: the most streams one client connection may hold at once; one more ends at "
          "once with RESOURCE_EXHAUSTED");
// The Envoy configuration from an xDS management server (server/envoy/xds).
ABSL_FLAG(std::string, envoy_xds_server, "",
          "serve Envoy's RLS v3 API with the configuration of this xDS management server "
          "(host:port, ADS state of the world, RateLimitConfig resources); not with "
          "--envoy_config_dir");
ABSL_FLAG(std::string, envoy_xds_node_id, "default",
          "xDS: the node id sent to the management server");
ABSL_FLAG(std::string, envoy_xds_node_metadata, "",
          "xDS: node metadata sent to the management server, k1=v1,k2=v2");
ABSL_FLAG(bool, envoy_xds_tls, false, "xDS: TLS to the management server (else plaintext)");
ABSL_FLAG(std::string, envoy_xds_tls_ca_file, "",
          "xDS: PEM CA bundle verifying the management server (default: the system roots)");
ABSL_FLAG(std::string, envoy_xds_tls_cert_file, "",
          "xDS: PEM client certificate chain presented to the management server (mTLS)");
ABSL_FLAG(std::string, envoy_xds_tls_key_file, "",
          "xDS: PEM private key of --envoy_xds_tls_cert_file");
ABSL_FLAG(std::string, envoy_xds_tls_server_name, "",
          "xDS: the name the management server's certificate must carry (SAN), also the TLS "
          "server name and authority (default: the host of --envoy_xds_server)");
ABSL_FLAG(absl::Duration, envoy_xds_retry_initial, absl::Seconds(1),
          "xDS: first reconnection delay after the stream fails (doubled up to "
          "--envoy_xds_retry_max, jittered)");
ABSL_FLAG(absl::Duration, envoy_xds_retry_max, absl::Seconds(30),
          "xDS: longest reconnection delay");

namespace ratelimit {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The tracing settings from flags, falling back to the standard OTEL_* environment variables.
absl::Status ReadTracingFlags(ObservabilityOptions& o) {
  o.otel_endpoint = absl::GetFlag(FLAGS_otel_endpoint);
  if (o.otel_endpoint.empty()) o.otel_endpoint = Env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (o.otel_endpoint.empty()) o.otel_endpoint = Env("OTEL_EXPORTER_OTLP_ENDPOINT");
  o.otel_ca_file = absl::GetFlag(FLAGS_otel_ca_file);
  if (o.otel_ca_file.empty()) o.otel_ca_file = Env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE");
  if (o.otel_ca_file.empty()) o.otel_ca_file = Env("OTEL_EXPORTER_OTLP_CERTIFICATE");

  double ratio = absl::GetFlag(FLAGS_otel_sample_ratio);
  if (ratio < 0) {
    ratio = 1;
    const std::string sampler = Env("OTEL_TRACES_SAMPLER");
    const std::string arg = Env("OTEL_TRACES_SAMPLER_ARG");
    if (sampler == "always_off" || sampler == "parentbased_always_off") ratio = 0;
    if ((sampler.empty() || absl::EndsWith(sampler, "traceidratio")) && !arg.empty() &&
        !absl::SimpleAtod(arg, &ratio)) {
      return absl::InvalidArgumentError("OTEL_TRACES_SAMPLER_ARG: not a number: " + arg);
    }
  }
  o.otel_sample_ratio = ratio;

  std::string service = absl::GetFlag(FLAGS_otel_service_name);
  if (service.empty()) service = Env("OTEL_SERVICE_NAME");
  if (service.empty()) service = "ratelimit";
  o.otel_resource = {{"service.name", service},
                     {"telemetry.sdk.name", "ratelimit"},
                     {"telemetry.sdk.language", "cpp"},
                     {"process.pid", int64_t{getpid()}}};
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) o.otel_resource.push_back({"host.name", host});
  for (absl::string_view pair :
       absl::StrSplit(Env("OTEL_RESOURCE_ATTRIBUTES"), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.first == "service.name") continue;
    o.otel_resource.push_back({kv.first, kv.second});
  }
  o.trace_keys = absl::GetFlag(FLAGS_trace_keys);
  return absl::OkStatus();
}

// MiB to bytes, for a flag whose value must lie in [lo, hi] MiB.
absl::StatusOr<int64_t> MiB(int64_t mb, int64_t lo, int64_t hi, absl::string_view flag,
                            absl::string_view range) {
  if (mb < lo || mb > hi) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": must be between ", range));
  }
  return mb << 20;
}

}  // namespace

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions options;

  ListenOptions& listen = options.listen;
  listen.address = absl::GetFlag(FLAGS_listen);
  listen.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  listen.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  listen.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  listen.tls.reload_interval = absl::GetFlag(FLAGS_tls_reload_interval);
  listen.plaintext_address = absl::GetFlag(FLAGS_plaintext_listen);
  listen.allow_insecure = absl::GetFlag(FLAGS_allow_insecure_listen);
  listen.serving_threads = absl::GetFlag(FLAGS_serving_threads);
  listen.scheduling =
      absl::GetFlag(FLAGS_batch_scheduling) ? WorkerScheduling::kBatch : WorkerScheduling::kDefault;
  listen.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  absl::StatusOr<int64_t> grpc_memory =
      MiB(absl::GetFlag(FLAGS_grpc_memory_limit_mb), 1, int64_t{1} << 40, "--grpc_memory_limit_mb",
          "1 and 2^40");
  if (!grpc_memory.ok()) return grpc_memory.status();
  listen.grpc_memory_limit_bytes = *grpc_memory;
  listen.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  listen.keepalive_min_ping_interval = absl::GetFlag(FLAGS_keepalive_min_ping_interval);
  listen.keepalive_max_ping_strikes = absl::GetFlag(FLAGS_keepalive_max_ping_strikes);
  listen.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);

  ServerStoreOptions& store = options.store;
  store.open.backend = absl::GetFlag(FLAGS_store);
  store.open.rocksdb.path = absl::GetFlag(FLAGS_data_dir);
  store.open.rocksdb.sync = absl::GetFlag(FLAGS_sync);
  store.open.rocksdb.salvage_wal = absl::GetFlag(FLAGS_salvage_wal);
  store.open.rocksdb.map_wal = absl::GetFlag(FLAGS_wal_mmap);
  absl::StatusOr<int64_t> cache = MiB(absl::GetFlag(FLAGS_state_cache_mb), 0, int64_t{1} << 30,
                                      "--state_cache_mb", "0 and 2^30");
  if (!cache.ok()) return cache.status();
  store.open.rocksdb.state_cache_bytes = static_cast<size_t>(*cache);
  absl::StatusOr<int64_t> lease_cache = MiB(absl::GetFlag(FLAGS_lease_cache_mb), 0,
                                            int64_t{1} << 30, "--lease_cache_mb", "0 and 2^30");
  if (!lease_cache.ok()) return lease_cache.status();
  store.open.rocksdb.lease_cache_bytes = static_cast<size_t>(*lease_cache);
  store.open.redis.address = absl::GetFlag(FLAGS_redis_address);
  store.open.redis.password_file = absl::GetFlag(FLAGS_redis_password_file);
  store.open.redis.timeout = absl::GetFlag(FLAGS_redis_timeout);
  store.open.redis.hold_ttl = absl::GetFlag(FLAGS_redis_hold_ttl);
  store.open.redis.key_prefix = absl::GetFlag(FLAGS_redis_key_prefix);
  store.open.redis.wait_replicas = absl::GetFlag(FLAGS_redis_wait_replicas);
  store.open.redis.io_scheduling = listen.scheduling;
  store.threads = absl::GetFlag(FLAGS_store_threads);
  store.gc_interval = absl::GetFlag(FLAGS_gc_interval);
  store.lease_sweep_interval = absl::GetFlag(FLAGS_lease_sweep_interval);
  store.health_probe_interval = absl::GetFlag(FLAGS_health_probe_interval);
  if (const std::string policy = absl::GetFlag(FLAGS_failure_policy); policy == "closed") {
    store.failure_policy = FailurePolicy::kClosed;
  } else if (policy == "open") {
    store.failure_policy = FailurePolicy::kOpen;
  } else {
    return absl::InvalidArgumentError("--failure_policy: must be closed or open");
  }

  LimitsOptions& limits = options.limits;
  limits.file = absl::GetFlag(FLAGS_limits_file);
  limits.reload_interval = absl::GetFlag(FLAGS_limits_reload_interval);
  if (const std::string v = absl::GetFlag(FLAGS_inline_limits); v == "allow") {
    limits.inline_limits = InlineLimits::kAllow;
  } else if (v == "deny") {
    limits.inline_limits = InlineLimits::kDeny;
  } else {
    return absl::InvalidArgumentError("--inline_limits: must be allow or deny");
  }
  limits.envoy_config_dir = absl::GetFlag(FLAGS_envoy_config_dir);
  limits.envoy_near_limit_ratio = absl::GetFlag(FLAGS_envoy_near_limit_ratio);
  limits.envoy_response_dynamic_metadata = absl::GetFlag(FLAGS_envoy_response_dynamic_metadata);
  limits.envoy_ratelimit_limit_header = absl::GetFlag(FLAGS_envoy_ratelimit_limit_header);
  limits.envoy_ratelimit_remaining_header = absl::GetFlag(FLAGS_envoy_ratelimit_remaining_header);
  limits.envoy_ratelimit_reset_header = absl::GetFlag(FLAGS_envoy_ratelimit_reset_header);
  limits.envoy_ratelimit_headers = absl::GetFlag(FLAGS_envoy_ratelimit_headers);
  limits.envoy_shadow_mode = absl::GetFlag(FLAGS_envoy_shadow_mode);
  limits.envoy_quota_mode = absl::GetFlag(FLAGS_envoy_quota_mode);
  EnvoyXdsOptions& xds = limits.envoy_xds;
  xds.server = absl::GetFlag(FLAGS_envoy_xds_server);
  xds.node_id = absl::GetFlag(FLAGS_envoy_xds_node_id);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> node_metadata =
      ParseXdsNodeMetadata(absl::GetFlag(FLAGS_envoy_xds_node_metadata));
  if (!node_metadata.ok()) return node_metadata.status();
  xds.node_metadata = *std::move(node_metadata);
  xds.tls = absl::GetFlag(FLAGS_envoy_xds_tls);
  xds.tls_ca_file = absl::GetFlag(FLAGS_envoy_xds_tls_ca_file);
  xds.tls_cert_file = absl::GetFlag(FLAGS_envoy_xds_tls_cert_file);
  xds.tls_key_file = absl::GetFlag(FLAGS_envoy_xds_tls_key_file);
  xds.tls_server_name = absl::GetFlag(FLAGS_envoy_xds_tls_server_name);
  xds.retry_initial = absl::GetFlag(FLAGS_envoy_xds_retry_initial);
  xds.retry_max = absl::GetFlag(FLAGS_envoy_xds_retry_max);

  options.receipts.key_file = absl::GetFlag(FLAGS_receipt_key_file);
  options.receipts.ttl = absl::GetFlag(FLAGS_receipt_ttl);
  options.receipts.request_id_ttl = absl::GetFlag(FLAGS_request_id_ttl);

  ObservabilityOptions& observability = options.observability;
  observability.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  observability.metrics_tls_cert_file = absl::GetFlag(FLAGS_metrics_tls_cert_file);
  observability.metrics_tls_key_file = absl::GetFlag(FLAGS_metrics_tls_key_file);
  if (absl::Status s = ReadTracingFlags(observability); !s.ok()) return s;

  absl::StatusOr<std::string> token =
      LoadAdminToken(absl::GetFlag(FLAGS_admin_token_file), "RATELIMIT_ADMIN_TOKEN");
  if (!token.ok()) return token.status();
  options.admin.token = *std::move(token);
  for (const std::string& identity : absl::GetFlag(FLAGS_admin_identities)) {
    if (!identity.empty()) options.admin.identities.push_back(identity);
  }

  RlqsServerOptions& rlqs = options.rlqs;
  rlqs.enabled = absl::GetFlag(FLAGS_rlqs);
  rlqs.reallocation_interval = absl::GetFlag(FLAGS_rlqs_reallocation_interval);
  rlqs.reporting_interval = absl::GetFlag(FLAGS_rlqs_reporting_interval);
  rlqs.idle_abandon = absl::GetFlag(FLAGS_rlqs_idle_abandon);
  rlqs.max_buckets_per_stream = absl::GetFlag(FLAGS_rlqs_max_buckets_per_stream);
  rlqs.max_streams_per_connection = absl::GetFlag(FLAGS_rlqs_max_streams_per_connection);
  rlqs.max_message_bytes = absl::GetFlag(FLAGS_rlqs_max_message_bytes);

  if (absl::Status s = ValidateServerOptions(options); !s.ok()) return s;
  return options;
}

absl::StatusOr<ProcessFlags> ProcessFlagsFromFlags() {
  ProcessFlags p;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level), &p.log_level)) {
    return absl::InvalidArgumentError("--log_level: must be debug, info, warning or error");
  }
  if (!ParseLogFormat(absl::GetFlag(FLAGS_log_format), &p.log_format)) {
    return absl::InvalidArgumentError("--log_format: must be text or json");
  }
  p.port_file = absl::GetFlag(FLAGS_port_file);
  p.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  return p;
}

}  // namespace ratelimit
