// The --envoy_xds_* options: node metadata parsing and every refusal, named by its flag.
#include "server/envoy/xds/xds_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/options.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;
using Metadata = std::vector<std::pair<std::string, std::string>>;

EnvoyXdsOptions Valid() {
  EnvoyXdsOptions o;
  o.server = "127.0.0.1:18000";
  return o;
}

void ExpectRefused(const EnvoyXdsOptions& o, const std::string& message) {
  absl::Status s = ValidateEnvoyXdsOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(message));
}

TEST(XdsOptionsTest, NodeMetadataIsParsedInOrder) {
  absl::StatusOr<Metadata> m = ParseXdsNodeMetadata("zone=eu-1,team=infra,empty=,x=a=b");
  ASSERT_OK(m);
  EXPECT_EQ(*m, (Metadata{{"zone", "eu-1"}, {"team", "infra"}, {"empty", ""}, {"x", "a=b"}}));
  absl::StatusOr<Metadata> none = ParseXdsNodeMetadata("");
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
}

TEST(XdsOptionsTest, NodeMetadataRefusals) {
  EXPECT_THAT(ParseXdsNodeMetadata("zone").status().message(),
              HasSubstr("--envoy_xds_node_metadata: entry \"zone\" is not key=value"));
  EXPECT_THAT(ParseXdsNodeMetadata("=v").status().message(),
              HasSubstr("--envoy_xds_node_metadata: entry \"=v\" is not key=value"));
  EXPECT_THAT(ParseXdsNodeMetadata("a=1,a=2").status().message(),
              HasSubstr("--envoy_xds_node_metadata: key \"a\" is repeated"));
}

TEST(XdsOptionsTest, DisabledAndValidOptionsPass) {
  EXPECT_OK(ValidateEnvoyXdsOptions(EnvoyXdsOptions()));
  EXPECT_OK(ValidateEnvoyXdsOptions(Valid()));
  EnvoyXdsOptions tls = Valid();
  tls.tls = true;
  tls.tls_ca_file = "ca.pem";
  tls.tls_cert_file = "c.pem";
  tls.tls_key_file = "c.key";
  tls.tls_server_name = "xds.example.org";
  EXPECT_OK(ValidateEnvoyXdsOptions(tls));
}

TEST(XdsOptionsTest, Refusals) {
  EnvoyXdsOptions o = Valid();
  o.server = "localhost";
  ExpectRefused(o, "--envoy_xds_server: expected host:port, got \"localhost\"");
  o.server = "localhost:0";
  ExpectRefused(o, "--envoy_xds_server: expected host:port");
  o = Valid();
  o.node_id.clear();
  ExpectRefused(o, "--envoy_xds_node_id: must not be empty");
  o = Valid();
  o.tls_ca_file = "ca.pem";
  ExpectRefused(o, "--envoy_xds_tls_ca_file: set, but --envoy_xds_tls is false");
  o = Valid();
  o.tls_server_name = "x";
  ExpectRefused(o, "--envoy_xds_tls_server_name: set, but --envoy_xds_tls is false");
  o = Valid();
  o.tls = true;
  o.tls_cert_file = "c.pem";
  ExpectRefused(o, "--envoy_xds_tls_key_file: the client certificate and its key go together");
  o = Valid();
  o.retry_initial = absl::ZeroDuration();
  ExpectRefused(o, "--envoy_xds_retry_initial: must be positive");
  o = Valid();
  o.retry_initial = absl::Seconds(2);
  o.retry_max = absl::Seconds(1);
  ExpectRefused(o, "--envoy_xds_retry_max: must be finite and at least --envoy_xds_retry_initial");
}

// The server's validation: xDS or a directory, not both; the xDS rules apply.
TEST(XdsOptionsTest, TheServerRefusesXdsWithAConfigDirectory) {
  ServerOptions o;
  o.limits.envoy_xds = Valid();
  EXPECT_OK(ValidateServerOptions(o));
  o.limits.envoy_config_dir = "/etc/ratelimit";
  absl::Status s = ValidateServerOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--envoy_xds_server: set together with --envoy_config_dir"));
  o.limits.envoy_config_dir.clear();
  o.limits.envoy_xds.retry_initial = absl::ZeroDuration();
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--envoy_xds_retry_initial"));
}

}  // namespace
}  // namespace ratelimit
