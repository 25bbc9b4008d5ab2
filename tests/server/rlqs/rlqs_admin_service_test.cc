// The administrative view of the RLQS assignments (server/rlqs/rlqs_admin_service.h): its input
// checks and page tokens, and the RPC in the server, authorized as Reset is.
#include "server/rlqs/rlqs_admin_service.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/server/rlqs/rlqs_test_server.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::Usage;
using ::testing::HasSubstr;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

v1::GetRlqsAssignmentsRequest Request(const std::string& domain,
                                      std::map<std::string, std::string> bucket = {}) {
  v1::GetRlqsAssignmentsRequest r;
  r.set_domain(domain);
  for (const auto& [k, v] : bucket) (*r.mutable_bucket())[k] = v;
  return r;
}

TEST(ParseRlqsAssignmentsRequestTest, NamesTheField) {
  EXPECT_EQ(ParseRlqsAssignmentsRequest(Request("")).status().message(), "domain: required");
  EXPECT_EQ(ParseRlqsAssignmentsRequest(Request(std::string(257, 'd'))).status().message(),
            "domain: at most 256 bytes, got 257");
  EXPECT_EQ(ParseRlqsAssignmentsRequest(Request("edge", {{"", "x"}})).status().message(),
            "bucket: a key must not be empty");
  v1::GetRlqsAssignmentsRequest r = Request("edge");
  for (int i = 0; i < 33; ++i) (*r.mutable_bucket())[std::to_string(i)] = "v";
  EXPECT_EQ(ParseRlqsAssignmentsRequest(r).status().message(), "bucket: at most 32 pairs, got 33");
  r = Request("edge");
  r.set_page_size(1001);
  EXPECT_EQ(ParseRlqsAssignmentsRequest(r).status().message(), "page_size: at most 1000");
  r = Request("edge");
  r.set_page_token("!!");
  EXPECT_THAT(ParseRlqsAssignmentsRequest(r).status().message(),
              HasSubstr("page_token: not a page token"));
  r = Request("edge", {{"tenant", "a"}});
  r.set_page_token(RlqsPageToken({{"tenant", "a"}}));
  EXPECT_THAT(ParseRlqsAssignmentsRequest(r).status().message(), HasSubstr("page_token: "));
}

TEST(ParseRlqsAssignmentsRequestTest, SortsTheBucketAndDefaultsThePage) {
  absl::StatusOr<RlqsAssignmentsQuery> q =
      ParseRlqsAssignmentsRequest(Request("edge", {{"z", "1"}, {"a", "2"}}));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->domain, "edge");
  EXPECT_EQ(*q->bucket, (RlqsBucketKey{{"a", "2"}, {"z", "1"}}));
  EXPECT_EQ(q->page_size, kDefaultRlqsPageSize);
  EXPECT_FALSE(q->after.has_value());
}

TEST(RlqsPageTokenTest, RoundTripsAnyPairsAndRefusesOthers) {
  const RlqsBucketKey key = {{"a:1", "x"}, {"b", ""}, {"c", std::string("\0:9", 3)}};
  absl::StatusOr<RlqsBucketKey> back = ParseRlqsPageToken(RlqsPageToken(key));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, key);
  for (const char* bad : {"", "MTox", "OTphYg", "YQ", "LTE6YTE6Yg"}) {  // "", "1:1", "9:ab", ...
    EXPECT_EQ(ParseRlqsPageToken(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

class RlqsAdminServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.File("envoy"));
    testing::WriteFileAtomically(dir_.File("envoy/edge.yaml"), R"(domain: edge
quota_buckets:
  rules:
    - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 50,
       fair_share: {newcomer_reserve: 0, smoothing: 1}}
)");
  }

  std::unique_ptr<RateLimitServer> Start(bool rlqs) {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    o.limits.envoy_config_dir = dir_.File("envoy");
    o.rlqs.enabled = rlqs;
    o.rlqs.reallocation_interval = absl::Hours(1);  // no division but the test's
    o.admin.token = "s3cret";
    auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static std::shared_ptr<grpc::Channel> Channel(const RateLimitServer& s) {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(s.port()),
                               grpc::InsecureChannelCredentials());
  }

  // The call with `token` ("" sends no authorization).
  static grpc::Status Get(const RateLimitServer& s, const v1::GetRlqsAssignmentsRequest& request,
                          const std::string& token, v1::GetRlqsAssignmentsResponse* response) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    return v1::RlqsAdminService::NewStub(Channel(s))
        ->GetRlqsAssignments(&context, request, response);
  }

  TempDir dir_;
  FakeClock clock_;
};

TEST_F(RlqsAdminServiceTest, ShowsEachSubscriberOfABucket) {
  auto server = Start(/*rlqs=*/true);
  ASSERT_NE(server, nullptr);
  auto stub = rlqs_v3::RateLimitQuotaService::NewStub(Channel(*server));
  grpc::ClientContext a_context, b_context;
  auto a = stub->StreamRateLimitQuotas(&a_context);
  rlqs_v3::RateLimitQuotaResponse r;
  ASSERT_TRUE(a->Write(Usage("edge", {{"tenant", "t1"}}, 0, 0, 0)));
  ASSERT_TRUE(a->Read(&r));
  auto b = stub->StreamRateLimitQuotas(&b_context);  // after a's: a later stream id
  ASSERT_TRUE(a->Write(Usage("edge", {{"tenant", "t1"}}, 30, 0, 1)));  // demand 30/s
  ASSERT_TRUE(testing::Eventually([&] { return server->rlqs_service()->stats().messages == 2; }));
  ASSERT_TRUE(b->Write(Usage("edge", {{"tenant", "t1"}}, 0, 0, 0)));
  ASSERT_TRUE(b->Read(&r));
  const int64_t sent_us = clock_.NowMicros();

  v1::GetRlqsAssignmentsResponse response;
  grpc::Status s = Get(*server, Request("edge", {{"tenant", "t1"}}), "s3cret", &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.buckets_size(), 1);
  const v1::RlqsBucketAssignments& bucket = response.buckets(0);
  EXPECT_EQ(bucket.bucket().at("tenant"), "t1");
  EXPECT_EQ(bucket.rule().name(), "tenants");
  EXPECT_EQ(bucket.rule().action(), v1::RLQS_TOKEN_BUCKET);
  EXPECT_EQ(bucket.rule().rate_per_second(), 100);
  EXPECT_EQ(bucket.rule().burst(), 50);
  EXPECT_FALSE(bucket.has_replica_part());  // one replica: the whole rate is its own
  ASSERT_EQ(bucket.subscribers_size(), 2);
  double total = 0;
  for (const v1::RlqsSubscriber& sub : bucket.subscribers()) {
    EXPECT_THAT(sub.peer(), HasSubstr("127.0.0.1:"));
    EXPECT_EQ(sub.action(), v1::RLQS_TOKEN_BUCKET);
    // Three divisions of this server (an hour each), which outlast three of a's 1 s intervals.
    EXPECT_EQ(sub.time_to_live().seconds(), 3 * 3600);
    EXPECT_EQ(sub.sent_at().seconds(), sent_us / 1000000);
    EXPECT_EQ(sub.fill_interval().seconds(), 1);
    EXPECT_EQ(sub.tokens_per_fill(), static_cast<uint32_t>(sub.assigned_rate()));
    total += sub.assigned_rate();
  }
  EXPECT_LE(total, 100);
  EXPECT_LT(bucket.subscribers(0).stream_id(), bucket.subscribers(1).stream_id());
  EXPECT_TRUE(bucket.subscribers(0).demand_known());  // a's whole-second report
  EXPECT_EQ(bucket.subscribers(0).demand(), 30);
  EXPECT_EQ(bucket.subscribers(0).assigned_rate(), 30);  // max-min: what it wants
  EXPECT_FALSE(bucket.subscribers(1).demand_known());
  EXPECT_EQ(bucket.subscribers(1).assigned_rate(), 70);

  // A bucket nobody reports: an empty answer.
  response.Clear();
  ASSERT_TRUE(Get(*server, Request("edge", {{"tenant", "none"}}), "s3cret", &response).ok());
  EXPECT_EQ(response.buckets_size(), 0);
  // Bad input names the field.
  s = Get(*server, Request(""), "s3cret", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "domain: required");
  a->WritesDone();
  b->WritesDone();
  server->Shutdown();
}

TEST_F(RlqsAdminServiceTest, PagesThroughTheBucketsOfADomain) {
  auto server = Start(/*rlqs=*/true);
  ASSERT_NE(server, nullptr);
  auto stub = rlqs_v3::RateLimitQuotaService::NewStub(Channel(*server));
  grpc::ClientContext context;
  auto stream = stub->StreamRateLimitQuotas(&context);
  rlqs_v3::RateLimitQuotaResponse r;
  for (const char* t : {"a", "b", "c"}) {
    ASSERT_TRUE(stream->Write(Usage("edge", {{"tenant", t}}, 0, 0, 0)));
    ASSERT_TRUE(stream->Read(&r));
  }
  std::vector<std::string> seen;
  v1::GetRlqsAssignmentsRequest request = Request("edge");
  request.set_page_size(2);
  int pages = 0;
  do {
    v1::GetRlqsAssignmentsResponse response;
    ASSERT_TRUE(Get(*server, request, "s3cret", &response).ok());
    for (const auto& b : response.buckets()) seen.push_back(b.bucket().at("tenant"));
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 5);
  EXPECT_EQ(pages, 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "c"}));
  stream->WritesDone();
  server->Shutdown();
}

TEST_F(RlqsAdminServiceTest, AuthorizedAsResetIs) {
  auto server = Start(/*rlqs=*/true);
  ASSERT_NE(server, nullptr);
  v1::GetRlqsAssignmentsResponse response;
  EXPECT_EQ(Get(*server, Request("edge"), "", &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Get(*server, Request("edge"), "wrong", &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Get(*server, Request("edge"), "s3cret", &response).ok());
}

TEST_F(RlqsAdminServiceTest, WithoutRlqsIsFailedPrecondition) {
  auto server = Start(/*rlqs=*/false);
  ASSERT_NE(server, nullptr);
  v1::GetRlqsAssignmentsResponse response;
  grpc::Status s = Get(*server, Request("edge"), "s3cret", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("started without --rlqs"));
  // Still authorized first.
  EXPECT_EQ(Get(*server, Request("edge"), "", &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace ratelimit
