// The Redis store's round-trip spans: a traced request gives one CLIENT span per Redis command
// under its store span (one per slot, in parallel, for a request across slots), an error reply
// marks its span, and nothing is traced while no tracer is installed or the trace is unsampled.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/store_trace.h"
#include "tests/support/fake_collector.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeCollector;
using ::ratelimit::testing::InProcessServerTest;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
namespace otlp = ::opentelemetry::proto::trace::v1;

constexpr char kSampled[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
constexpr char kUnsampled[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

const opentelemetry::proto::common::v1::AnyValue* Attr(const otlp::Span& span,
                                                       const std::string& key) {
  for (const auto& kv : span.attributes()) {
    if (kv.key() == key) return &kv.value();
  }
  return nullptr;
}

std::vector<otlp::Span> OfKind(const std::vector<otlp::Span>& spans, otlp::Span::SpanKind kind) {
  std::vector<otlp::Span> out;
  for (const otlp::Span& s : spans) {
    if (s.kind() == kind) out.push_back(s);
  }
  return out;
}

const otlp::Span* Named(const std::vector<otlp::Span>& spans, const std::string& name) {
  for (const otlp::Span& s : spans) {
    if (s.name() == name) return &s;
  }
  return nullptr;
}

class RedisTraceTest : public InProcessServerTest {
 protected:
  void Start(RedisTopology topology, double sample_ratio = 0) {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = testing::StartRedisTestTarget(topology);
    ASSERT_OK(target);
    target_ = *std::move(target);
    auto store = testing::OpenRedisTestStore(target_, &clock_);
    ASSERT_OK(store);
    ServerOptions o;
    o.store.open.rocksdb.path = dir_.File("data");
    o.admin.token = "tok";
    o.observability.otel_endpoint = collector_.target();
    o.observability.otel_sample_ratio = sample_ratio;
    o.observability.otel_exporter.batch_delay = absl::Milliseconds(10);
    StartServer(std::move(o), *std::move(store));
    stub_ = v1::RateLimitService::NewStub(channel_);
  }

  grpc::Status Consume(const v1::RateLimitRequest& request, const char* traceparent) {
    grpc::ClientContext ctx;
    if (traceparent != nullptr) ctx.AddMetadata("traceparent", traceparent);
    v1::RateLimitResponse response;
    return stub_->Consume(&ctx, request, &response);
  }

  // A command on the first primary of the test's Redis.
  absl::StatusOr<redis::Reply> OnPrimary(std::vector<std::string> args) {
    redis::RedisClusterClient::Options co;
    co.seeds = target_.seeds;
    auto client = redis::RedisClusterClient::Connect(co);
    if (!client.ok()) return client.status();
    return (*client)->ExecuteOnNodeSync((*client)->Primaries()[0], std::move(args));
  }

  FakeCollector collector_;
  RedisTestTarget target_;
  std::unique_ptr<v1::RateLimitService::Stub> stub_;
};

TEST_F(RedisTraceTest, ConsumeOnStandaloneRedisHasAClientSpanUnderTheStoreSpan) {
  ASSERT_NO_FATAL_FAILURE(Start(RedisTopology::kStandalone));
  ASSERT_TRUE(Consume(MakeRequest("api", "u1"), kSampled).ok());
  ASSERT_TRUE(collector_.WaitForSpans(3));
  server_->Shutdown();  // flushes
  const std::vector<otlp::Span> spans = collector_.Spans();
  ASSERT_EQ(spans.size(), 3u);
  const otlp::Span* store = Named(spans, "ratelimit.store/transaction");
  ASSERT_NE(store, nullptr);
  const std::vector<otlp::Span> clients = OfKind(spans, otlp::Span::SPAN_KIND_CLIENT);
  ASSERT_EQ(clients.size(), 1u);
  const otlp::Span& fcall = clients[0];
  EXPECT_EQ(fcall.name(), "redis/FCALL ratelimit_apply");
  EXPECT_EQ(fcall.trace_id(), store->trace_id());
  EXPECT_EQ(fcall.parent_span_id(), store->span_id());
  EXPECT_GE(fcall.start_time_unix_nano(), store->start_time_unix_nano());
  EXPECT_LE(fcall.end_time_unix_nano(), store->end_time_unix_nano());
  EXPECT_EQ(fcall.status().code(), otlp::Status::STATUS_CODE_UNSET);
  EXPECT_EQ(Attr(fcall, "db.system")->string_value(), "redis");
  EXPECT_EQ(Attr(fcall, "db.operation")->string_value(), "FCALL ratelimit_apply");
  EXPECT_EQ(Attr(fcall, "server.address")->string_value(), "127.0.0.1");
  const std::string seeds = target_.seeds;
  EXPECT_EQ(Attr(fcall, "server.port")->int_value(), std::stoi(seeds.substr(seeds.rfind(':') + 1)));
  ASSERT_NE(Attr(fcall, "db.redis.slot"), nullptr);
  EXPECT_GE(Attr(fcall, "db.redis.slot")->int_value(), 0);
  EXPECT_LT(Attr(fcall, "db.redis.slot")->int_value(), redis::kSlotCount);
  EXPECT_EQ(Attr(fcall, "db.redis.redirects")->int_value(), 0);
  EXPECT_GE(Attr(fcall, "db.redis.pipeline_depth")->int_value(), 1);
}

TEST_F(RedisTraceTest, CrossSlotConsumeOnTheClusterHasOneSpanPerSlot) {
  ASSERT_NO_FATAL_FAILURE(Start(RedisTopology::kCluster));
  v1::RateLimitRequest request = MakeRequest("api", "{a}user");
  v1::LimitRequest* second = request.add_limits();
  second->set_name("api");
  second->set_key("{b}user");
  second->set_count(1);
  ASSERT_TRUE(Consume(request, kSampled).ok());
  ASSERT_TRUE(collector_.WaitForSpans(4));
  server_->Shutdown();
  const std::vector<otlp::Span> spans = collector_.Spans();
  const otlp::Span* store = Named(spans, "ratelimit.store/transaction");
  ASSERT_NE(store, nullptr);
  const std::vector<otlp::Span> clients = OfKind(spans, otlp::Span::SPAN_KIND_CLIENT);
  ASSERT_EQ(clients.size(), 2u);  // both slots allowed: no refund
  std::vector<int64_t> slots;
  for (const otlp::Span& c : clients) {
    EXPECT_EQ(c.name(), "redis/FCALL ratelimit_take_held");
    EXPECT_EQ(c.parent_span_id(), store->span_id());
    EXPECT_NE(Attr(c, "server.port"), nullptr);
    slots.push_back(Attr(c, "db.redis.slot")->int_value());
  }
  std::sort(slots.begin(), slots.end());
  std::vector<int64_t> want = {redis::KeySlot("{a}"), redis::KeySlot("{b}")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(slots, want);
  EXPECT_NE(clients[0].span_id(), clients[1].span_id());
}

TEST_F(RedisTraceTest, AnErrorReplyMarksTheSpanAsAnError) {
  ASSERT_NO_FATAL_FAILURE(Start(RedisTopology::kStandalone));
  // Without the function library, FCALL is answered with an error reply.
  ASSERT_OK(OnPrimary({"FUNCTION", "FLUSH"}));
  EXPECT_FALSE(Consume(MakeRequest("api", "u1"), kSampled).ok());
  ASSERT_TRUE(collector_.WaitForSpans(3));
  server_->Shutdown();
  const std::vector<otlp::Span> clients = OfKind(collector_.Spans(), otlp::Span::SPAN_KIND_CLIENT);
  ASSERT_EQ(clients.size(), 1u);
  EXPECT_EQ(clients[0].name(), "redis/FCALL ratelimit_apply");
  EXPECT_EQ(clients[0].status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_NE(clients[0].status().message().find("unction"), std::string::npos)
      << clients[0].status().message();
}

TEST_F(RedisTraceTest, UnsampledRequestsGiveNoSpans) {
  ASSERT_NO_FATAL_FAILURE(Start(RedisTopology::kStandalone, /*sample_ratio=*/0));
  ASSERT_TRUE(Consume(MakeRequest("api", "u1"), kUnsampled).ok());
  ASSERT_TRUE(Consume(MakeRequest("api", "u2"), nullptr).ok());
  server_->Shutdown();
  EXPECT_EQ(collector_.Spans().size(), 0u);
}

// A tracer that counts the spans it starts (they may end on the client's I/O thread).
class CountingTracer final : public StoreTracer {
 public:
  std::unique_ptr<StoreSpan> StartClientSpan(const char* name) override;
  std::vector<std::string> Names() {
    absl::MutexLock l(&mu_);
    return names_;
  }
  int Ended() {
    absl::MutexLock l(&mu_);
    return ended_;
  }

 private:
  class CountedSpan final : public StoreSpan {
   public:
    explicit CountedSpan(CountingTracer& t) : t_(t) {}
    ~CountedSpan() override { End(); }
    void SetAttribute(const char*, absl::string_view) override {}
    void SetAttribute(const char*, int64_t) override {}
    void SetError(absl::string_view) override {}
    void End() override {
      if (ended_) return;
      ended_ = true;
      absl::MutexLock l(&t_.mu_);
      ++t_.ended_;
    }

   private:
    CountingTracer& t_;
    bool ended_ = false;
  };
  absl::Mutex mu_;
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<StoreSpan> CountingTracer::StartClientSpan(const char* name) {
  absl::MutexLock l(&mu_);
  names_.push_back(name);
  return std::make_unique<CountedSpan>(*this);
}

TEST(RedisStoreTraceTest, TheStoreStartsSpansOnlyWhileATracerIsInstalled) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  auto target = testing::StartRedisTestTarget(RedisTopology::kStandalone);
  ASSERT_OK(target);
  auto store = testing::OpenRedisTestStore(*target, nullptr);
  ASSERT_OK(store);
  LimitConfig config;
  config.rate = 10;
  config.period_us = 1000000;
  const std::vector<LimitOp> limits = {LimitOp{StateKey{"api", "k"}, config, 1}};
  Operation op;
  op.limits = limits;
  CountingTracer tracer;
  ASSERT_OK((*store)->Apply(op, SystemClock::Default()));
  EXPECT_TRUE(tracer.Names().empty());
  {
    ScopedStoreTracer scope(&tracer);
    ASSERT_OK((*store)->Apply(op, SystemClock::Default()));
  }
  ASSERT_OK((*store)->Apply(op, SystemClock::Default()));
  EXPECT_EQ(tracer.Names(), std::vector<std::string>{"redis/FCALL ratelimit_apply"});
  EXPECT_EQ(tracer.Ended(), 1);
  EXPECT_EQ(CurrentStoreTracer(), nullptr);
}

}  // namespace
}  // namespace ratelimit
