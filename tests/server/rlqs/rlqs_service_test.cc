#include "server/rlqs/rlqs_service.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/trace/v1/trace.pb.h"
#include "server/observability/tracer.h"
#include "tests/server/rlqs/rlqs_test_server.h"

namespace ratelimit {
namespace {

using testing::Eventually;
using ::testing::HasSubstr;
using testing::RlqsTestServer;
using testing::Usage;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

constexpr char kConfig[] = R"(
default: deny_all
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 100,
     fair_share: {newcomer_reserve: 0, smoothing: 1}}
)";

using Client = testing::RlqsTestClient;

TEST(RlqsServiceTest, FirstReportIsAnsweredAtOnce) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  Client c(server);
  ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  rlqs_v3::RateLimitQuotaResponse r = c.Read();
  ASSERT_EQ(r.bucket_action_size(), 1);
  const auto& q = r.bucket_action(0).quota_assignment_action();
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().tokens_per_fill().value(), 100u);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().fill_interval().seconds(), 1);
  EXPECT_EQ(q.assignment_time_to_live().seconds(), 15);
  // The default of the domain: DENY_ALL.
  ASSERT_TRUE(c.stream->Write(Usage("", {{"other", "x"}}, 0, 0, 0)));
  r = c.Read();
  EXPECT_EQ(r.bucket_action(0).quota_assignment_action().rate_limit_strategy().blanket_rule(),
            envoy::type::v3::RateLimitStrategy::DENY_ALL);
  EXPECT_EQ(server.service().stats().streams, 1u);
  EXPECT_EQ(server.service().stats().messages, 2u);
}

// Past the metric's cap on series, the rules fold into "_other" and the result stays: allowed
// and denied are still told apart.
TEST(RlqsServiceTest, ReportedRequestsPastTheSeriesCapKeepTheirResult) {
  std::string config = "rules:\n";
  for (int i = 0; i < 1001; ++i) {
    absl::StrAppend(&config, "  - {name: r", i, ", match: {tenant: t", i,
                    "}, requests_per_unit: 10, unit: second}\n");
  }
  RlqsTestServer server;
  server.SetConfig(config);
  rlqs_v3::RateLimitQuotaUsageReports m;
  m.set_domain("edge");
  for (int i = 0; i < 1001; ++i) {
    auto* u = m.add_bucket_quota_usages();
    (*u->mutable_bucket_id()->mutable_bucket())["tenant"] = absl::StrCat("t", i);
    u->mutable_time_elapsed()->set_seconds(1);
    u->set_num_requests_allowed(1);
    u->set_num_requests_denied(2);
  }
  Client c(server);
  ASSERT_TRUE(c.stream->Write(m));
  c.Read();
  MetricsRegistry registry;
  RegisterRlqsMetrics(registry, server.service());
  std::string text;
  ASSERT_TRUE(Eventually([&] {
    text = registry.Render();
    return absl::StrContains(text, "ratelimit_rlqs_reported_requests_total{rule=\"_other\"");
  }));
  EXPECT_THAT(text, HasSubstr("{rule=\"_other\",result=\"allowed\"}"));
  EXPECT_THAT(text, HasSubstr("{rule=\"_other\",result=\"denied\"}"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("result=\"_other\"")));
}

// A bucket twice in one message, and fields this server does not know: no harm done.
TEST(RlqsServiceTest, DuplicatedBucketsAndUnknownFieldsAreAccepted) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  Client c(server);
  rlqs_v3::RateLimitQuotaUsageReports m = Usage("edge", {{"tenant", "a"}}, 5, 1, 1);
  *m.add_bucket_quota_usages() = m.bucket_quota_usages(0);
  // Field 111 of the message and field 99 of the usage: unknown to this server's subset.
  std::string wire = m.SerializeAsString() + std::string("\xf8\x06\x01", 3);
  ASSERT_TRUE(m.ParseFromString(wire));
  m.mutable_bucket_quota_usages(0)
      ->GetReflection()
      ->MutableUnknownFields(m.mutable_bucket_quota_usages(0))
      ->AddVarint(99, 1);
  ASSERT_TRUE(c.stream->Write(m));
  rlqs_v3::RateLimitQuotaResponse r = c.Read();
  ASSERT_EQ(r.bucket_action_size(), 1);  // one subscription, one assignment
  EXPECT_TRUE(r.bucket_action(0).has_quota_assignment_action());
  EXPECT_EQ(server.service().RuleStats().at("edge/tenants").reported_allowed, 10u);
  EXPECT_EQ(server.service().RuleStats().at("edge/tenants").subscribers, 1u);
}

TEST(RlqsServiceTest, MalformedReportEndsTheStreamWithInvalidArgument) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  Client c(server);
  ASSERT_TRUE(c.stream->Write(Usage("", {{"tenant", "a"}}, 0, 0, 0)));
  grpc::Status s = c.End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "domain: required in the first message of a stream");
  EXPECT_EQ(server.service().RuleStats().size(), 0u);  // nothing changed
  // A bad usage after good ones in the same message: nothing of the message is applied.
  Client d(server);
  rlqs_v3::RateLimitQuotaUsageReports m = Usage("edge", {{"tenant", "a"}}, 1, 0, 1);
  m.add_bucket_quota_usages();  // no bucket_id
  ASSERT_TRUE(d.stream->Write(m));
  s = d.End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "bucket_quota_usages[1].bucket_id: at least one pair");
  EXPECT_EQ(server.service().RuleStats().size(), 0u);
}

TEST(RlqsServiceTest, BucketsPastTheBoundEndTheStream) {
  RlqsServiceOptions options;
  options.buckets.max_buckets_per_stream = 2;
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  Client c(server);
  for (const char* t : {"a", "b"}) {
    ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", t}}, 0, 0, 0)));
    c.Read();
  }
  ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", "c"}}, 0, 0, 0)));
  grpc::Status s = c.End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--rlqs_max_buckets_per_stream"));
}

// A stream that ends gives its share to the others once the assignment it holds has expired:
// its Envoy may go on enforcing it until then.
TEST(RlqsServiceTest, LeavingGivesTheShareToTheOthersWhenItsAssignmentExpires) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  Client a(server);
  ASSERT_TRUE(a.stream->Write(Usage("edge", {{"tenant", "a"}}, 500, 0, 1)));
  a.Read();
  {
    Client b(server);
    ASSERT_TRUE(b.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
    b.Read();
    rlqs_v3::RateLimitQuotaResponse r = a.Read();  // the join halves a's share
    EXPECT_EQ(r.bucket_action(0)
                  .quota_assignment_action()
                  .rate_limit_strategy()
                  .token_bucket()
                  .tokens_per_fill()
                  .value(),
              50u);
    b.stream->WritesDone();
    EXPECT_TRUE(b.End().ok());
  }
  rlqs_v3::RateLimitQuotaResponse r = a.Read();  // divided again at once, b's 50 still held
  EXPECT_EQ(testing::FirstTokensPerFill(r), 50u);
  const int64_t ttl =
      r.bucket_action(0).quota_assignment_action().assignment_time_to_live().seconds();
  server.clock().Advance((ttl + 2) * testing::kSecond);
  server.service().Tick();
  r = a.Read();
  EXPECT_EQ(testing::FirstTokensPerFill(r), 100u);
}

TEST(RlqsServiceTest, ReloadIsPushedAtTheNextTick) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  Client c(server);
  ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  c.Read();
  server.SetConfig(R"(
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 40, unit: second,
     fair_share: {newcomer_reserve: 0}}
)");
  server.service().Tick();
  rlqs_v3::RateLimitQuotaResponse r = c.Read();
  EXPECT_EQ(r.bucket_action(0)
                .quota_assignment_action()
                .rate_limit_strategy()
                .token_bucket()
                .tokens_per_fill()
                .value(),
            40u);
}

TEST(RlqsServiceTest, IdleBucketIsAbandoned) {
  RlqsServiceOptions options;
  options.buckets.idle_abandon = absl::Seconds(60);
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  Client c(server);
  ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  c.Read();
  server.clock().Advance(60 * testing::kSecond);
  server.service().Tick();
  EXPECT_TRUE(c.Read().bucket_action(0).has_abandon_action());
}

TEST(RlqsServiceTest, ShutdownSendsTtlZeroThenEndsTheStream) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  Client c(server);
  ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  c.Read();
  server.service().Shutdown();
  rlqs_v3::RateLimitQuotaResponse r = c.Read();
  ASSERT_EQ(r.bucket_action_size(), 1);
  EXPECT_EQ(r.bucket_action(0).quota_assignment_action().assignment_time_to_live().seconds(), 0);
  EXPECT_TRUE(c.End().ok());
  // A stream opened afterwards is refused.
  Client late(server);
  EXPECT_EQ(late.End().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(RlqsServiceTest, StreamsHaveEndedOnceEachHasEnded) {
  RlqsTestServer server;
  server.SetConfig(kConfig);
  EXPECT_TRUE(server.service().AwaitStreamsEnded(absl::Now()));  // none yet
  Client c(server);
  ASSERT_TRUE(c.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  c.Read();
  EXPECT_FALSE(server.service().AwaitStreamsEnded(absl::Now()));
  server.service().Shutdown();
  EXPECT_TRUE(c.End().ok());
  EXPECT_TRUE(server.service().AwaitStreamsEnded(absl::Now() + absl::Seconds(60)));
}

// A client that never reads: what waits for it stays bounded by its buckets, however many
// divisions are pushed.
TEST(RlqsServiceTest, AClientThatNeverReadsHoldsAtMostOneActionPerBucket) {
  RlqsServiceOptions options;
  options.max_actions_per_response = 50;
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  Client c(server);
  constexpr int kBuckets = 200;
  rlqs_v3::RateLimitQuotaUsageReports m;
  m.set_domain("edge");
  for (int i = 0; i < kBuckets; ++i) {
    auto* u = m.add_bucket_quota_usages();
    (*u->mutable_bucket_id()->mutable_bucket())["tenant"] = std::to_string(i);
    u->mutable_time_elapsed()->set_seconds(1);
  }
  ASSERT_TRUE(c.stream->Write(m));
  for (int round = 0; round < 300; ++round) {
    server.SetConfig(absl::StrCat(
        "rules: [{match: {tenant: \"*\"}, requests_per_unit: ", 100 + round, ", unit: second}]"));
    server.service().Tick();
    ASSERT_LE(server.service().stats().actions_waiting, static_cast<uint64_t>(kBuckets + 50))
        << "round " << round;
  }
  EXPECT_EQ(server.service().stats().streams, 1u);
}

// A channel with a connection of its own (channels to one address share their connection by
// default).
std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> OwnConnection(const RlqsTestServer& server) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return rlqs_v3::RateLimitQuotaService::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials(), args));
}

TEST(RlqsServiceTest, StreamsPastTheConnectionBoundAreRefused) {
  RlqsServiceOptions options;
  options.max_streams_per_connection = 2;
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  // One connection: its streams share the bound.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials(), args);
  auto stub = [&] { return rlqs_v3::RateLimitQuotaService::NewStub(channel); };
  auto first = std::make_unique<Client>(stub());
  Client second(stub());
  for (Client* c : {first.get(), &second}) {
    ASSERT_TRUE(c->stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
    c->Read();
  }
  Client third(stub());
  third.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0));
  grpc::Status refused = third.End();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("holds 2 RLQS streams"));
  EXPECT_THAT(refused.error_message(), HasSubstr("--rlqs_max_streams_per_connection"));
  EXPECT_EQ(server.service().stats().refused_streams, 1u);
  EXPECT_EQ(server.service().RuleStats().at("edge/tenants").subscribers, 2u);  // nothing changed
  // Another connection has a bound of its own.
  Client elsewhere(OwnConnection(server));
  ASSERT_TRUE(elsewhere.stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  EXPECT_EQ(elsewhere.Read().bucket_action_size(), 1);
  // Closing a stream lets a new one in.
  first->stream->WritesDone();
  EXPECT_TRUE(first->End().ok());
  first.reset();
  ASSERT_TRUE(Eventually([&] { return server.service().stats().streams == 2; }));
  Client fourth(stub());
  ASSERT_TRUE(fourth.stream->Write(Usage("edge", {{"tenant", "b"}}, 0, 0, 0)));
  rlqs_v3::RateLimitQuotaResponse r = fourth.Read();
  ASSERT_EQ(r.bucket_action_size(), 1);
  EXPECT_EQ(r.bucket_action(0).bucket_id().bucket().at("tenant"), "b");
  EXPECT_EQ(server.service().stats().refused_streams, 1u);
}

// 100,000 buckets from one stream: those past the bound end the stream with RESOURCE_EXHAUSTED
// naming the bound, and the stream's subscriptions go with it.
TEST(RlqsServiceTest, HundredThousandBucketsAreRefusedPastTheBound) {
  RlqsServiceOptions options;
  options.buckets.max_buckets_per_stream = 1000;
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  Client c(server);
  rlqs_v3::RateLimitQuotaUsageReports m;
  m.set_domain("edge");
  for (int i = 0; i < 100000; ++i) {
    auto* u = m.add_bucket_quota_usages();
    (*u->mutable_bucket_id()->mutable_bucket())["tenant"] = std::to_string(i);
    u->mutable_time_elapsed()->set_seconds(1);
    u->set_num_requests_allowed(1);
  }
  ASSERT_LT(m.ByteSizeLong(), 4u << 20);  // within gRPC's default message size
  ASSERT_TRUE(c.stream->Write(m));
  grpc::Status s = c.End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("subscribed to 1000 buckets, the most one stream may have "
                        "(--rlqs_max_buckets_per_stream)"));
  ASSERT_TRUE(Eventually([&] { return server.service().stats().streams == 0; }));
  EXPECT_EQ(server.service().RuleStats().at("edge/tenants").subscribers, 0u);
}

// A client that never reads while its reports keep arriving, each subscribing a new bucket and
// each followed by a division that moves every share: what waits for it is at most one action
// per bucket, plus the one response in flight.
TEST(RlqsServiceTest, AClientThatNeverReadsWhileReportingStaysBounded) {
  RlqsServiceOptions options;
  options.max_actions_per_response = 50;
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  // A client window of 64 KiB that does not grow (gRPC grows it with its bandwidth probes).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 65536);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  Client c(rlqs_v3::RateLimitQuotaService::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials(), args)));
  constexpr int kBuckets = 200;
  constexpr int kRounds = 30;
  // Long bucket values: the pushes soon fill the client's flow-control window.
  const std::string pad(200, 'x');
  rlqs_v3::RateLimitQuotaUsageReports m;
  m.set_domain("edge");
  for (int i = 0; i < kBuckets; ++i) {
    auto* u = m.add_bucket_quota_usages();
    (*u->mutable_bucket_id()->mutable_bucket())["tenant"] = absl::StrCat(pad, i);
    u->mutable_time_elapsed()->set_seconds(1);
  }
  for (int round = 1; round <= kRounds; ++round) {
    auto* fresh = m.add_bucket_quota_usages();
    (*fresh->mutable_bucket_id()->mutable_bucket())["tenant"] = absl::StrCat("new-", round);
    fresh->mutable_time_elapsed()->set_seconds(1);
    for (auto& u : *m.mutable_bucket_quota_usages()) u.set_num_requests_allowed(round);
    ASSERT_TRUE(c.stream->Write(m));
    ASSERT_TRUE(Eventually([&] { return server.service().stats().messages == uint64_t(round); }));
    server.SetConfig(absl::StrCat(
        "rules: [{match: {tenant: \"*\"}, requests_per_unit: ", 100 + round, ", unit: second}]"));
    server.service().Tick();
    const RlqsService::Stats st = server.service().stats();
    ASSERT_LE(st.writes_in_flight, 1u) << "round " << round;
    ASSERT_LE(st.actions_waiting, static_cast<uint64_t>(m.bucket_quota_usages_size() + 50))
        << "round " << round;
  }
  // The client's window is full: a response is stuck in flight, the rest waits.
  const RlqsService::Stats st = server.service().stats();
  EXPECT_EQ(st.writes_in_flight, 1u);
  EXPECT_GT(st.actions_waiting, 50u);
  EXPECT_EQ(st.streams, 1u);
}

// Keeps the spans it receives, from any thread.
class LockedSink final : public SpanSink {
 public:
  void Submit(std::string encoded) override {
    opentelemetry::proto::trace::v1::Span span;
    EXPECT_TRUE(span.ParseFromString(encoded));
    absl::MutexLock lock(&mu_);
    spans_.push_back(std::move(span));
  }
  std::vector<opentelemetry::proto::trace::v1::Span> Named(const std::string& name) {
    absl::MutexLock lock(&mu_);
    std::vector<opentelemetry::proto::trace::v1::Span> out;
    for (const auto& s : spans_) {
      if (s.name() == name) out.push_back(s);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<opentelemetry::proto::trace::v1::Span> spans_ ABSL_GUARDED_BY(mu_);
};

// The value of attribute `key` of `span` as text ("" when absent).
std::string Attribute(const opentelemetry::proto::trace::v1::Span& span, const std::string& key) {
  for (const auto& kv : span.attributes()) {
    if (kv.key() != key) continue;
    if (kv.value().has_string_value()) return kv.value().string_value();
    if (kv.value().has_int_value()) return std::to_string(kv.value().int_value());
  }
  return "";
}

TEST(RlqsServiceTest, EveryStreamEventIsASpan) {
  constexpr char kStream[] =
      "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
  LockedSink sink;
  Tracer tracer(TracerOptions{}, sink);
  RlqsServiceOptions options;
  options.tracer = &tracer;
  RlqsTestServer server(options);
  server.SetConfig(kConfig);
  {
    Client c(server);
    rlqs_v3::RateLimitQuotaUsageReports m = Usage("edge", {{"tenant", "a"}}, 3, 0, 1);
    *m.add_bucket_quota_usages() = Usage("edge", {{"tenant", "b"}}, 3, 0, 1).bucket_quota_usages(0);
    ASSERT_TRUE(c.stream->Write(m));
    int actions = 0;
    while (actions < 2) actions += c.Read().bucket_action_size();
    c.stream->WritesDone();
    ASSERT_TRUE(c.End().ok());
  }
  ASSERT_TRUE(Eventually([&] { return sink.Named(kStream).size() == 1; }));
  const auto stream = sink.Named(kStream)[0];
  EXPECT_EQ(stream.kind(), opentelemetry::proto::trace::v1::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(Attribute(stream, "ratelimit.rlqs.domain"), "edge");
  EXPECT_EQ(Attribute(stream, "rpc.grpc.status_code"), "0");
  EXPECT_THAT(Attribute(stream, "net.peer.name"), HasSubstr("127.0.0.1"));
  const auto open = sink.Named("ratelimit.rlqs/open");
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(Attribute(open[0], "ratelimit.rlqs.domain"), "edge");
  const auto reports = sink.Named("ratelimit.rlqs/report");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(Attribute(reports[0], "ratelimit.rlqs.buckets"), "2");
  int pushed = 0;
  for (const auto& push : sink.Named("ratelimit.rlqs/push")) {
    pushed += std::stoi(Attribute(push, "ratelimit.rlqs.actions"));
    EXPECT_EQ(push.parent_span_id(), stream.span_id());
    EXPECT_EQ(push.trace_id(), stream.trace_id());
  }
  EXPECT_EQ(pushed, 2);
  EXPECT_EQ(open[0].parent_span_id(), stream.span_id());
  EXPECT_EQ(reports[0].parent_span_id(), stream.span_id());

  // A refused report: its span and the stream's carry the error.
  {
    Client bad(server);
    ASSERT_TRUE(bad.stream->Write(Usage("", {{"tenant", "a"}}, 0, 0, 0)));
    EXPECT_EQ(bad.End().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  ASSERT_TRUE(Eventually([&] { return sink.Named(kStream).size() == 2; }));
  const auto failed = sink.Named(kStream)[1];
  EXPECT_EQ(Attribute(failed, "rpc.grpc.status_code"), "3");
  EXPECT_EQ(failed.status().code(), opentelemetry::proto::trace::v1::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(failed.status().message(), "domain: required in the first message of a stream");
  const auto failed_report = sink.Named("ratelimit.rlqs/report")[1];
  EXPECT_EQ(failed_report.status().code(),
            opentelemetry::proto::trace::v1::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(failed_report.parent_span_id(), failed.span_id());
}

}  // namespace
}  // namespace ratelimit
