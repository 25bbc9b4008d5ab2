// Trace context parsing, sampling, the OTLP exporter against an in-test collector, and the
// Prometheus exposition (checked by promtool).
#include <cstdio>
#include <cstring>
#include <fstream>

#include "gtest/gtest.h"
#include "server/observability/metrics.h"
#include "server/observability/otlp_encoder.h"
#include "server/observability/otlp_exporter.h"
#include "server/observability/trace_context.h"
#include "server/observability/tracer.h"
#include "tests/support/collecting_sink.h"
#include "tests/support/fake_collector.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeCollector;
using ::ratelimit::testing::TempDir;

constexpr char kParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceContextTest, ParsesAValidTraceparent) {
  auto ctx = ParseTraceparent(kParent);
  ASSERT_TRUE(ctx.has_value());
  EXPECT_EQ(ToHex(ctx->trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(ToHex(ctx->span_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_TRUE(ctx->sampled());
  EXPECT_EQ(FormatTraceparent(ctx->trace_id, ctx->span_id, ctx->flags), kParent);
  // A future version may append fields.
  EXPECT_TRUE(ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra")
                  .has_value());
}

TEST(TraceContextTest, RejectsInvalidTraceparents) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // v00 with extra
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
       }) {
    EXPECT_FALSE(ParseTraceparent(bad).has_value()) << bad;
  }
}

namespace otlp = ::opentelemetry::proto::trace::v1;
using ::ratelimit::testing::CollectingSink;

std::string Bytes(const uint8_t* p, size_t n) {
  return std::string(reinterpret_cast<const char*>(p), n);
}

TEST(TracerTest, JoinsTheCallersTraceAndFollowsItsSampledFlag) {
  CollectingSink sink;
  Tracer tracer(TracerOptions{0.0}, sink);  // ratio 0: only the parent's flag matters
  auto parent = ParseTraceparent(kParent);
  parent->trace_state = "vendor=1";
  {
    Span span = tracer.StartServerSpan("svc/Consume", parent);
    ASSERT_TRUE(span.recording());
    Span child = span.StartChild("store");
    child.End();
  }
  ASSERT_EQ(sink.spans.size(), 2u);
  const otlp::Span& child = sink.spans[0];
  const otlp::Span& server = sink.spans[1];
  EXPECT_EQ(server.name(), "svc/Consume");
  EXPECT_EQ(server.trace_id(), Bytes(parent->trace_id.data(), 16));
  EXPECT_EQ(server.parent_span_id(), Bytes(parent->span_id.data(), 8));
  EXPECT_EQ(server.trace_state(), "vendor=1");
  EXPECT_EQ(server.flags(), 1u);
  EXPECT_EQ(server.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(child.name(), "store");
  EXPECT_EQ(child.trace_id(), server.trace_id());
  EXPECT_EQ(child.parent_span_id(), server.span_id());
  EXPECT_EQ(child.kind(), otlp::Span::SPAN_KIND_INTERNAL);
  EXPECT_NE(child.span_id(), server.span_id());
  EXPECT_LE(server.start_time_unix_nano(), child.start_time_unix_nano());
  EXPECT_GE(server.end_time_unix_nano(), child.end_time_unix_nano());

  auto unsampled = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  Tracer always(TracerOptions{1.0}, sink);
  EXPECT_FALSE(always.StartServerSpan("x", unsampled).recording());
}

TEST(TracerTest, RatioSamplesNewTraces) {
  CollectingSink sink;
  Tracer none(TracerOptions{0.0}, sink), all(TracerOptions{1.0}, sink),
      tenth(TracerOptions{0.1}, sink);
  for (int i = 0; i < 10000; ++i) {
    EXPECT_FALSE(none.StartServerSpan("x", std::nullopt).recording());
    Span a = all.StartServerSpan("x", std::nullopt);
    EXPECT_TRUE(a.recording());
  }
  // A new trace is a root span with the sampled flag.
  EXPECT_TRUE(sink.spans.back().parent_span_id().empty());
  EXPECT_EQ(sink.spans.back().flags(), 1u);
  // Whatever ids the tracer draws, it keeps exactly the traces the ratio sampler picks.
  sink.spans.clear();
  for (int i = 0; i < 1000; ++i) tenth.StartServerSpan("x", std::nullopt).End();
  for (const otlp::Span& s : sink.spans) {
    TraceId id;
    ASSERT_EQ(s.trace_id().size(), id.size());
    std::memcpy(id.data(), s.trace_id().data(), id.size());
    EXPECT_TRUE(TraceIdRatioSampled(id, 0.1)) << ToHex(id.data(), id.size());
  }
}

TEST(TracerTest, TheRatioSamplerKeepsThatShareOfTraceIds) {
  // 10,000 trace ids spread evenly over the low 8 bytes (the middle of each of 10,000 equal
  // slices): a ratio keeps exactly its share.
  auto id_at = [](uint64_t low) {
    TraceId id{};
    id[0] = 0xab;  // the high bytes play no part
    for (int i = 15; i >= 8; --i, low >>= 8) id[i] = static_cast<uint8_t>(low);
    return id;
  };
  const uint64_t step = ~uint64_t{0} / 10000;
  for (double ratio : {0.0, 0.1, 0.25, 1.0}) {
    int sampled = 0;
    for (uint64_t i = 0; i < 10000; ++i)
      sampled += TraceIdRatioSampled(id_at(i * step + step / 2), ratio);
    EXPECT_EQ(sampled, static_cast<int>(ratio * 10000)) << ratio;
  }
  EXPECT_TRUE(TraceIdRatioSampled(id_at(0), 0.001));
  EXPECT_FALSE(TraceIdRatioSampled(id_at(~uint64_t{0}), 0.999));
  EXPECT_TRUE(TraceIdRatioSampled(id_at(~uint64_t{0}), 1.0));
  EXPECT_FALSE(TraceIdRatioSampled(id_at(0), 0.0));
  // Big-endian: the last byte is the least significant.
  TraceId small{}, large{};
  small[15] = 0xff;
  large[8] = 0x01;
  EXPECT_TRUE(TraceIdRatioSampled(small, 1e-15));
  EXPECT_FALSE(TraceIdRatioSampled(large, 1.0 / 512));
}

TEST(TracerTest, EveryAttributeTypeAndTheErrorStatusDecode) {
  CollectingSink sink;
  Tracer tracer(TracerOptions{1.0}, sink);
  {
    Span span = tracer.StartServerSpan("svc/Method", std::nullopt);
    const std::string long_name(200, 'y');
    const std::vector<absl::string_view> names = {"x", long_name};
    const std::vector<double> values = {1, -0.5};
    span.SetAttribute("s", std::string("text"));
    span.SetAttribute("lit", "literal");
    span.SetAttribute("i", int64_t{-42});
    span.SetAttribute("big", int64_t{1} << 40);
    span.SetAttribute("d", 2.5);
    span.SetAttribute("b", true);
    span.SetAttribute("sa", absl::MakeConstSpan(names));
    span.SetAttribute("da", absl::MakeConstSpan(values));
    span.SetAttribute("long", std::string(300, 'z'));
    span.SetError("it broke");
  }
  ASSERT_EQ(sink.spans.size(), 1u);
  const otlp::Span& span = sink.spans[0];
  ASSERT_EQ(span.attributes_size(), 9);
  EXPECT_EQ(span.attributes(0).key(), "s");
  EXPECT_EQ(span.attributes(0).value().string_value(), "text");
  EXPECT_EQ(span.attributes(1).value().string_value(), "literal");
  EXPECT_EQ(span.attributes(2).value().int_value(), -42);
  EXPECT_EQ(span.attributes(3).value().int_value(), int64_t{1} << 40);
  EXPECT_EQ(span.attributes(4).value().double_value(), 2.5);
  EXPECT_TRUE(span.attributes(5).value().bool_value());
  EXPECT_EQ(span.attributes(6).value().array_value().values(0).string_value(), "x");
  EXPECT_EQ(span.attributes(6).value().array_value().values(1).string_value(),
            std::string(200, 'y'));
  EXPECT_EQ(span.attributes(7).value().array_value().values(1).double_value(), -0.5);
  EXPECT_EQ(span.attributes(8).value().string_value(), std::string(300, 'z'));
  EXPECT_EQ(span.status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(span.status().message(), "it broke");
  EXPECT_GT(span.end_time_unix_nano(), 0u);
}

// An encoded span as the tracer makes them.
std::string MakeSpan(int i) {
  std::string out;
  struct Keep final : SpanSink {
    std::string* out;
    void Submit(std::string s) override { *out = std::move(s); }
  } keep;
  keep.out = &out;
  Tracer tracer(TracerOptions{1.0}, keep);
  Span span = tracer.StartServerSpan("test/span", std::nullopt);
  const std::vector<absl::string_view> limits = {"api"};
  span.SetAttribute("ratelimit.limits", absl::MakeConstSpan(limits));
  span.SetAttribute("n", int64_t{i});
  span.End();
  return out;
}

TEST(OtlpEncoderTest, OutputParsesAsTheGeneratedExportRequest) {
  const std::string bytes = EncodeExportRequest({{"service.name", "svc"}, {"host.name", "h1"}},
                                                "scope", {MakeSpan(1), MakeSpan(2)});
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  ASSERT_EQ(req.resource_spans_size(), 1);
  const auto& rs = req.resource_spans(0);
  ASSERT_EQ(rs.resource().attributes_size(), 2);
  EXPECT_EQ(rs.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(rs.resource().attributes(1).value().string_value(), "h1");
  ASSERT_EQ(rs.scope_spans_size(), 1);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "scope");
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 2);
  EXPECT_EQ(rs.scope_spans(0).spans(1).name(), "test/span");
  EXPECT_EQ(rs.scope_spans(0).spans(1).attributes(1).value().int_value(), 2);
  // Empty inputs still make a valid request.
  ASSERT_TRUE(req.ParseFromString(EncodeExportRequest({}, "", {})));
}

TEST(OtlpExporterTest, DeliversBatchesWithResourceAndScope) {
  FakeCollector collector;
  OtlpExporterOptions o;
  o.endpoint = "http://" + collector.target();
  o.resource = {{"service.name", "ratelimit-test"}};
  o.max_batch = 10;
  o.batch_delay = absl::Milliseconds(20);
  OtlpExporter exporter(o);
  for (int i = 0; i < 25; ++i) exporter.Submit(MakeSpan(i));
  ASSERT_TRUE(collector.WaitForSpans(25));
  exporter.Shutdown();
  const auto requests = collector.Requests();
  EXPECT_GE(requests.size(), 3u);  // batches of at most 10
  for (const auto& r : requests) {
    ASSERT_EQ(r.resource_spans_size(), 1);
    const auto& rs = r.resource_spans(0);
    EXPECT_EQ(rs.resource().attributes(0).key(), "service.name");
    EXPECT_EQ(rs.resource().attributes(0).value().string_value(), "ratelimit-test");
    EXPECT_EQ(rs.scope_spans(0).scope().name(), "ratelimit");
    EXPECT_LE(rs.scope_spans(0).spans_size(), 10);
  }
  const auto spans = collector.Spans();
  EXPECT_EQ(spans[0].kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(spans[0].trace_id().size(), 16u);
  EXPECT_EQ(spans[0].span_id().size(), 8u);
  EXPECT_EQ(spans[0].attributes(0).value().array_value().values(0).string_value(), "api");
  EXPECT_EQ(exporter.stats().exported, 25u);
  EXPECT_EQ(exporter.stats().dropped, 0u);
}

TEST(OtlpExporterTest, AFullBatchIsSentWithoutWaitingForTheDelay) {
  FakeCollector collector;
  OtlpExporterOptions o;
  o.endpoint = collector.target();
  o.max_batch = 4;
  o.batch_delay = absl::Hours(1);  // only a full batch wakes the exporter before shutdown
  OtlpExporter exporter(o);
  // Each batch is submitted once the exporter has sent the one before and gone back to waiting,
  // so it is the batch filling up that wakes it.
  for (int b = 0; b < 3; ++b) {
    for (int i = 4 * b; i < 4 * b + 4; ++i) exporter.Submit(MakeSpan(i));
    ASSERT_TRUE(collector.WaitForSpans(4 * b + 4)) << "batch " << b;
  }
  exporter.Submit(MakeSpan(12));  // a partial batch waits for the delay (here: the shutdown)
  EXPECT_EQ(exporter.stats().queued, 1u);
  exporter.Shutdown();
  const auto requests = collector.Requests();
  ASSERT_EQ(requests.size(), 4u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(requests[r].resource_spans(0).scope_spans(0).spans_size(), 4);
  }
  const auto spans = collector.Spans();
  ASSERT_EQ(spans.size(), 13u);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(spans[i].attributes(1).value().int_value(), i);
}

TEST(OtlpExporterTest, RetriesWithBackoffWhileTheCollectorFails) {
  FakeCollector collector;
  collector.FailNext(2);
  OtlpExporterOptions o;
  o.endpoint = collector.target();
  o.batch_delay = absl::Milliseconds(10);
  o.initial_backoff = absl::Milliseconds(10);
  OtlpExporter exporter(o);
  exporter.Submit(MakeSpan(0));
  ASSERT_TRUE(collector.WaitForSpans(1));
  exporter.Shutdown();  // joins the exporter thread, so its counters are final
  EXPECT_EQ(collector.calls(), 3);
  EXPECT_EQ(exporter.stats().failed_exports, 2u);
  EXPECT_EQ(exporter.stats().exported, 1u);
}

TEST(OtlpExporterTest, ACollectorThatIsDownNeverBlocksSubmitAndDropsAreCounted) {
  // Nothing listens on the endpoint: a port held by the test that refuses connections.
  ::ratelimit::testing::RefusingPort down;
  OtlpExporterOptions o;
  o.endpoint = down.target();
  o.max_queue = 100;
  o.max_batch = 50;
  o.batch_delay = absl::Milliseconds(5);
  o.initial_backoff = absl::Milliseconds(5);
  o.max_attempts = 2;
  OtlpExporter exporter(o);
  for (int i = 0; i < 10000; ++i) exporter.Submit(MakeSpan(i));  // returns at once each time
  exporter.Shutdown(absl::Milliseconds(200));
  const auto s = exporter.stats();
  EXPECT_EQ(s.exported, 0u);
  EXPECT_EQ(s.dropped, 10000u);  // every span accounted for: queue overflow or failed batches
  EXPECT_EQ(s.queued, 0u);
}

TEST(OtlpExporterTest, ShutdownFlushesWhatIsQueued) {
  FakeCollector collector;
  OtlpExporterOptions o;
  o.endpoint = collector.target();
  o.batch_delay = absl::Hours(1);  // only the shutdown flush can send these
  OtlpExporter exporter(o);
  for (int i = 0; i < 7; ++i) exporter.Submit(MakeSpan(i));
  exporter.Shutdown();
  EXPECT_EQ(collector.Spans().size(), 7u);
  exporter.Submit(MakeSpan(8));  // after shutdown: dropped, not sent
  EXPECT_EQ(exporter.stats().dropped, 1u);
}

// ---- Metrics ------------------------------------------------------------------------------

TEST(MetricsTest, RendersCountersHistogramsAndGaugesExactly) {
  MetricsRegistry r;
  auto& c = r.AddCounter("x_total", "Things.", {"limit", "outcome"});
  c.With({"api", "allowed"}).Increment(3);
  c.With({"a\"b\\c", "denied"}).Increment();
  auto& h = r.AddHistogram("x_seconds", "Latency.", {}, {0.1, 1});
  h.With({}).Observe(0.05);
  h.With({}).Observe(0.5);
  h.With({}).Observe(5);
  r.AddGauge("x_live", "Live.", [] { return 42.0; });
  EXPECT_EQ(r.Render(),
            "# HELP x_total Things.\n"
            "# TYPE x_total counter\n"
            "x_total{limit=\"a\\\"b\\\\c\",outcome=\"denied\"} 1\n"
            "x_total{limit=\"api\",outcome=\"allowed\"} 3\n"
            "# HELP x_seconds Latency.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.1\"} 1\n"
            "x_seconds_bucket{le=\"1\"} 2\n"
            "x_seconds_bucket{le=\"+Inf\"} 3\n"
            "x_seconds_sum 5.55\n"
            "x_seconds_count 3\n"
            "# HELP x_live Live.\n"
            "# TYPE x_live gauge\n"
            "x_live 42\n");
}

TEST(MetricsTest, LabelCardinalityIsBounded) {
  MetricsRegistry r;
  auto& c = r.AddCounter("y_total", "Y.", {"limit"}, /*max_series=*/3);
  for (int i = 0; i < 100; ++i) c.With({"name-" + std::to_string(i)}).Increment();
  const std::string text = r.Render();
  EXPECT_NE(text.find("y_total{limit=\"_other\"} 97\n"), std::string::npos) << text;
  size_t series = 0;
  for (size_t p = 0; (p = text.find("\ny_total{", p)) != std::string::npos; ++p) ++series;
  EXPECT_EQ(series, 4u);
}

// Runs promtool on `text`; returns its exit status and output.
std::pair<int, std::string> Promtool(const std::string& text) {
  TempDir dir;
  const std::string path = dir.File("metrics.txt");
  std::ofstream(path) << text;
  return ::ratelimit::testing::RunCommand("promtool check metrics < " + path);
}

TEST(MetricsTest, ExpositionPassesPromtool) {
  MetricsRegistry r;
  r.AddCounter("ratelimit_things_total", "Things.", {"limit"}).With({"api"}).Increment();
  r.AddHistogram("ratelimit_latency_seconds", "Latency.", {"method"}, LatencyBuckets())
      .With({"Consume"})
      .Observe(0.001);
  r.AddGauge("ratelimit_live_states", "Live.", [] { return 1.0; });
  auto [status, out] = Promtool(r.Render());
  EXPECT_EQ(status, 0) << out;
  // And promtool does catch a malformed exposition (so the check above can fail).
  auto [bad_status, bad_out] = Promtool("# TYPE broken counter\nbroken{ 1\n");
  EXPECT_NE(bad_status, 0) << bad_out;
}

}  // namespace
}  // namespace ratelimit
