// The channel to the management server: mTLS with a verified server name against a real ADS
// server, and the TLS files' errors naming their flags.
#include "server/envoy/xds/xds_channel.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/xds/xds_client.h"
#include "server/tls/tls.h"
#include "tests/server/envoy/xds/fake_ads_server.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeAdsServer;
using ::ratelimit::testing::OneRule;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TestPki;
using ::testing::HasSubstr;

EnvoyXdsOptions Options(int port) {
  EnvoyXdsOptions o;
  o.server = "127.0.0.1:" + std::to_string(port);
  o.retry_initial = absl::Milliseconds(10);
  o.retry_max = absl::Milliseconds(50);
  return o;
}

TEST(XdsChannelTest, PlaintextByDefault) {
  absl::StatusOr<XdsChannelSpec> spec = MakeXdsChannelSpec(Options(18000));
  ASSERT_OK(spec);
  EXPECT_NE(spec->credentials, nullptr);
}

TEST(XdsChannelTest, MutualTlsWithTheExpectedServerName) {
  TempDir dir;
  TestPki pki(dir.path());
  ASSERT_TRUE(pki.ok()) << pki.status();
  ServerTlsOptions server_tls;
  server_tls.cert_file = pki.Cert("server");
  server_tls.key_file = pki.Key("server");
  server_tls.client_ca_file = pki.Cert("ca");  // the management server requires a client cert
  auto credentials = MakeServerTlsCredentials(server_tls);
  ASSERT_OK(credentials);
  std::unique_ptr<FakeAdsServer> ads = FakeAdsServer::Start(0, *credentials);
  ASSERT_NE(ads, nullptr);

  EnvoyXdsOptions o = Options(ads->port());
  o.tls = true;
  o.tls_ca_file = pki.Cert("ca");
  o.tls_cert_file = pki.Cert("user");
  o.tls_key_file = pki.Key("user");
  o.tls_server_name = "localhost";  // a DNS SAN of server.pem
  EnvoyConfigRegistry registry;
  auto client = EnvoyXdsClient::Create(o, registry);
  ASSERT_OK(client);
  (*client)->Start();
  ads->Push("v1", {OneRule("web-config", "web", "user", 3)});
  std::optional<::envoy::service::discovery::v3::DiscoveryRequest> ack = ads->Request(1);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->version_info(), "v1");
  EXPECT_NE(registry.Current()->FindDomain("web"), nullptr);
  (*client)->Stop();
}

TEST(XdsChannelTest, UnreadableFilesAreNamedByTheirFlags) {
  TempDir dir;
  EnvoyXdsOptions o = Options(18000);
  o.tls = true;
  o.tls_ca_file = dir.File("missing-ca.pem");
  absl::StatusOr<XdsChannelSpec> spec = MakeXdsChannelSpec(o);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("--envoy_xds_tls_ca_file"));

  TestPki pki(dir.path());
  ASSERT_TRUE(pki.ok()) << pki.status();
  o.tls_ca_file = pki.Cert("ca");
  o.tls_cert_file = pki.Cert("user");
  o.tls_key_file = pki.Key("admin");  // not the certificate's key
  spec = MakeXdsChannelSpec(o);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("--envoy_xds_tls_"));
  // The server refuses to start on the same error.
  EnvoyConfigRegistry registry;
  EXPECT_FALSE(EnvoyXdsClient::Create(o, registry).ok());
}

}  // namespace
}  // namespace ratelimit
