#include "server/rlqs/rlqs_service.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/rlqs/rlqs_test_server.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;
using testing::RlqsTestServer;
using testing::Usage;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;
using Stream =
    grpc::ClientReaderWriter<rlqs_v3::RateLimitQuotaUsageReports, rlqs_v3::RateLimitQuotaResponse>;

constexpr char kConfig[] = R"(
default: deny_all
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 100,
     fair_share: {newcomer_reserve: 0, smoothing: 1}}
)";

struct Client {
  std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;

  explicit Client(RlqsTestServer& server) : stub(server.NewStub()) {
    stream = stub->StreamRateLimitQuotas(&context);
  }
  rlqs_v3::RateLimitQuotaResponse Read() {
    rlqs_v3::RateLimitQuotaResponse r;
    EXPECT_TRUE(stream->Read(&r));
    return r;
  }
  grpc::Status End() {
    rlqs_v3::RateLimitQuotaResponse r;
    while (stream->Read(&r)) {
    }
    return stream->Finish();
  }
};

TEST(ParseRlqsReportsTest, NamesTheField) {
  rlqs_v3::RateLimitQuotaUsageReports m = Usage("", {{"a", "b"}}, 1, 0, 1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "domain: required in the first message of a stream");
  EXPECT_TRUE(ParseRlqsReports(m, "edge").ok());  // later messages may leave it empty
  m.set_domain("other");
  EXPECT_THAT(ParseRlqsReports(m, "edge").status().message(), HasSubstr("domain: \"other\""));
  m = Usage("edge", {}, 1, 0, 1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].bucket_id: at least one pair");
  m = Usage("edge", {{"a", "b"}}, 1, 0, 1);
  m.mutable_bucket_quota_usages(0)->clear_time_elapsed();
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].time_elapsed: required");
  m.mutable_bucket_quota_usages(0)->mutable_time_elapsed()->set_seconds(-1);
  EXPECT_THAT(ParseRlqsReports(m, "").status().message(),
              HasSubstr("bucket_quota_usages[0].time_elapsed: must be"));
  m.clear_bucket_quota_usages();
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(), "bucket_quota_usages: at least one usage");
}

TEST(ParseRlqsReportsTest, SortsTheBucketAndTruncatesTime) {
  rlqs_v3::RateLimitQuotaUsageReports m = Usage("edge", {{"z", "1"}, {"a", "2"}}, 3, 4, 2);
  m.mutable_bucket_quota_usages(0)->mutable_time_elapsed()->set_nanos(900000000);
  absl::StatusOr<RlqsReports> r = ParseRlqsReports(m, "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->domain, "edge");
  ASSERT_EQ(r->usages.size(), 1u);
  EXPECT_EQ(r->usages[0].bucket, (RlqsBucketKey{{"a", "2"}, {"z", "1"}}));
  EXPECT_EQ(r->usages[0].allowed, 3u);
  EXPECT_EQ(r->usages[0].denied, 4u);
  EXPECT_EQ(r->usages[0].elapsed_seconds, 2);
}

TEST(ToBucketActionTest, TokenBucketBlanketRulesAndAbandon) {
  RlqsAssignment a;
  a.kind = RlqsAssignment::Kind::kTokenBucket;
  a.token_bucket = {20, 21, 2};
  a.ttl_seconds = 15;
  auto action = ToBucketAction({{"tenant", "a"}}, a);
  EXPECT_EQ(action.bucket_id().bucket().at("tenant"), "a");
  const auto& q = action.quota_assignment_action();
  EXPECT_EQ(q.assignment_time_to_live().seconds(), 15);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().max_tokens(), 20u);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().tokens_per_fill().value(), 21u);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().fill_interval().seconds(), 2);
  a.kind = RlqsAssignment::Kind::kAllowAll;
  action = ToBucketAction({{"tenant", "a"}}, a);
  EXPECT_TRUE(action.quota_assignment_action().rate_limit_strategy().has_blanket_rule());
  EXPECT_EQ(action.quota_assignment_action().rate_limit_strategy().blanket_rule(),
            envoy::type::v3::RateLimitStrategy::ALLOW_ALL);
  a.kind = RlqsAssignment::Kind::kDenyAll;
  action = ToBucketAction({{"tenant", "a"}}, a);
  EXPECT_EQ(action.quota_assignment_action().rate_limit_strategy().blanket_rule(),
            envoy::type::v3::RateLimitStrategy::DENY_ALL);
  a.kind = RlqsAssignment::Kind::kAbandon;
  EXPECT_TRUE(ToBucketAction({{"tenant", "a"}}, a).has_abandon_action());
}

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

TEST(RlqsServiceTest, LeavingGivesTheShareToTheOthers) {
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
  rlqs_v3::RateLimitQuotaResponse r = a.Read();
  EXPECT_EQ(r.bucket_action(0)
                .quota_assignment_action()
                .rate_limit_strategy()
                .token_bucket()
                .tokens_per_fill()
                .value(),
            100u);
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

}  // namespace
}  // namespace ratelimit
