// ratelimit-server: the rate-limit service. See README.md for the flags.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cmdline/help.h"
#include "server/observability/log.h"
#include "server/server.h"
#include "storage/file_util.h"

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
          "state store: rocksdb (local, in --data_dir) or redis (shared by every replica: "
          "--redis_address)");
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
ABSL_FLAG(bool, salvage_wal, false,
          "open a data directory whose WAL is corrupt or truncated by recovering up to the last "
          "consistent record, losing the writes after it (default: refuse to start)");
ABSL_FLAG(bool, wal_mmap, true,
          "write the WAL through a shared memory mapping: as durable as a write(2) per write "
          "group (a killed process loses nothing), without the system call; false: write(2)");
ABSL_FLAG(absl::Duration, gc_interval, absl::Hours(1),
          "how often refilled states are collected (flush and compaction of the states) even "
          "without writes; 0: only when writes trigger compactions");
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
ABSL_FLAG(bool, envoy_ratelimit_headers, false,
          "Envoy API: return RateLimit-Limit/-Remaining/-Reset in response_headers_to_add");

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The tracing settings from flags, falling back to the standard OTEL_* environment variables.
absl::Status ConfigureTracing(ratelimit::ServerOptions& options) {
  options.otel_endpoint = absl::GetFlag(FLAGS_otel_endpoint);
  if (options.otel_endpoint.empty())
    options.otel_endpoint = Env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (options.otel_endpoint.empty()) options.otel_endpoint = Env("OTEL_EXPORTER_OTLP_ENDPOINT");
  options.otel_ca_file = absl::GetFlag(FLAGS_otel_ca_file);
  if (options.otel_ca_file.empty()) {
    options.otel_ca_file = Env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE");
  }
  if (options.otel_ca_file.empty()) options.otel_ca_file = Env("OTEL_EXPORTER_OTLP_CERTIFICATE");

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
  if (!(ratio >= 0 && ratio <= 1)) {
    return absl::InvalidArgumentError("--otel_sample_ratio: must be in [0, 1]");
  }
  options.otel_sample_ratio = ratio;

  std::string service = absl::GetFlag(FLAGS_otel_service_name);
  if (service.empty()) service = Env("OTEL_SERVICE_NAME");
  if (service.empty()) service = "ratelimit";
  options.otel_resource = {{"service.name", service},
                           {"telemetry.sdk.name", "ratelimit"},
                           {"telemetry.sdk.language", "cpp"},
                           {"process.pid", int64_t{getpid()}}};
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) options.otel_resource.push_back({"host.name", host});
  for (absl::string_view pair :
       absl::StrSplit(Env("OTEL_RESOURCE_ATTRIBUTES"), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.first == "service.name") continue;
    options.otel_resource.push_back({kv.first, kv.second});
  }
  options.trace_keys = absl::GetFlag(FLAGS_trace_keys);
  return absl::OkStatus();
}

int Fail(const std::string& message) {
  ratelimit::Log(ratelimit::LogLevel::kError, "start-up failed", {{"error", message}});
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Every file the server creates (RocksDB's WAL and tables, port files) is private to its
  // user: limit keys can be personal data.
  umask(077);
  absl::SetProgramUsageMessage("ratelimit-server [flags]: serves ratelimit.v1.RateLimitService");
  // --help lists the flags of this file (absl's default looks for a file named after the binary).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  ratelimit::HandleHelp(argc, argv, "server/main.cc");  // exit 0, unlike absl's own --help
  absl::ParseCommandLine(argc, argv);
  // Debian builds absl with its Mutex deadlock detector on; it costs ~1.5% of CPU per decision
  // (the lock order is fixed by design and covered by tests).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  ratelimit::LogLevel level;
  if (!ratelimit::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    return Fail("--log_level must be debug, info, warning or error");
  }
  ratelimit::SetLogLevel(level);
  ratelimit::LogFormat format;
  if (!ratelimit::ParseLogFormat(absl::GetFlag(FLAGS_log_format), &format)) {
    return Fail("--log_format must be text or json");
  }
  ratelimit::SetLogFormat(format);

  ratelimit::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.tls.reload_interval = absl::GetFlag(FLAGS_tls_reload_interval);
  options.plaintext_listen = absl::GetFlag(FLAGS_plaintext_listen);
  options.allow_insecure_listen = absl::GetFlag(FLAGS_allow_insecure_listen);
  for (const std::string& identity : absl::GetFlag(FLAGS_admin_identities)) {
    if (!identity.empty()) options.admin_identities.push_back(identity);
  }
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.store = absl::GetFlag(FLAGS_store);
  options.redis_address = absl::GetFlag(FLAGS_redis_address);
  options.redis_password_file = absl::GetFlag(FLAGS_redis_password_file);
  options.redis_timeout = absl::GetFlag(FLAGS_redis_timeout);
  options.redis_hold_ttl = absl::GetFlag(FLAGS_redis_hold_ttl);
  options.redis_key_prefix = absl::GetFlag(FLAGS_redis_key_prefix);
  options.redis_wait_replicas = absl::GetFlag(FLAGS_redis_wait_replicas);
  options.store_threads = absl::GetFlag(FLAGS_store_threads);
  options.serving_threads = absl::GetFlag(FLAGS_serving_threads);
  options.worker_scheduling = absl::GetFlag(FLAGS_batch_scheduling)
                                  ? ratelimit::WorkerScheduling::kBatch
                                  : ratelimit::WorkerScheduling::kDefault;
  if (options.serving_threads < 0 || options.serving_threads > 256) {
    return Fail("--serving_threads must be 0 (one per CPU) to 256");
  }
  if (options.store_threads < -1 || options.store_threads > 4096) {
    return Fail("--store_threads must be -1 (automatic) or 0 to 4096");
  }
  if (options.store == "redis") {
    if (options.redis_address.empty()) return Fail("--store=redis requires --redis_address");
    if (absl::GetFlag(FLAGS_sync) || absl::GetFlag(FLAGS_salvage_wal)) {
      return Fail("--sync and --salvage_wal apply to --store=rocksdb only");
    }
    if (options.redis_timeout <= absl::ZeroDuration()) {
      return Fail("--redis_timeout must be positive");
    }
    if (options.redis_wait_replicas < 0) return Fail("--redis_wait_replicas must not be negative");
    if (options.redis_hold_ttl < 2 * options.redis_timeout) {
      return Fail(absl::StrCat("--redis_hold_ttl (", absl::FormatDuration(options.redis_hold_ttl),
                               ") must be at least twice --redis_timeout (",
                               absl::FormatDuration(options.redis_timeout), ")"));
    }
  } else if (options.store == "rocksdb") {
    if (!options.redis_address.empty() || !options.redis_password_file.empty() ||
        options.redis_wait_replicas != 0) {
      return Fail(
          "--redis_address, --redis_password_file and --redis_wait_replicas require "
          "--store=redis");
    }
  } else {
    return Fail("--store must be rocksdb or redis");
  }
  options.limits_file = absl::GetFlag(FLAGS_limits_file);
  options.limits_reload_interval = absl::GetFlag(FLAGS_limits_reload_interval);
  options.receipt_key_file = absl::GetFlag(FLAGS_receipt_key_file);
  options.receipt_ttl = absl::GetFlag(FLAGS_receipt_ttl);
  if (options.receipt_ttl <= absl::ZeroDuration() || options.receipt_ttl > absl::Hours(24 * 366)) {
    return Fail("--receipt_ttl must be positive and at most a year");
  }
  options.request_id_ttl = absl::GetFlag(FLAGS_request_id_ttl);
  if (options.request_id_ttl <= absl::ZeroDuration() ||
      options.request_id_ttl > absl::Hours(24 * 366)) {
    return Fail("--request_id_ttl must be positive and at most a year");
  }
  options.sync = absl::GetFlag(FLAGS_sync);
  options.salvage_wal = absl::GetFlag(FLAGS_salvage_wal);
  options.map_wal = absl::GetFlag(FLAGS_wal_mmap);
  const int64_t cache_mb = absl::GetFlag(FLAGS_state_cache_mb);
  if (cache_mb < 0 || cache_mb > (int64_t{1} << 30)) {
    return Fail("--state_cache_mb must be between 0 and 2^30");
  }
  options.state_cache_bytes = static_cast<size_t>(cache_mb) << 20;
  options.gc_interval = absl::GetFlag(FLAGS_gc_interval);
  if (const std::string v = absl::GetFlag(FLAGS_inline_limits); v == "allow") {
    options.inline_limits = ratelimit::InlineLimits::kAllow;
  } else if (v == "deny") {
    options.inline_limits = ratelimit::InlineLimits::kDeny;
  } else {
    return Fail("--inline_limits must be allow or deny");
  }
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  options.envoy_config_dir = absl::GetFlag(FLAGS_envoy_config_dir);
  options.envoy_ratelimit_headers = absl::GetFlag(FLAGS_envoy_ratelimit_headers);
  options.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (options.max_concurrent_streams < 1) return Fail("--max_concurrent_streams must be >= 1");
  const int64_t memory_mb = absl::GetFlag(FLAGS_grpc_memory_limit_mb);
  if (memory_mb < 1 || memory_mb > (int64_t{1} << 40)) {
    return Fail("--grpc_memory_limit_mb must be between 1 and 2^40");
  }
  options.grpc_memory_limit_bytes = memory_mb << 20;
  options.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  if (options.max_connection_idle <= absl::ZeroDuration()) {
    return Fail("--max_connection_idle must be positive (inf: never)");
  }
  options.keepalive_min_ping_interval = absl::GetFlag(FLAGS_keepalive_min_ping_interval);
  if (options.keepalive_min_ping_interval < absl::ZeroDuration()) {
    return Fail("--keepalive_min_ping_interval must not be negative");
  }
  options.keepalive_max_ping_strikes = absl::GetFlag(FLAGS_keepalive_max_ping_strikes);
  if (options.keepalive_max_ping_strikes < 0) {
    return Fail("--keepalive_max_ping_strikes must not be negative");
  }
  const std::string policy = absl::GetFlag(FLAGS_failure_policy);
  if (policy == "closed") {
    options.failure_policy = ratelimit::FailurePolicy::kClosed;
  } else if (policy == "open") {
    options.failure_policy = ratelimit::FailurePolicy::kOpen;
  } else {
    return Fail("--failure_policy must be closed or open");
  }
  absl::StatusOr<std::string> token =
      ratelimit::LoadAdminToken(absl::GetFlag(FLAGS_admin_token_file), "RATELIMIT_ADMIN_TOKEN");
  if (!token.ok()) return Fail(std::string(token.status().message()));
  options.admin_token = *token;
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.metrics_tls_cert_file = absl::GetFlag(FLAGS_metrics_tls_cert_file);
  options.metrics_tls_key_file = absl::GetFlag(FLAGS_metrics_tls_key_file);
  options.health_probe_interval = absl::GetFlag(FLAGS_health_probe_interval);
  // Written as soon as the HTTP endpoint listens, so that /healthz is reachable while starting.
  bool metrics_port_file_ok = true;
  if (const std::string f = absl::GetFlag(FLAGS_metrics_port_file); !f.empty()) {
    options.on_metrics_listening = [f, &metrics_port_file_ok](int port) {
      metrics_port_file_ok = ratelimit::WriteFileAtomically(f, absl::StrCat(port, "\n")).ok();
    };
  }
  if (absl::Status s = ConfigureTracing(options); !s.ok()) return Fail(std::string(s.message()));

  // Signals are taken by sigwait below, not by handlers: block them before any thread starts
  // so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<ratelimit::RateLimitServer>> server =
      ratelimit::RateLimitServer::Start(options);
  if (!server.ok()) return Fail(server.status().ToString());
  if (!metrics_port_file_ok) return Fail("cannot write --metrics_port_file");

  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    if (!ratelimit::WriteFileAtomically(port_file, absl::StrCat((*server)->port(), "\n")).ok()) {
      return Fail(absl::StrCat("cannot write --port_file ", port_file));
    }
  }

  int sig = 0;
  sigwait(&signals, &sig);
  ratelimit::Log(ratelimit::LogLevel::kInfo, "signal received",
                 {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  (*server)->Shutdown();
  return 0;
}
