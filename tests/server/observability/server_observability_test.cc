// The server's traces, metrics and health, observed from outside an in-process server: an
// in-test OTLP collector, scrapes of /metrics (checked exactly and by promtool), /healthz and
// grpc.health.v1. Real-process tests are in observability_process_test.cc.
#include <cstdio>
#include <fstream>
#include <thread>

#include <filesystem>

#include "absl/synchronization/notification.h"
#include "client/cpp/client.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/fake_collector.h"
#include "tests/support/reload_recorder.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeCollector;
using ::ratelimit::testing::GrpcHealth;
using ::ratelimit::testing::HttpGet;
using ::ratelimit::testing::InProcessServerTest;
using ::ratelimit::testing::kApiLimits;
using ::ratelimit::testing::RefusingPort;
using ::ratelimit::testing::ReloadRecorder;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
namespace otlp = ::opentelemetry::proto::trace::v1;

constexpr char kTraceparent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
constexpr char kCallerTraceId[] = "0af7651916cd43dd8448eb211c80319c";

std::string Hex(const std::string& bytes) {
  return ToHex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

const opentelemetry::proto::common::v1::AnyValue* Attr(const otlp::Span& span,
                                                       const std::string& key) {
  for (const auto& kv : span.attributes()) {
    if (kv.key() == key) return &kv.value();
  }
  return nullptr;
}

class TelemetryServerTest : public InProcessServerTest {
 protected:
  void Start(ServerOptions options = {}, std::unique_ptr<StateStore> store = nullptr) {
    options.store.open.rocksdb.path = dir_.File("data");
    options.admin.token = "tok";
    if (options.observability.otel_resource.empty())
      options.observability.otel_resource = {{"service.name", "rl-test"}};
    options.observability.otel_exporter.batch_delay = absl::Milliseconds(10);
    StartServer(std::move(options), std::move(store));
    stub_ = v1::RateLimitService::NewStub(channel_);
  }

  grpc::Status Consume(const std::string& key, const char* traceparent = nullptr,
                       v1::RateLimitResponse* out = nullptr) {
    grpc::ClientContext ctx;
    if (traceparent) {
      ctx.AddMetadata("traceparent", traceparent);
      ctx.AddMetadata("tracestate", "vendor=abc");
    }
    v1::RateLimitResponse response;
    return stub_->Consume(&ctx, MakeRequest("api", key), out ? out : &response);
  }

  std::unique_ptr<v1::RateLimitService::Stub> stub_;
};

// ---- Traces -------------------------------------------------------------------------------

TEST_F(TelemetryServerTest, SpansJoinTheCallersTraceWithAStoreChild) {
  FakeCollector collector;
  ServerOptions o;
  o.observability.otel_endpoint = collector.target();
  o.observability.otel_sample_ratio =
      0;  // new traces are not sampled: only the caller's flag matters
  Start(o);
  ASSERT_TRUE(Consume("u1", kTraceparent).ok());
  ASSERT_TRUE(collector.WaitForSpans(2));
  const auto spans = collector.Spans();
  ASSERT_EQ(spans.size(), 2u);
  const otlp::Span& store = spans[0];
  const otlp::Span& server = spans[1];
  EXPECT_EQ(server.name(), "ratelimit.v1.RateLimitService/Consume");
  EXPECT_EQ(server.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(Hex(server.trace_id()), kCallerTraceId);
  EXPECT_EQ(Hex(server.parent_span_id()), "b7ad6b7169203331");
  EXPECT_EQ(server.trace_state(), "vendor=abc");
  EXPECT_EQ(store.name(), "ratelimit.store/transaction");
  EXPECT_EQ(store.kind(), otlp::Span::SPAN_KIND_INTERNAL);
  EXPECT_EQ(store.trace_id(), server.trace_id());
  EXPECT_EQ(store.parent_span_id(), server.span_id());
  EXPECT_GE(store.start_time_unix_nano(), server.start_time_unix_nano());
  EXPECT_LE(store.end_time_unix_nano(), server.end_time_unix_nano());

  EXPECT_EQ(Attr(server, "rpc.system")->string_value(), "grpc");
  EXPECT_EQ(Attr(server, "rpc.method")->string_value(), "Consume");
  EXPECT_EQ(Attr(server, "ratelimit.limits")->array_value().values(0).string_value(), "api");
  EXPECT_EQ(Attr(server, "ratelimit.counts")->array_value().values(0).double_value(), 1);
  EXPECT_EQ(Attr(server, "ratelimit.decision")->string_value(), "allowed");
  EXPECT_EQ(Attr(server, "ratelimit.values")->array_value().values(0).double_value(), 1);
  EXPECT_EQ(Attr(server, "rpc.grpc.status_code")->int_value(), 0);
  EXPECT_EQ(Attr(server, "ratelimit.keys"), nullptr);  // keys are off by default
  EXPECT_EQ(Attr(server, "ratelimit.retry_after_ms"), nullptr);

  const auto requests = collector.Requests();
  const auto& resource = requests[0].resource_spans(0).resource();
  EXPECT_EQ(resource.attributes(0).key(), "service.name");
  EXPECT_EQ(resource.attributes(0).value().string_value(), "rl-test");
}

TEST_F(TelemetryServerTest, DenialsErrorsKeysAndSamplingRatios) {
  FakeCollector collector;
  ServerOptions o;
  o.observability.otel_endpoint = collector.target();
  o.observability.otel_sample_ratio = 1;
  o.observability.trace_keys = true;
  Start(o);
  ASSERT_TRUE(Consume("u1").ok());
  ASSERT_TRUE(Consume("u1").ok());
  ASSERT_TRUE(Consume("u1").ok());  // denied: rate 2
  EXPECT_FALSE(Consume("").ok());   // INVALID_ARGUMENT
  // An unsampled caller is respected even at ratio 1.
  ASSERT_TRUE(Consume("u2", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00").ok());
  ASSERT_TRUE(collector.WaitForSpans(7));  // 3 x (server + store) + 1 invalid (no store)
  server_->Shutdown();                     // flushes
  std::vector<otlp::Span> servers;
  for (const auto& s : collector.Spans()) {
    if (s.kind() == otlp::Span::SPAN_KIND_SERVER) servers.push_back(s);
  }
  ASSERT_EQ(servers.size(), 4u);
  for (const auto& s : servers) EXPECT_EQ(s.parent_span_id(), "");  // new traces
  EXPECT_EQ(Attr(servers[0], "ratelimit.keys")->array_value().values(0).string_value(), "u1");
  EXPECT_EQ(Attr(servers[2], "ratelimit.decision")->string_value(), "denied");
  EXPECT_NEAR(Attr(servers[2], "ratelimit.retry_after_ms")->double_value(), 500, 1e-6);
  EXPECT_EQ(servers[3].status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(Attr(servers[3], "rpc.grpc.status_code")->int_value(), 3);
  EXPECT_NE(servers[3].status().message().find("limits[0].key"), std::string::npos);
}

TEST_F(TelemetryServerTest, RatioZeroSamplesNoNewTrace) {
  FakeCollector collector;
  ServerOptions o;
  o.observability.otel_endpoint = collector.target();
  o.observability.otel_sample_ratio = 0;
  Start(o);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Consume("k" + std::to_string(i)).ok());
  server_->Shutdown();
  EXPECT_EQ(collector.Spans().size(), 0u);
  EXPECT_EQ(server_->exporter()->stats().dropped, 0u);
}

TEST_F(TelemetryServerTest, RequestsKeepSucceedingWhileTheCollectorIsDown) {
  RefusingPort down;  // the collector: refuses connections
  ServerOptions o;
  o.observability.otel_endpoint = down.target();
  o.observability.otel_exporter.max_queue = 64;
  o.observability.otel_exporter.initial_backoff =
      absl::Seconds(30);  // the exporter is stuck retrying
  o.observability.otel_exporter.max_attempts = 100;
  o.listen.shutdown_grace = absl::Milliseconds(100);
  Start(o);
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(Consume("k" + std::to_string(i)).ok()) << i;
  }
  // 1000 spans: at most one batch in the exporter's hands plus a full queue; the rest dropped.
  EXPECT_GE(server_->exporter()->stats().dropped, 1000u - 64 - 512);
  const std::string metrics = Http("/metrics").second;
  EXPECT_NE(metrics.find("ratelimit_trace_spans_dropped_total "), std::string::npos);
  EXPECT_EQ(metrics.find("ratelimit_trace_spans_dropped_total 0\n"), std::string::npos);
}

// ---- Metrics ------------------------------------------------------------------------------

TEST_F(TelemetryServerTest, MetricsCountKnownTrafficExactly) {
  auto store = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* failing = store.get();
  ServerOptions o;
  o.store.failure_policy = FailurePolicy::kOpen;
  Start(o, std::move(store));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Consume("u1").ok());  // 2 allowed, 1 denied
  {
    grpc::ClientContext ctx;
    v1::RateLimitResponse r;
    ASSERT_TRUE(stub_->Reserve(&ctx, MakeRequest("api", "u2"), &r).ok());  // reserved
  }
  {
    grpc::ClientContext ctx;
    v1::RateLimitResponse r;
    ASSERT_TRUE(stub_->Check(&ctx, MakeRequest("api", "u1"), &r).ok());  // not a decision
  }
  EXPECT_FALSE(Consume("").ok());
  failing->FailWith(absl::UnavailableError("down"));
  ASSERT_TRUE(Consume("u3").ok());  // failed open
  failing->Heal();

  // The health probe (every 10 ms) may have run while the store was failing: ratelimit_up is 1
  // again from the first probe after it heals. Wait for that probe, not for an amount of time.
  ASSERT_TRUE(server_->health().AwaitState(ServingState::kServing, absl::Seconds(60)));
  const auto [scrape_status, text] = Http("/metrics");
  ASSERT_EQ(scrape_status, 200);
  for (const char* line : {
           "ratelimit_decisions_total{limit=\"api\",outcome=\"allowed\"} 2\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"denied\"} 1\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"reserved\"} 1\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"failed_open\"} 1\n",
           "ratelimit_rpcs_total{method=\"Consume\",code=\"OK\"} 4\n",
           "ratelimit_rpcs_total{method=\"Consume\",code=\"INVALID_ARGUMENT\"} 1\n",
           "ratelimit_rpcs_total{method=\"Reserve\",code=\"OK\"} 1\n",
           "ratelimit_rpcs_total{method=\"Check\",code=\"OK\"} 1\n",
           "ratelimit_rpc_duration_seconds_count{method=\"Consume\"} 5\n",
           "ratelimit_store_transaction_duration_seconds_count 6\n",
           "ratelimit_up 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_EQ(text.find("u1"), std::string::npos);  // never a key as a label
  TempDir tmp;
  std::ofstream(tmp.File("scrape.txt")) << text;
  auto [status, out] = RunCommand("promtool check metrics < " + tmp.File("scrape.txt"));
  EXPECT_EQ(status, 0) << out;
}

TEST_F(TelemetryServerTest, ConfigReloadsAndRocksDbGaugesAreExposed) {
  ServerOptions o;
  o.limits.reload_interval = absl::Milliseconds(10);
  ReloadRecorder reloads;
  o.limits.on_config_reload = reloads.Callback();
  Start(o);
  ASSERT_TRUE(Consume("u1").ok());
  WriteFileAtomically(dir_.File("limits.yaml"), "limits: [oops");
  ASSERT_TRUE(reloads.WaitFor("limits", /*ok=*/false));
  EXPECT_NE(
      Http("/metrics")
          .second.find("ratelimit_config_reloads_total{config=\"limits\",result=\"failed\"} 1\n"),
      std::string::npos);
  WriteFileAtomically(dir_.File("limits.yaml"), kApiLimits);
  ASSERT_TRUE(reloads.WaitFor("limits", /*ok=*/true));
  const std::string text = Http("/metrics").second;
  EXPECT_NE(text.find("ratelimit_config_reloads_total{config=\"limits\",result=\"ok\"} 1\n"),
            std::string::npos)
      << text;
  for (const char* name :
       {"ratelimit_store_live_states ", "ratelimit_rocksdb_pending_compaction_bytes ",
        "ratelimit_rocksdb_memtable_bytes ", "ratelimit_rocksdb_write_stopped 0\n",
        "ratelimit_trace_export_queue_spans 0\n"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

TEST_F(TelemetryServerTest, EnvoyCallsAreTracedAndCounted) {
  FakeCollector collector;
  std::filesystem::create_directories(dir_.File("envoy"));
  WriteFileAtomically(dir_.File("envoy/edge.yaml"), R"(domain: edge
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: bot
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
)");
  ServerOptions o;
  o.limits.envoy_config_dir = dir_.File("envoy");
  o.observability.otel_endpoint = collector.target();
  o.limits.reload_interval = absl::Milliseconds(10);
  ReloadRecorder reloads;
  o.limits.on_config_reload = reloads.Callback();
  Start(o);
  auto envoy = ::envoy::service::ratelimit::v3::RateLimitService::NewStub(channel_);
  auto call = [&](const char* key, const char* value, const char* domain = "edge") {
    grpc::ClientContext ctx;
    ctx.AddMetadata("traceparent", kTraceparent);
    ::envoy::service::ratelimit::v3::RateLimitRequest req;
    req.set_domain(domain);
    auto* e = req.add_descriptors()->add_entries();
    e->set_key(key);
    e->set_value(value);
    ::envoy::service::ratelimit::v3::RateLimitResponse resp;
    EXPECT_TRUE(envoy->ShouldRateLimit(&ctx, req, &resp).ok());
    return resp.overall_code();
  };
  using Code = ::envoy::service::ratelimit::v3::RateLimitResponse;
  EXPECT_EQ(call("user", "u1"), Code::OK);
  EXPECT_EQ(call("user", "u1"), Code::OVER_LIMIT);
  EXPECT_EQ(call("bot", "b1"), Code::OK);
  EXPECT_EQ(call("bot", "b1"), Code::OK);  // over, but shadow mode
  ASSERT_TRUE(collector.WaitForSpans(8));
  const auto spans = collector.Spans();
  const otlp::Span& server = spans[1];
  EXPECT_EQ(server.name(), "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
  EXPECT_EQ(server.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(Hex(server.trace_id()), kCallerTraceId);
  EXPECT_EQ(Attr(server, "ratelimit.domain")->string_value(), "edge");
  EXPECT_EQ(spans[0].parent_span_id(), server.span_id());
  EXPECT_EQ(Attr(spans[3], "ratelimit.decision")->string_value(), "denied");
  // A domain the configuration lacks (misspelt in Envoy's): OK with no limit, and counted.
  EXPECT_EQ(call("user", "u1", "egde"), Code::OK);

  WriteFileAtomically(dir_.File("envoy/edge.yaml"), "domain: edge\nbogus: 1\n");
  ASSERT_TRUE(reloads.WaitFor("envoy", /*ok=*/false));
  const std::string text = Http("/metrics").second;
  for (const char* line : {
           "ratelimit_config_reloads_total{config=\"envoy\",result=\"failed\"} 1\n",
           "ratelimit_rpcs_total{method=\"ShouldRateLimit\",code=\"OK\"} 5\n",
           "ratelimit_envoy_domain_not_found_total{domain=\"egde\"} 1\n",
           "ratelimit_decisions_total{limit=\"edge.user\",outcome=\"allowed\"} 1\n",
           "ratelimit_decisions_total{limit=\"edge.user\",outcome=\"denied\"} 1\n",
           "ratelimit_decisions_total{limit=\"edge.bot\",outcome=\"shadow_denied\"} 1\n",
           "ratelimit_envoy_rule_hits_total{rule=\"edge.bot\",result=\"shadow_mode\"} 1\n",
           "ratelimit_envoy_rule_hits_total{rule=\"edge.user\",result=\"over_limit\"} 1\n",
           "ratelimit_envoy_rule_hits_total{rule=\"edge.user\",result=\"total\"} 2\n",
           "ratelimit_envoy_rule_hits_total{rule=\"edge.user\",result=\"near_limit\"} 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

// ---- Health -------------------------------------------------------------------------------

TEST_F(TelemetryServerTest, HealthFollowsTheStore) {
  auto store = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* failing = store.get();
  Start({}, std::move(store));
  using HS = grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(GrpcHealth(channel_), HS::SERVING);
  EXPECT_EQ(Http("/healthz"), std::make_pair(200, std::string("SERVING\n")));
  failing->FailWith(absl::UnavailableError("disk gone"));
  ASSERT_TRUE(server_->health().AwaitState(ServingState::kStoreFailing, absl::Seconds(60)));
  EXPECT_EQ(GrpcHealth(channel_), HS::NOT_SERVING);
  EXPECT_EQ(Http("/healthz"), std::make_pair(503, std::string("STORE_FAILING\n")));
  failing->Heal();
  ASSERT_TRUE(server_->health().AwaitState(ServingState::kServing, absl::Seconds(60)));
  EXPECT_EQ(GrpcHealth(channel_), HS::SERVING);
  EXPECT_EQ(Http("/healthz").first, 200);
}

// A store whose calls wait while its gate is closed: a store that is slow to come up, or a
// call held in flight.
class GatedStore final : public StateStore {
 public:
  absl::string_view backend_name() const override { return "gated"; }
  void CloseGate() {
    absl::MutexLock l(&mu_);
    open_ = false;
  }
  void OpenGate() {
    absl::MutexLock l(&mu_);
    open_ = true;
  }
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override {
    Wait();
    return inner_.Update(keys, decide);
  }
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override {
    Wait();
    return inner_.Get(key);
  }
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override { return inner_.Delete(key); }
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override {
    return inner_.DeleteAll(source, name);
  }
  // Blocks until `n` calls wait at the gate; false when they do not within `timeout`.
  bool AwaitWaiting(int n, absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock l(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ == n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  void Wait() {
    absl::MutexLock l(&mu_);
    ++waiting_;
    mu_.Await(absl::Condition(&open_));
    --waiting_;
  }
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  MemoryStateStore inner_;
};

TEST_F(TelemetryServerTest, HealthGoesStartingServingDraining) {
  auto store = std::make_unique<GatedStore>();
  GatedStore* gate = store.get();
  gate->CloseGate();  // the start-up probe waits: the server is "starting"
  WriteFileAtomically(dir_.File("limits.yaml"), kApiLimits);
  ServerOptions o;
  o.listen.address = "127.0.0.1:0";
  o.observability.metrics_listen = "127.0.0.1:0";
  o.limits.file = dir_.File("limits.yaml");
  o.listen.shutdown_grace = absl::Seconds(60);
  o.store.health_probe_interval = absl::Hours(1);  // only the start-up probe touches the gate
  std::atomic<int> metrics_port{0};
  absl::Notification listening;
  o.observability.on_metrics_listening = [&](int port) {
    metrics_port = port;
    listening.Notify();
  };
  absl::StatusOr<std::unique_ptr<RateLimitServer>> started;
  std::thread starter([&] { started = RateLimitServer::Start(o, clock_, std::move(store)); });
  ASSERT_TRUE(listening.WaitForNotificationWithTimeout(absl::Seconds(60)));
  auto healthz = [&] { return HttpGet(metrics_port.load(), "/healthz"); };
  EXPECT_EQ(healthz(), std::make_pair(503, std::string("STARTING\n")));
  gate->OpenGate();
  starter.join();
  ASSERT_OK(started);
  EXPECT_EQ(healthz(), std::make_pair(200, std::string("SERVING\n")));

  // Hold one call in flight, then shut down: DRAINING until it finishes, and it does finish.
  auto client = RateLimitClient::Connect("127.0.0.1:" + std::to_string((*started)->port()),
                                         ClientOptions{absl::Seconds(60), ""});
  gate->CloseGate();
  absl::StatusOr<v1::RateLimitResponse> in_flight;
  std::thread caller([&] { in_flight = client->Consume(MakeRequest("api", "u1")); });
  ASSERT_TRUE(gate->AwaitWaiting(1));  // inside the store
  std::thread stopper([&] { (*started)->Shutdown(); });
  ASSERT_TRUE((*started)->health().AwaitState(ServingState::kDraining, absl::Seconds(60)));
  EXPECT_EQ(healthz(), std::make_pair(503, std::string("DRAINING\n")));
  gate->OpenGate();
  stopper.join();
  caller.join();
  ASSERT_OK(in_flight);
  EXPECT_TRUE(in_flight->allowed());
}

}  // namespace
}  // namespace ratelimit
