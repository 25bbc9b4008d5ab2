// The xDS client in a real server against a real ADS management server (fake_ads_server.h):
// the first request, updates applied and served by ShouldRateLimit, counters kept across an
// update, a bad update NACKed with the loader's error while the previous configuration is still
// served, and a management server that goes away and comes back on the same port.
#include "server/envoy/xds/xds_client.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/server/envoy/xds/fake_ads_server.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/reload_recorder.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Descriptor;
using ::ratelimit::testing::EnvoyClient;
using ::ratelimit::testing::EnvoyRequest;
using ::ratelimit::testing::FakeAdsServer;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::OneRule;
using ::ratelimit::testing::ReloadRecorder;
using ::ratelimit::testing::TempDir;
using ::testing::HasSubstr;
namespace discovery = ::envoy::service::discovery::v3;
namespace rlsconf = ::ratelimit::config::ratelimit::v3;
using Response = ::envoy::service::ratelimit::v3::RateLimitResponse;

class XdsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ads_ = FakeAdsServer::Start(0);
    ASSERT_NE(ads_, nullptr);
  }

  void StartServer() {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    o.store.open.rocksdb.path = dir_.File("data");
    o.limits.envoy_xds.server = "127.0.0.1:" + std::to_string(ads_->port());
    o.limits.envoy_xds.node_id = "ratelimit-7";
    o.limits.envoy_xds.node_metadata = {{"zone", "eu-1"}, {"team", "infra"}};
    o.limits.envoy_xds.retry_initial = absl::Milliseconds(10);
    o.limits.envoy_xds.retry_max = absl::Milliseconds(50);
    o.limits.on_config_reload = reloads_.Callback();
    o.observability.metrics_listen = "127.0.0.1:0";
    auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
    ASSERT_OK(server);
    server_ = *std::move(server);
    client_ = std::make_unique<EnvoyClient>("127.0.0.1:" + std::to_string(server_->port()));
  }

  // The request answering the response pushed as the `index`-th (request 0 opens the stream).
  discovery::DiscoveryRequest Answer(size_t index) {
    std::optional<discovery::DiscoveryRequest> r = ads_->Request(index);
    EXPECT_TRUE(r.has_value()) << "no request #" << index;
    return r.value_or(discovery::DiscoveryRequest());
  }

  // limit_remaining of domain `domain`, user=u1, after `hits` hits.
  uint32_t Remaining(const std::string& domain, uint64_t hits = 1) {
    absl::StatusOr<Response> r =
        client_->ShouldRateLimit(EnvoyRequest(domain, {Descriptor({{"user", "u1"}}, hits)}));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->statuses(0).limit_remaining() : 0;
  }

  TempDir dir_;
  FakeClock clock_{testing::kMinuteStart};
  ReloadRecorder reloads_;
  std::unique_ptr<FakeAdsServer> ads_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<EnvoyClient> client_;
};

TEST_F(XdsClientTest, FirstRequestNamesTheNodeAndTheType) {
  StartServer();
  discovery::DiscoveryRequest first = Answer(0);
  EXPECT_EQ(first.type_url(), kRateLimitConfigTypeUrl);
  EXPECT_EQ(first.version_info(), "");
  EXPECT_EQ(first.response_nonce(), "");
  EXPECT_EQ(first.node().id(), "ratelimit-7");
  EXPECT_EQ(first.node().metadata().fields().at("zone").string_value(), "eu-1");
  EXPECT_EQ(first.node().metadata().fields().at("team").string_value(), "infra");
  EXPECT_TRUE(first.resource_names().empty());
  EXPECT_FALSE(first.has_error_detail());
}

TEST_F(XdsClientTest, FirstUpdateIsAppliedAckedAndServed) {
  StartServer();
  ASSERT_NE(server_->envoy_service(), nullptr);
  const std::string nonce = ads_->Push("v1", {OneRule("web-config", "web", "user", 2)});
  discovery::DiscoveryRequest ack = Answer(1);
  EXPECT_EQ(ack.version_info(), "v1");
  EXPECT_EQ(ack.response_nonce(), nonce);
  EXPECT_EQ(ack.type_url(), kRateLimitConfigTypeUrl);
  EXPECT_FALSE(ack.has_error_detail());
  // The ACK is sent once the configuration is in force.
  EXPECT_EQ(Remaining("web"), 1u);
  EXPECT_EQ(Remaining("web"), 0u);
  absl::StatusOr<Response> over = client_->ShouldRateLimit(
      EnvoyRequest("web", {Descriptor(Descriptor::Entries{{"user", "u1"}})}));
  ASSERT_OK(over);
  EXPECT_EQ(over->overall_code(), Response::OVER_LIMIT);
  EXPECT_TRUE(reloads_.WaitFor("envoy", /*ok=*/true));
  const EnvoyXdsClient::Stats stats = server_->envoy_xds_client()->stats();
  EXPECT_EQ(stats.version, "v1");
  EXPECT_EQ(stats.applied, 1u);
  EXPECT_EQ(stats.rejected, 0u);
}

// The rule of a domain the update keeps has the same state name: its counter goes on.
TEST_F(XdsClientTest, ASecondUpdateIsAppliedWithTheCountersKept) {
  StartServer();
  ads_->Push("v1", {OneRule("web-config", "web", "user", 3)});
  ASSERT_EQ(Answer(1).version_info(), "v1");
  EXPECT_EQ(Remaining("web"), 2u);  // one hit counted under v1
  absl::StatusOr<Response> mobile = client_->ShouldRateLimit(
      EnvoyRequest("mobile", {Descriptor(Descriptor::Entries{{"user", "u1"}})}));
  ASSERT_OK(mobile);
  EXPECT_FALSE(mobile->statuses(0).has_current_limit());  // no such domain yet
  ads_->Push("v2", {OneRule("web-config", "web", "user", 3),
                    OneRule("mobile-config", "mobile", "user", 1)});
  discovery::DiscoveryRequest ack = Answer(2);
  EXPECT_EQ(ack.version_info(), "v2");
  EXPECT_FALSE(ack.has_error_detail());
  EXPECT_EQ(Remaining("web"), 1u);  // 3 - the hit under v1 - this one
  EXPECT_EQ(Remaining("mobile"), 0u);
  EXPECT_EQ(server_->envoy_xds_client()->stats().version, "v2");
  EXPECT_EQ(server_->envoy_xds_client()->stats().applied, 2u);
}

TEST_F(XdsClientTest, ABadUpdateIsNackedAndThePreviousConfigurationServed) {
  StartServer();
  ads_->Push("v1", {OneRule("web-config", "web", "user", 3)});
  ASSERT_EQ(Answer(1).version_info(), "v1");
  EXPECT_EQ(Remaining("web"), 2u);
  rlsconf::RateLimitConfig bad = OneRule("web-config", "web", "user", 100);
  bad.mutable_descriptors(0)->mutable_rate_limit()->clear_unit();
  const std::string nonce = ads_->Push("v2", {bad});
  discovery::DiscoveryRequest nack = Answer(2);
  EXPECT_EQ(nack.version_info(), "v1");
  EXPECT_EQ(nack.response_nonce(), nonce);
  ASSERT_TRUE(nack.has_error_detail());
  EXPECT_EQ(nack.error_detail().code(), 3);  // INVALID_ARGUMENT
  EXPECT_THAT(nack.error_detail().message(), HasSubstr("xds:web-config:"));
  EXPECT_THAT(nack.error_detail().message(), HasSubstr("descriptors[0].rate_limit.unit: required"));
  EXPECT_EQ(Remaining("web"), 1u);  // still v1's limit of 3
  EXPECT_TRUE(reloads_.WaitFor("envoy", /*ok=*/false));
  const EnvoyXdsClient::Stats stats = server_->envoy_xds_client()->stats();
  EXPECT_EQ(stats.version, "v1");
  EXPECT_EQ(stats.rejected, 1u);

  // A domain in two resources is refused the same way.
  rlsconf::RateLimitConfig twice = OneRule("second", "web", "user", 9);
  ads_->Push("v3", {OneRule("web-config", "web", "user", 3), twice});
  nack = Answer(3);
  EXPECT_EQ(nack.version_info(), "v1");
  EXPECT_THAT(nack.error_detail().message(),
              HasSubstr("domain: \"web\" is already defined at xds:web-config:"));

  // A response of another type is refused too.
  discovery::DiscoveryResponse other;
  other.set_version_info("v4");
  other.set_type_url("type.googleapis.com/envoy.config.cluster.v3.Cluster");
  ads_->Push(other);
  nack = Answer(4);
  EXPECT_EQ(nack.version_info(), "v1");
  EXPECT_THAT(nack.error_detail().message(), HasSubstr("type_url"));
  EXPECT_EQ(Remaining("web"), 0u);
}

TEST_F(XdsClientTest, ReconnectsToAManagementServerThatCameBackAndResendsItsVersion) {
  StartServer();
  ads_->Push("v1", {OneRule("web-config", "web", "user", 3)});
  ASSERT_EQ(Answer(1).version_info(), "v1");
  EXPECT_EQ(Remaining("web"), 2u);
  const int port = ads_->port();
  ads_->Stop();
  ads_.reset();

  ads_ = FakeAdsServer::Start(port);  // the same address, a new process of the control plane
  ASSERT_NE(ads_, nullptr);
  discovery::DiscoveryRequest first = Answer(0);
  EXPECT_EQ(first.version_info(), "v1");  // what is in force
  EXPECT_EQ(first.response_nonce(), "");
  EXPECT_EQ(first.node().id(), "ratelimit-7");
  EXPECT_EQ(Remaining("web"), 1u);  // the configuration stayed while disconnected

  ads_->Push("v2", {OneRule("web-config", "web", "user", 3),
                    OneRule("mobile-config", "mobile", "user", 2)});
  EXPECT_EQ(Answer(1).version_info(), "v2");
  EXPECT_EQ(Remaining("web"), 0u);  // the counter went on through the reconnection
  EXPECT_EQ(Remaining("mobile"), 1u);
}

// The version in force and the outcomes are in the metrics. The Envoy service reports SERVING
// before the first configuration (as the reference with its default
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=false); the version label tells it apart.
TEST_F(XdsClientTest, MetricsReportTheVersionAndTheOutcomes) {
  StartServer();
  ASSERT_TRUE(ads_->Request(0).has_value());
  EXPECT_EQ(testing::GrpcHealth(
                grpc::CreateChannel(testing::Target(*server_), grpc::InsecureChannelCredentials()),
                "envoy.service.ratelimit.v3.RateLimitService"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  auto [code, before] = testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(code, 200);
  EXPECT_THAT(before, HasSubstr("ratelimit_envoy_xds_config_info{version=\"\"} 1\n"));
  EXPECT_THAT(before, HasSubstr("ratelimit_envoy_xds_updates_total{outcome=\"applied\"} 0\n"));

  ads_->Push("v1", {OneRule("web-config", "web", "user", 3)});
  ASSERT_EQ(Answer(1).version_info(), "v1");
  rlsconf::RateLimitConfig bad = OneRule("web-config", "web", "", 3);
  ads_->Push("v2", {bad});
  ASSERT_TRUE(Answer(2).has_error_detail());
  auto [code2, after] = testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(code2, 200);
  EXPECT_THAT(after, HasSubstr("ratelimit_envoy_xds_config_info{version=\"v1\"} 1\n"));
  EXPECT_THAT(after, HasSubstr("ratelimit_envoy_xds_updates_total{outcome=\"applied\"} 1\n"));
  EXPECT_THAT(after, HasSubstr("ratelimit_envoy_xds_updates_total{outcome=\"rejected\"} 1\n"));
  EXPECT_THAT(after, HasSubstr("ratelimit_envoy_xds_connected 1\n"));
  EXPECT_THAT(after,
              HasSubstr("ratelimit_config_reloads_total{config=\"envoy\",result=\"failed\"} 1\n"));
}

TEST_F(XdsClientTest, StopsWhileTheManagementServerIsAway) {
  ads_->Stop();
  StartServer();
  ASSERT_NE(server_->envoy_xds_client(), nullptr);
  EXPECT_FALSE(server_->envoy_xds_client()->stats().connected);
  // Before any configuration: no domains, every descriptor is OK without a limit.
  absl::StatusOr<Response> r = client_->ShouldRateLimit(
      EnvoyRequest("web", {Descriptor(Descriptor::Entries{{"user", "u1"}})}));
  ASSERT_OK(r);
  EXPECT_EQ(r->overall_code(), Response::OK);
  server_->Shutdown();  // returns although the client is between attempts
}

}  // namespace
}  // namespace ratelimit
