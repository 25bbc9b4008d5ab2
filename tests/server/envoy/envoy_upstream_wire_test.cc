// The Envoy API on the wire with Envoy's own message definitions (tests/server/envoy/upstream/):
// requests built from the full upstream messages, responses read back with them. What Envoy 1.38
// sends (per-descriptor hits_addend, is_negative_hits, limit overrides) is understood, and what
// the server answers parses as Envoy parses it.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "gtest/gtest.h"
#include "tests/server/envoy/upstream/rls_upstream.pb.h"
#include "tests/support/envoy_test_support.h"

namespace ratelimit {
namespace {

namespace up = ::upstream::envoy::service::ratelimit::v3;

constexpr char kConfig[] = R"(
domain: wire
descriptors:
  - key: tokens
    metadata: {backend: pool-a}
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 100}
      - {name: per_day, unit: day, requests_per_unit: 1000}
)";

class EnvoyUpstreamWireTest : public testing::EnvoyServiceTestBase {
 protected:
  void SetUp() override {
    Start(kConfig, /*headers=*/true, std::make_unique<MemoryStateStore>(), [](ServerOptions& o) {
      o.limits.envoy_response_dynamic_metadata = true;
      o.limits.envoy_ratelimit_limit_header = "X-RateLimit-Limit";
    });
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
  }

  // ShouldRateLimit with the upstream messages, as Envoy's filter calls it.
  up::RateLimitResponse Send(const up::RateLimitRequest& request) {
    const grpc::internal::RpcMethod method(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    up::RateLimitResponse response;
    const grpc::Status s =
        grpc::internal::BlockingUnaryCall(channel_.get(), method, &context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  static up::RateLimitDescriptor* Add(up::RateLimitRequest& r, const std::string& key,
                                      const std::string& value, uint64_t hits) {
    up::RateLimitDescriptor* d = r.add_descriptors();
    up::RateLimitDescriptor::Entry* e = d->add_entries();
    e->set_key(key);
    e->set_value(value);
    d->mutable_hits_addend()->set_value(hits);
    return d;
  }

  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(EnvoyUpstreamWireTest, PerDescriptorHitsAndIsNegativeHitsAreUnderstood) {
  up::RateLimitRequest charge;
  charge.set_domain("wire");
  Add(charge, "tokens", "alice", 60);
  up::RateLimitResponse r = Send(charge);
  ASSERT_EQ(r.statuses_size(), 1);
  EXPECT_EQ(r.overall_code(), up::RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 40u);
  EXPECT_EQ(r.statuses(0).current_limit().name(), "per_minute");
  EXPECT_EQ(r.statuses(0).current_limit().unit(), up::RateLimitResponse::RateLimit::MINUTE);

  // Envoy 1.38 gives 50 back: field 4, is_negative_hits.
  up::RateLimitRequest refund;
  refund.set_domain("wire");
  Add(refund, "tokens", "alice", 50)->set_is_negative_hits(true);
  r = Send(refund);
  EXPECT_EQ(r.overall_code(), up::RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 90u);

  // A server that ignored the field would have charged those 50: 90 are left, not 0 or fewer.
  r = Send(charge);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 30u);
  EXPECT_FALSE(r.statuses(0).has_quota());
  EXPECT_FALSE(r.has_quota());
}

TEST_F(EnvoyUpstreamWireTest, ResponseFieldsParseAsEnvoyReadsThem) {
  up::RateLimitRequest request;
  request.set_domain("wire");
  request.set_hits_addend(1);
  Add(request, "tokens", "bob", 101);  // more than the minute allows
  up::RateLimitDescriptor* overridden = Add(request, "other", "x", 1);
  overridden->mutable_limit()->set_requests_per_unit(5);
  overridden->mutable_limit()->set_unit(up::SECOND);
  const up::RateLimitResponse r = Send(request);
  ASSERT_EQ(r.statuses_size(), 2);
  EXPECT_EQ(r.overall_code(), up::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).code(), up::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).current_limit().name(), "per_minute");
  EXPECT_TRUE(r.statuses(0).has_duration_until_reset());
  EXPECT_EQ(r.statuses(1).code(), up::RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(1).current_limit().requests_per_unit(), 5u);
  EXPECT_EQ(r.statuses(1).current_limit().unit(), up::RateLimitResponse::RateLimit::SECOND);
  // The renamed header, and the dynamic metadata (field 6).
  ASSERT_GE(r.response_headers_to_add_size(), 1);
  EXPECT_EQ(r.response_headers_to_add(0).key(), "X-RateLimit-Limit");
  EXPECT_EQ(r.dynamic_metadata().fields().at("domain").string_value(), "wire");
  EXPECT_EQ(r.dynamic_metadata().fields().at("descriptors").list_value().values_size(), 2);
}

}  // namespace
}  // namespace ratelimit
