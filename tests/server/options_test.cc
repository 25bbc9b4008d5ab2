// ValidateServerOptions (server/options.h): every rule, checked once, each refusal naming the
// flag that sets the field.
#include "server/options.h"

#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

// The refusal of the defaults changed by `change`, or OK.
absl::Status With(const std::function<void(ServerOptions&)>& change) {
  ServerOptions o;
  change(o);
  return ValidateServerOptions(o);
}

void ExpectRefusedNaming(const absl::Status& s, absl::string_view flag) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), flag)) << s.message();
}

TEST(OptionsTest, TheDefaultsAreValid) { EXPECT_TRUE(ValidateServerOptions(ServerOptions()).ok()); }

TEST(OptionsTest, ListenRules) {
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.serving_threads = 257; }),
                      "--serving_threads");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.address = "0.0.0.0:1"; }), "--listen");
  EXPECT_TRUE(With([](ServerOptions& o) {
                o.listen.address = "0.0.0.0:1";
                o.listen.allow_insecure = true;
              }).ok());
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.plaintext_address = "10.0.0.1:1"; }),
                      "--plaintext_listen");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.admin.identities = {"spiffe://a/b"}; }),
                      "--admin_identities");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.max_concurrent_streams = 0; }),
                      "--max_concurrent_streams");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.grpc_memory_limit_bytes = 1; }),
                      "--grpc_memory_limit_mb");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.listen.max_connection_idle = absl::ZeroDuration(); }),
      "--max_connection_idle");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.listen.keepalive_min_ping_interval = absl::Seconds(-1); }),
      "--keepalive_min_ping_interval");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.keepalive_max_ping_strikes = -1; }),
                      "--keepalive_max_ping_strikes");
}

// A port past 65535 would be taken modulo 65536 by the socket layer: the server would listen
// elsewhere than its log and port file say.
TEST(OptionsTest, APortPast65535IsRefusedNamingItsFlag) {
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.address = "127.0.0.1:99999"; }),
                      "--listen");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.address = "[::1]:65536"; }), "--listen");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.listen.plaintext_address = "127.0.0.1:70000"; }),
      "--plaintext_listen");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.observability.metrics_listen = "127.0.0.1:65536"; }),
      "--metrics_listen");
  EXPECT_TRUE(With([](ServerOptions& o) { o.listen.address = "127.0.0.1:65535"; }).ok());
  EXPECT_TRUE(With([](ServerOptions& o) { o.listen.address = "[::1]:0"; }).ok());
  EXPECT_TRUE(With([](ServerOptions& o) { o.listen.address = "unix:/tmp/rl.sock"; }).ok());
}

// An interval of zero or less would make its loop spin (the health probe wrote to the data
// directory without pause); a negative grace or collection interval means nothing.
TEST(OptionsTest, IntervalsThatWouldSpinAreRefusedNamingTheirFlag) {
  for (absl::Duration d : {absl::ZeroDuration(), absl::Seconds(-1)}) {
    ExpectRefusedNaming(With([d](ServerOptions& o) { o.store.health_probe_interval = d; }),
                        "--health_probe_interval");
    ExpectRefusedNaming(With([d](ServerOptions& o) { o.limits.reload_interval = d; }),
                        "--limits_reload_interval");
  }
  ExpectRefusedNaming(With([](ServerOptions& o) { o.listen.shutdown_grace = absl::Seconds(-1); }),
                      "--shutdown_grace");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.store.gc_interval = absl::Seconds(-1); }),
                      "--gc_interval");
  // Zero is a setting of its own for these two: no grace, and write-driven collection only.
  EXPECT_TRUE(With([](ServerOptions& o) {
                o.listen.shutdown_grace = absl::ZeroDuration();
                o.store.gc_interval = absl::ZeroDuration();
              }).ok());
}

TEST(OptionsTest, StoreRules) {
  ExpectRefusedNaming(With([](ServerOptions& o) { o.store.threads = -2; }), "--store_threads");
  // A store keeps an expired lease a minute: a sweep less often than twice a minute misses leaks.
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.store.lease_sweep_interval = absl::Seconds(31); }),
      "--lease_sweep_interval");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.store.lease_sweep_interval = absl::Seconds(-1); }),
      "--lease_sweep_interval");
  EXPECT_TRUE(
      With([](ServerOptions& o) { o.store.lease_sweep_interval = absl::ZeroDuration(); }).ok());
  ExpectRefusedNaming(With([](ServerOptions& o) { o.store.open.backend = "sqlite"; }), "--store");
  EXPECT_TRUE(With([](ServerOptions& o) { o.store.open.backend = "memory"; }).ok());
  ExpectRefusedNaming(With([](ServerOptions& o) { o.store.open.backend = "redis"; }),
                      "--redis_address");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.store.open.redis.address = "h:1"; }),
                      "--redis_address, --redis_password_file and --redis_wait_replicas");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.store.open.rocksdb.path.clear(); }),
                      "--data_dir");
  const auto redis = [](ServerOptions& o) {
    o.store.open.backend = "redis";
    o.store.open.redis.address = "127.0.0.1:6379";
  };
  EXPECT_TRUE(With(redis).ok());
  ExpectRefusedNaming(With([&](ServerOptions& o) {
                        redis(o);
                        o.store.open.rocksdb.sync = true;
                      }),
                      "--sync and --salvage_wal");
  ExpectRefusedNaming(With([&](ServerOptions& o) {
                        redis(o);
                        o.store.open.redis.timeout = absl::ZeroDuration();
                      }),
                      "--redis_timeout");
  ExpectRefusedNaming(With([&](ServerOptions& o) {
                        redis(o);
                        o.store.open.redis.hold_ttl = absl::Seconds(1);
                      }),
                      "--redis_hold_ttl");
  ExpectRefusedNaming(With([&](ServerOptions& o) {
                        redis(o);
                        o.store.open.redis.key_prefix = "a{b}";
                      }),
                      "--redis_key_prefix");
  ExpectRefusedNaming(With([&](ServerOptions& o) {
                        redis(o);
                        o.store.open.redis.wait_replicas = -1;
                      }),
                      "--redis_wait_replicas");
}

TEST(OptionsTest, ReceiptAndObservabilityRules) {
  ExpectRefusedNaming(With([](ServerOptions& o) { o.receipts.ttl = absl::ZeroDuration(); }),
                      "--receipt_ttl");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.receipts.request_id_ttl = absl::Hours(24 * 400); }),
      "--request_id_ttl");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.observability.metrics_listen = "nocolon"; }),
                      "--metrics_listen");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.observability.otel_sample_ratio = 1.5; }),
                      "--otel_sample_ratio");
  ExpectRefusedNaming(With([](ServerOptions& o) {
                        o.observability.otel_endpoint = "collector:4317";
                        o.observability.otel_ca_file = "/ca.pem";
                      }),
                      "--otel_ca_file");
}

TEST(OptionsTest, EnvoyReferenceRules) {
  ExpectRefusedNaming(With([](ServerOptions& o) { o.limits.envoy_near_limit_ratio = 0; }),
                      "--envoy_near_limit_ratio");
  ExpectRefusedNaming(With([](ServerOptions& o) { o.limits.envoy_near_limit_ratio = 1.01; }),
                      "--envoy_near_limit_ratio");
  EXPECT_TRUE(With([](ServerOptions& o) { o.limits.envoy_near_limit_ratio = 1; }).ok());
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.limits.envoy_ratelimit_limit_header = "X Limit"; }),
      "--envoy_ratelimit_limit_header");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.limits.envoy_ratelimit_remaining_header = ""; }),
      "--envoy_ratelimit_remaining_header");
  ExpectRefusedNaming(
      With([](ServerOptions& o) { o.limits.envoy_ratelimit_reset_header = "Reset:"; }),
      "--envoy_ratelimit_reset_header");
  EXPECT_TRUE(With([](ServerOptions& o) {
                o.limits.envoy_ratelimit_limit_header = "X-RateLimit-Limit";
              }).ok());
}

}  // namespace
}  // namespace ratelimit
