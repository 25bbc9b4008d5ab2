// Latencies, span times and the Envoy evaluator's time come from injected clocks.
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "opentelemetry/proto/trace/v1/trace.pb.h"
#include "server/envoy/envoy_evaluator.h"
#include "server/observability/telemetry.h"
#include "server/observability/telemetry_clock.h"
#include "server/observability/tracer.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

constexpr int64_t kMs = 1000000;  // nanoseconds

// Wall and steady time that move only when told to.
class FakeTelemetryClock final : public TelemetryClock {
 public:
  int64_t UnixNanos() const override { return unix_.load(); }
  int64_t SteadyNanos() const override { return steady_.load(); }
  // Time passes: both clocks move.
  void Advance(int64_t nanos) {
    unix_ += nanos;
    steady_ += nanos;
  }
  // The wall clock is set (e.g. by NTP): only it moves.
  void StepWallClock(int64_t nanos) { unix_ += nanos; }

 private:
  std::atomic<int64_t> unix_{1700000000LL * 1000000000};
  std::atomic<int64_t> steady_{42};
};

TEST(TelemetryClockTest, LatenciesAreTheSteadyTimeElapsedOnTheInjectedClock) {
  MetricsRegistry registry;
  ServerMetrics metrics(registry);
  FakeTelemetryClock clock;
  Telemetry telemetry(&metrics, nullptr, false, "memory", clock);
  grpc::CallbackServerContext context;
  Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
  clock.Advance(2 * kMs);
  rpc.StoreStarted();
  clock.Advance(5 * kMs);
  clock.StepWallClock(-3600LL * 1000 * kMs);  // a wall-clock step is no latency
  rpc.StoreFinished(absl::OkStatus());
  clock.Advance(1 * kMs);
  rpc.Finish(grpc::Status::OK);

  const Histogram::Snapshot store = metrics.store_seconds.With({}).Read();
  EXPECT_EQ(store.count, 1u);
  EXPECT_DOUBLE_EQ(store.sum, 0.005);
  const Histogram::Snapshot call = metrics.rpc_seconds.With({"Consume"}).Read();
  EXPECT_EQ(call.count, 1u);
  EXPECT_DOUBLE_EQ(call.sum, 0.008);
}

class KeepingSink final : public SpanSink {
 public:
  void Submit(std::string encoded) override { spans.push_back(std::move(encoded)); }
  std::vector<std::string> spans;
};

// A tracer on a fake clock, keeping its spans.
class SpanClockTest : public ::testing::Test {
 protected:
  FakeTelemetryClock clock;
  KeepingSink sink;
  Tracer tracer{TracerOptions{1.0}, sink, clock};
  const int64_t start = clock.UnixNanos();
};

TEST_F(SpanClockTest, SpanTimesComeFromTheInjectedClock) {
  Span span = tracer.StartServerSpan("svc/Consume", std::nullopt);
  clock.Advance(3 * kMs);
  Span child = span.StartChild("ratelimit.store/transaction");
  clock.Advance(4 * kMs);
  clock.StepWallClock(-3600LL * 1000 * kMs);  // spans keep their length across a step
  child.End();
  span.End();

  ASSERT_EQ(sink.spans.size(), 2u);
  ::opentelemetry::proto::trace::v1::Span c, s;
  ASSERT_TRUE(c.ParseFromString(sink.spans[0]));
  ASSERT_TRUE(s.ParseFromString(sink.spans[1]));
  EXPECT_EQ(s.start_time_unix_nano(), static_cast<uint64_t>(start));
  EXPECT_EQ(s.end_time_unix_nano(), static_cast<uint64_t>(start + 7 * kMs));
  EXPECT_EQ(c.start_time_unix_nano(), static_cast<uint64_t>(start + 3 * kMs));
  EXPECT_EQ(c.end_time_unix_nano(), static_cast<uint64_t>(start + 7 * kMs));
}

TEST_F(SpanClockTest, ChildSpansStayOnTheirParentsTimeLineAcrossAWallClockStep) {
  Span span = tracer.StartServerSpan("svc/Consume", std::nullopt);
  clock.Advance(2 * kMs);
  clock.StepWallClock(3600LL * 1000 * kMs);  // set forward an hour while the call runs
  Span child = span.StartChild("ratelimit.store/transaction");
  clock.Advance(1 * kMs);
  child.End();
  span.End();

  ASSERT_EQ(sink.spans.size(), 2u);
  ::opentelemetry::proto::trace::v1::Span c;
  ASSERT_TRUE(c.ParseFromString(sink.spans[0]));
  // Inside its parent, 2 ms after the parent's start, not an hour after the parent's end.
  EXPECT_EQ(c.start_time_unix_nano(), static_cast<uint64_t>(start + 2 * kMs));
  EXPECT_EQ(c.end_time_unix_nano(), static_cast<uint64_t>(start + 3 * kMs));
}

// Every read moves time on by 1 ms and is counted.
class CountingTelemetryClock final : public TelemetryClock {
 public:
  int64_t UnixNanos() const override {
    ++unix_reads;
    return 1700000000LL * 1000000000 + steady_.fetch_add(kMs);
  }
  int64_t SteadyNanos() const override {
    ++steady_reads;
    return steady_.fetch_add(kMs);
  }
  mutable std::atomic<int> unix_reads{0};
  mutable std::atomic<int> steady_reads{0};

 private:
  mutable std::atomic<int64_t> steady_{0};
};

TEST(TelemetryClockTest, ATracedCallsSpansAreTimedByTheLatencyMetricsReadings) {
  MetricsRegistry registry;
  ServerMetrics metrics(registry);
  CountingTelemetryClock clock;
  KeepingSink sink;
  Tracer tracer(TracerOptions{1.0}, sink, clock);
  Telemetry telemetry(&metrics, &tracer, false, "memory", clock);
  grpc::CallbackServerContext context;
  Telemetry::Rpc rpc = telemetry.StartRpc("svc", "Consume", "svc/Consume", context);
  rpc.StoreStarted();
  rpc.StoreFinished(absl::OkStatus());
  rpc.Finish(grpc::Status::OK);

  // One steady reading per event (start, store start, store end, reply) serves the metric and
  // the span; the wall clock is read once, for the SERVER span's start.
  EXPECT_EQ(clock.steady_reads.load(), 4);
  EXPECT_EQ(clock.unix_reads.load(), 1);
  ASSERT_EQ(sink.spans.size(), 2u);
  ::opentelemetry::proto::trace::v1::Span store, call;
  ASSERT_TRUE(store.ParseFromString(sink.spans[0]));
  ASSERT_TRUE(call.ParseFromString(sink.spans[1]));
  EXPECT_DOUBLE_EQ(metrics.store_seconds.With({}).Read().sum,
                   (store.end_time_unix_nano() - store.start_time_unix_nano()) / 1e9);
  EXPECT_DOUBLE_EQ(metrics.rpc_seconds.With({"Consume"}).Read().sum,
                   (call.end_time_unix_nano() - call.start_time_unix_nano()) / 1e9);
}

TEST(EnvoyEvaluatorClockTest, ReadsTheClockOnceInsideTheTransaction) {
  MemoryStateStore store;
  constexpr int64_t kStart = 1700000000LL * 1000000, kStep = 1000;
  testing::TickingClock clock(kStart, kStep);  // every read is a later time
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  EnvoyRateLimit rule;
  EnvoyLimit& limit = rule.limits.emplace_back();
  limit.requests_per_unit = 10;
  std::vector<EnvoyDescriptorPlan> plan(2);
  plan[0].kind = EnvoyDescriptorPlan::Kind::kLimited;
  plan[0].config_rule = &rule;
  LimitRequest& request = plan[0].requests.emplace_back();
  request.name = "web";
  request.key = "u1";
  request.source = LimitSource::kEnvoy;
  request.config = EnvoyLimitConfig(rule.limits[0]);
  plan[1].kind = EnvoyDescriptorPlan::Kind::kNoLimit;

  absl::StatusOr<std::vector<EnvoyOutcome>> outcomes = EvaluateEnvoyPlan(scheduler, clock, plan);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status();
  EXPECT_EQ((clock.Peek() - kStart) / kStep, 1);  // one read, by the transaction
  EXPECT_EQ((*outcomes)[0].now_us, kStart + kStep);
  EXPECT_EQ((*outcomes)[1].now_us, (*outcomes)[0].now_us);
}

TEST(EnvoyEvaluatorClockTest, WithoutATransactionTheClockIsReadOnce) {
  MemoryStateStore store;
  testing::FakeClock clock;
  Limiter limiter(store, clock);
  DecisionScheduler scheduler(limiter, nullptr);
  std::vector<EnvoyDescriptorPlan> plan(1);  // kNoLimit
  absl::StatusOr<std::vector<EnvoyOutcome>> outcomes = EvaluateEnvoyPlan(scheduler, clock, plan);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status();
  EXPECT_EQ((*outcomes)[0].now_us, clock.NowMicros());
}

}  // namespace
}  // namespace ratelimit
