// What the handlers report about a call (server/observability/telemetry.cc), observed on a
// metrics registry and a span sink: no gRPC server.
#include "server/observability/telemetry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "opentelemetry/proto/trace/v1/trace.pb.h"
#include "server/observability/metrics.h"
#include "server/observability/tracer.h"
#include "tests/support/collecting_sink.h"

namespace ratelimit {
namespace {

namespace otlp = ::opentelemetry::proto::trace::v1;
using ::ratelimit::testing::CollectingSink;

const opentelemetry::proto::common::v1::AnyValue* Attr(const otlp::Span& span,
                                                       const std::string& key) {
  for (const auto& kv : span.attributes()) {
    if (kv.key() == key) return &kv.value();
  }
  return nullptr;
}

std::vector<LimitRequest> Limits() {
  LimitRequest a;
  a.name = "api";
  a.key = "u1";
  a.count = 2;
  LimitRequest b;
  b.name = "db";
  b.key = "u2";
  return {a, b};
}

Verdict Denied() {
  Verdict v;
  v.allowed = false;
  v.decisions.resize(2);
  v.decisions[0].allowed = true;
  v.decisions[0].value = 3;
  v.decisions[1].value = 0.5;
  v.denied_by = 1;
  v.now_us = 1000000;
  v.retry_at_us = 1250000;
  return v;
}

Verdict Allowed() {
  Verdict v;
  v.allowed = true;
  v.decisions.resize(2);
  return v;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(TelemetryTest, DecisionsAreCountedByLimitAndOutcome) {
  MetricsRegistry registry;
  ServerMetrics metrics(registry);
  Telemetry telemetry(&metrics, nullptr, false, "memory");
  const std::vector<LimitRequest> limits = Limits();
  grpc::CallbackServerContext context;
  const std::pair<Mode, Verdict> calls[] = {
      {Mode::kConsume, Allowed()},
      {Mode::kConsume, Denied()},
      {Mode::kReserve, Allowed()},
      {Mode::kCheck, Allowed()},  // a check decides nothing
  };
  for (const auto& [mode, verdict] : calls) {
    Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
    rpc.SetLimits(limits);
    rpc.SetVerdict(verdict, mode);
    rpc.Finish(grpc::Status::OK);
  }
  {
    Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
    rpc.SetLimits(limits);
    rpc.SetFailedOpen();
    rpc.Finish(grpc::Status::OK);
  }
  {
    Telemetry::Rpc rpc =
        telemetry.StartRpc("svc", "ShouldRateLimit", "svc/ShouldRateLimit", context);
    rpc.RecordDecision("edge.user", "shadow_denied");
    rpc.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad"));
  }
  const std::string text = registry.Render();
  for (const char* line : {
           "ratelimit_decisions_total{limit=\"api\",outcome=\"allowed\"} 1\n",
           "ratelimit_decisions_total{limit=\"db\",outcome=\"allowed\"} 1\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"denied\"} 1\n",
           "ratelimit_decisions_total{limit=\"db\",outcome=\"denied\"} 1\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"reserved\"} 1\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"failed_open\"} 1\n",
           "ratelimit_decisions_total{limit=\"db\",outcome=\"failed_open\"} 1\n",
           "ratelimit_decisions_total{limit=\"edge.user\",outcome=\"shadow_denied\"} 1\n",
           "ratelimit_rpcs_total{method=\"Consume\",code=\"OK\"} 5\n",
           "ratelimit_rpcs_total{method=\"ShouldRateLimit\",code=\"INVALID_ARGUMENT\"} 1\n",
           "ratelimit_rpc_duration_seconds_count{method=\"Consume\"} 5\n",
       }) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
  EXPECT_FALSE(Has(text, "u1"));  // never a key as a label
}

TEST(TelemetryTest, TheStoreTransactionIsTimedAndAChildSpan) {
  MetricsRegistry registry;
  ServerMetrics metrics(registry);
  CollectingSink sink;
  Tracer tracer(TracerOptions{1.0}, sink);
  Telemetry telemetry(&metrics, &tracer, false, "rocksdb");
  grpc::CallbackServerContext context;
  {
    Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
    rpc.StoreStarted();
    rpc.StoreFinished(absl::UnavailableError("disk gone"));
    rpc.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "store unavailable"));
  }
  EXPECT_EQ(metrics.store_seconds.With({}).Read().count, 1u);
  ASSERT_EQ(sink.spans.size(), 2u);
  const otlp::Span& store = sink.spans[0];
  const otlp::Span& server = sink.spans[1];
  EXPECT_EQ(store.name(), "ratelimit.store/transaction");
  EXPECT_EQ(store.kind(), otlp::Span::SPAN_KIND_INTERNAL);
  EXPECT_EQ(store.parent_span_id(), server.span_id());
  EXPECT_EQ(Attr(store, "db.system")->string_value(), "rocksdb");
  EXPECT_EQ(store.status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(store.status().message(), "disk gone");
  EXPECT_EQ(server.status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(server.status().message(), "store unavailable");
  EXPECT_EQ(Attr(server, "rpc.grpc.status_code")->int_value(), 14);
}

TEST(TelemetryTest, TheServerSpanDescribesTheCallAndItsVerdict) {
  CollectingSink sink;
  Tracer tracer(TracerOptions{1.0}, sink);
  Telemetry telemetry(nullptr, &tracer, false, "memory");
  const std::vector<LimitRequest> limits = Limits();
  grpc::CallbackServerContext context;
  {
    Telemetry::Rpc rpc = telemetry.StartRpc("svc.V1", "Reserve", "svc.V1/Reserve", context);
    EXPECT_EQ(rpc.TraceId().size(), 32u);
    rpc.SetLimits(limits);
    rpc.SetVerdict(Denied(), Mode::kReserve);
    rpc.Finish(grpc::Status::OK);
  }
  ASSERT_EQ(sink.spans.size(), 1u);
  const otlp::Span& s = sink.spans[0];
  EXPECT_EQ(s.name(), "svc.V1/Reserve");
  EXPECT_EQ(s.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(Attr(s, "rpc.system")->string_value(), "grpc");
  EXPECT_EQ(Attr(s, "rpc.service")->string_value(), "svc.V1");
  EXPECT_EQ(Attr(s, "rpc.method")->string_value(), "Reserve");
  const auto& names = Attr(s, "ratelimit.limits")->array_value();
  ASSERT_EQ(names.values_size(), 2);
  EXPECT_EQ(names.values(0).string_value(), "api");
  EXPECT_EQ(names.values(1).string_value(), "db");
  const auto& counts = Attr(s, "ratelimit.counts")->array_value();
  EXPECT_EQ(counts.values(0).double_value(), 2);
  EXPECT_EQ(counts.values(1).double_value(), 1);
  EXPECT_EQ(Attr(s, "ratelimit.keys"), nullptr);  // keys only when asked for
  EXPECT_EQ(Attr(s, "ratelimit.mode")->string_value(), "reserve");
  EXPECT_EQ(Attr(s, "ratelimit.decision")->string_value(), "denied");
  const auto& values = Attr(s, "ratelimit.values")->array_value();
  EXPECT_EQ(values.values(0).double_value(), 3);
  EXPECT_EQ(values.values(1).double_value(), 0.5);
  EXPECT_EQ(Attr(s, "ratelimit.denied_by")->int_value(), 1);
  EXPECT_DOUBLE_EQ(Attr(s, "ratelimit.retry_after_ms")->double_value(), 250);
  EXPECT_EQ(Attr(s, "rpc.grpc.status_code")->int_value(), 0);
  EXPECT_NE(s.status().code(), otlp::Status::STATUS_CODE_ERROR);
}

TEST(TelemetryTest, KeysAreRecordedOnlyWhenEnabled) {
  CollectingSink sink;
  Tracer tracer(TracerOptions{1.0}, sink);
  Telemetry telemetry(nullptr, &tracer, /*record_keys=*/true, "memory");
  EXPECT_TRUE(telemetry.record_keys());
  const std::vector<LimitRequest> limits = Limits();
  grpc::CallbackServerContext context;
  {
    Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
    rpc.SetLimits(limits);
    rpc.SetVerdict(Allowed(), Mode::kConsume);
    rpc.Finish(grpc::Status::OK);
  }
  ASSERT_EQ(sink.spans.size(), 1u);
  const auto& keys = Attr(sink.spans[0], "ratelimit.keys")->array_value();
  ASSERT_EQ(keys.values_size(), 2);
  EXPECT_EQ(keys.values(0).string_value(), "u1");
  EXPECT_EQ(keys.values(1).string_value(), "u2");
  EXPECT_EQ(Attr(sink.spans[0], "ratelimit.decision")->string_value(), "allowed");
  EXPECT_EQ(Attr(sink.spans[0], "ratelimit.denied_by"), nullptr);
  EXPECT_EQ(Attr(sink.spans[0], "ratelimit.retry_after_ms"), nullptr);
}

TEST(TelemetryTest, EnvoyCallsNameTheirLimitsAndDecision) {
  CollectingSink sink;
  Tracer tracer(TracerOptions{1.0}, sink);
  Telemetry telemetry(nullptr, &tracer, false, "memory");
  grpc::CallbackServerContext context;
  {
    Telemetry::Rpc rpc =
        telemetry.StartRpc("envoy", "ShouldRateLimit", "envoy/ShouldRateLimit", context);
    const std::vector<absl::string_view> names = {"edge.user", "edge.bot"};
    rpc.SetLimitNames(names);
    rpc.SetDecision(false);
    rpc.SetFailedOpen();
    rpc.Finish(grpc::Status::OK);
  }
  ASSERT_EQ(sink.spans.size(), 1u);
  const otlp::Span& s = sink.spans[0];
  EXPECT_EQ(Attr(s, "ratelimit.limits")->array_value().values(1).string_value(), "edge.bot");
  EXPECT_EQ(Attr(s, "ratelimit.decision")->string_value(), "denied");
  EXPECT_TRUE(Attr(s, "ratelimit.failed_open")->bool_value());
}

TEST(TelemetryTest, WithNeitherMetricsNorTracerNothingIsRecorded) {
  Telemetry telemetry(nullptr, nullptr, false, "memory");
  const std::vector<LimitRequest> limits = Limits();
  grpc::CallbackServerContext context;
  Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
  rpc.SetLimits(limits);
  rpc.StoreStarted();
  rpc.StoreFinished(absl::OkStatus());
  rpc.SetVerdict(Denied(), Mode::kConsume);
  rpc.RecordDecision("api", "denied");
  EXPECT_FALSE(rpc.span().recording());
  EXPECT_EQ(rpc.TraceId(), "");
  rpc.Finish(grpc::Status::OK);
}

}  // namespace
}  // namespace ratelimit
