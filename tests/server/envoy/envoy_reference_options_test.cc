// What envoyproxy/ratelimit has besides the basics: value_to_metric, share_threshold, rule
// metadata in dynamic_metadata, near_limit statistics and configurable header names, from the
// YAML to the answer over real gRPC (fake clock, port 0, in-memory store).
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/envoy/envoy_convert.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Descriptor;
using ::ratelimit::testing::EnvoyClient;
using ::ratelimit::testing::EnvoyRequest;
using ::testing::HasSubstr;
using Response = rlsv3::RateLimitResponse;

constexpr auto MustParse = testing::MustParseEnvoyDomain;
constexpr auto ParseError = testing::EnvoyDomainParseError;

// The statistics key of entries {k, v}..., or "-" when no limit applies.
std::string StatKey(const EnvoyDomain& d, std::vector<std::pair<std::string, std::string>> kv) {
  std::vector<EnvoyEntry> entries;
  for (const auto& [k, v] : kv) entries.push_back(EnvoyEntry{k, v});
  const EnvoyMatch m = MatchDescriptor(d, entries);
  return m.limit ? m.stat_key : "-";
}

// ---- value_to_metric ------------------------------------------------------------------------

// The reference README's example10 and example10_wildcard.
TEST(EnvoyReferenceTest, ValueToMetricPutsTheValueInTheStatKey) {
  const EnvoyDomain d = MustParse(R"(
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plain
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 1}
)");
  EXPECT_EQ(StatKey(d, {{"route", "api"}, {"http_method", "GET"}, {"subject_id", "123"}}),
            "example10.route_api.http_method_GET.subject_id");
  EXPECT_EQ(StatKey(d, {{"route", "web"}, {"http_method", "POST"}, {"subject_id", "456"}}),
            "example10.route_web.http_method_POST.subject_id");
  // With a wildcard, the full value.
  EXPECT_EQ(StatKey(d, {{"user", "alice"}, {"action", "readfile"}, {"resource", "documents"}}),
            "example10.user_alice.action_readfile.resource");
  // Without the flag: the configured path.
  EXPECT_EQ(StatKey(d, {{"plain", "p"}, {"method", "GET"}}), "example10.plain.method");
}

TEST(EnvoyReferenceTest, ValueToMetricYieldsToDetailedMetric) {
  const EnvoyDomain d = MustParse(R"(
domain: s
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        descriptors:
          - key: user
            detailed_metric: true
            value_to_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: method
        value_to_metric: false
        rate_limit: {unit: minute, requests_per_unit: 60}
)");
  // detailed_metric: every level with the request's value.
  EXPECT_EQ(StatKey(d, {{"route", "r1"}, {"method", "GET"}, {"user", "u1"}}),
            "s.route_r1.method_GET.user_u1");
  // A configured value is the value; a key-only level without the flag shows only its key.
  EXPECT_EQ(StatKey(d, {{"route", "r1"}, {"method", "PUT"}}), "s.route_r1.method");
}

// ---- share_threshold ------------------------------------------------------------------------

// The reference README's example11.
constexpr char kExample11[] = R"(domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
)";

TEST(EnvoyReferenceTest, ShareThresholdKeepsThePatternInTheStatKey) {
  const EnvoyDomain d = MustParse(kExample11);
  EXPECT_EQ(StatKey(d, {{"files", "files/a.pdf"}}), "example11.files_files/*");
  EXPECT_EQ(StatKey(d, {{"files", "files/b.csv"}}), "example11.files_files/*");
  // value_to_metric and detailed_metric show the pattern of a share_threshold level.
  EXPECT_EQ(StatKey(d, {{"route", "api/v1"}, {"method", "GET"}}), "example11.route_api/*.method");
  EXPECT_EQ(StatKey(d, {{"service", "svc/user"}, {"endpoint", "get"}}),
            "example11.service_svc/*.endpoint_get");
}

TEST(EnvoyReferenceTest, ShareThresholdSharesOneCounterAcrossWildcardValues) {
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfig({{"example11.yaml", kExample11}});
  ASSERT_OK(config);
  auto key = [&](const std::string& k, const std::string& v) {
    rlsv3::RateLimitRequest r = EnvoyRequest("example11", {{{{k, v}}}});
    absl::StatusOr<std::vector<EnvoyDescriptorPlan>> plan = PlanEnvoyRequest(r, *config);
    EXPECT_OK(plan);
    return plan.ok() ? (*plan)[0].requests[0].name + "/" + (*plan)[0].requests[0].key : "";
  };
  EXPECT_EQ(key("files", "files/a.pdf"), key("files", "files/b.csv"));
  EXPECT_NE(key("files_no_share", "files_no_share/a.pdf"),
            key("files_no_share", "files_no_share/b.csv"));
}

TEST(EnvoyReferenceTest, ShareThresholdNeedsAWildcardValue) {
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: k\n    value: v\n"
                         "    share_threshold: true\n"
                         "    rate_limit: {unit: minute, requests_per_unit: 1}\n"),
              HasSubstr("test.yaml:5:22: descriptors[0].share_threshold: only applies to a "
                        "wildcard value"));
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n"),
              HasSubstr("descriptors[0].share_threshold"));
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: k\n    value_to_metric: maybe\n"),
              HasSubstr("descriptors[0].value_to_metric: must be true or false"));
  // false on a plain value is accepted, as the reference.
  EXPECT_EQ(ParseError("domain: d\ndescriptors:\n  - key: k\n    value: v\n"
                       "    share_threshold: false\n"),
            "");
}

// ---- metadata -------------------------------------------------------------------------------

TEST(EnvoyReferenceTest, MetadataKeepsAnyYamlMapInTheRule) {
  const EnvoyDomain d = MustParse(R"(
domain: m
descriptors:
  - key: k
    metadata:
      team: growth
      count: 3
      ratio: 0.5
      on: true
      quoted: "true"
      nothing: ~
      list: [1, two, {three: 3}]
      nested: {a: {b: c}}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: empty
    metadata: {}
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  const std::shared_ptr<const google::protobuf::Struct>& m = d.descriptors.nodes[0].limit->metadata;
  ASSERT_NE(m, nullptr);
  const auto& f = m->fields();
  EXPECT_EQ(f.at("team").string_value(), "growth");
  EXPECT_EQ(f.at("count").number_value(), 3);
  EXPECT_EQ(f.at("ratio").number_value(), 0.5);
  EXPECT_TRUE(f.at("on").bool_value());
  EXPECT_EQ(f.at("quoted").string_value(), "true");
  EXPECT_TRUE(f.at("nothing").has_null_value());
  ASSERT_EQ(f.at("list").list_value().values_size(), 3);
  EXPECT_EQ(f.at("list").list_value().values(1).string_value(), "two");
  EXPECT_EQ(f.at("list").list_value().values(2).struct_value().fields().at("three").number_value(),
            3);
  EXPECT_EQ(
      f.at("nested").struct_value().fields().at("a").struct_value().fields().at("b").string_value(),
      "c");
  EXPECT_EQ(d.descriptors.nodes[1].limit->metadata, nullptr);
}

TEST(EnvoyReferenceTest, MetadataMustBeAMapping) {
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: k\n    metadata: [a, b]\n"),
              HasSubstr("test.yaml:4:15: descriptors[0].metadata: must be a mapping"));
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: k\n    metadata: text\n"),
              HasSubstr("descriptors[0].metadata: must be a mapping"));
}

// ---- header names ---------------------------------------------------------------------------

TEST(EnvoyReferenceTest, HeaderNamesMustBeHttpTokens) {
  EXPECT_TRUE(IsHttpHeaderName("X-RateLimit-Limit"));
  EXPECT_TRUE(IsHttpHeaderName("x_rl.v1!"));
  EXPECT_FALSE(IsHttpHeaderName(""));
  EXPECT_FALSE(IsHttpHeaderName("X RateLimit"));
  EXPECT_FALSE(IsHttpHeaderName("X-RateLimit:"));
  EXPECT_FALSE(IsHttpHeaderName("Ratelimit\n"));
}

// ---- over real gRPC -------------------------------------------------------------------------

class EnvoyReferenceServerTest : public ::testing::Test {
 protected:
  void Start(const std::string& yaml, const std::function<void(LimitsOptions&)>& change) {
    std::filesystem::create_directories(dir_.File("envoy"));
    testing::WriteFileAtomically(dir_.File("envoy/config.yaml"), yaml);
    ServerOptions options;
    options.listen.address = "127.0.0.1:0";
    options.limits.envoy_config_dir = dir_.File("envoy");
    change(options.limits);
    auto server = RateLimitServer::Start(options, clock_, std::make_unique<MemoryStateStore>());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<EnvoyClient>("127.0.0.1:" + std::to_string(server_->port()));
  }

  Response Call(const std::string& domain, const std::vector<Descriptor>& descriptors) {
    absl::StatusOr<Response> r = client_->ShouldRateLimit(EnvoyRequest(domain, descriptors));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Response();
  }

  testing::TempDir dir_;
  testing::FakeClock clock_{testing::kMinuteStart + 10 * testing::kSecond};
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<EnvoyClient> client_;
};

// The README's example11: files/* shares 10 per hour; files_no_share/* has 10 per value.
TEST_F(EnvoyReferenceServerTest, ShareThresholdExampleOverGrpc) {
  Start(kExample11, [](LimitsOptions&) {});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Call("example11", {{{{"files", "files/a.pdf"}}}}).overall_code(), Response::OK);
    EXPECT_EQ(Call("example11", {{{{"files", "files/b.csv"}}}}).overall_code(), Response::OK);
  }
  EXPECT_EQ(Call("example11", {{{{"files", "files/c.txt"}}}}).overall_code(), Response::OVER_LIMIT);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Call("example11", {{{{"files_no_share", "files_no_share/a.pdf"}}}}).overall_code(),
              Response::OK);
  }
  EXPECT_EQ(Call("example11", {{{{"files_no_share", "files_no_share/a.pdf"}}}}).overall_code(),
            Response::OVER_LIMIT);
  EXPECT_EQ(Call("example11", {{{{"files_no_share", "files_no_share/b.csv"}}}}).overall_code(),
            Response::OK);
  const auto stats = server_->envoy_service()->stats().Snapshot();
  EXPECT_EQ(stats.at("example11.files_files/*").total_hits, 11u);
  EXPECT_EQ(stats.at("example11.files_files/*").over_limit, 1u);
}

TEST_F(EnvoyReferenceServerTest, DynamicMetadataCarriesPassedRulesMetadata) {
  const std::string yaml = R"(domain: md
descriptors:
  - key: user
    metadata: {team: growth, tags: {tier: free}}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    metadata: {team: search, tags: {owner: ana}}
    rate_limit: {unit: minute, requests_per_unit: 5}
)";
  Start(yaml, [](LimitsOptions& o) { o.envoy_response_dynamic_metadata = true; });
  Response r = Call("md", {{{{"user", "u1"}}}, {{{"path", "/a"}}}});
  ASSERT_EQ(r.overall_code(), Response::OK);
  const auto& f = r.dynamic_metadata().fields();
  EXPECT_EQ(f.at("domain").string_value(), "md");
  EXPECT_EQ(f.at("descriptors").list_value().values_size(), 2);
  const auto& merged = f.at("metadata").struct_value().fields();
  EXPECT_EQ(merged.at("team").string_value(), "growth");
  EXPECT_EQ(merged.at("tags").struct_value().fields().size(), 2u);
  // user is over now: only path's metadata.
  r = Call("md", {{{{"user", "u1"}}}, {{{"path", "/a"}}}});
  ASSERT_EQ(r.overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(r.dynamic_metadata()
                .fields()
                .at("metadata")
                .struct_value()
                .fields()
                .at("team")
                .string_value(),
            "search");
}

TEST_F(EnvoyReferenceServerTest, NoDynamicMetadataUnlessEnabled) {
  Start(
      "domain: md\ndescriptors:\n  - key: user\n    metadata: {team: growth}\n"
      "    rate_limit: {unit: minute, requests_per_unit: 1}\n",
      [](LimitsOptions&) {});
  EXPECT_FALSE(Call("md", {{{{"user", "u1"}}}}).has_dynamic_metadata());
}

TEST_F(EnvoyReferenceServerTest, HeaderNamesAreConfigurable) {
  Start(
      "domain: h\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "20}\n",
      [](LimitsOptions& o) {
        o.envoy_ratelimit_headers = true;
        o.envoy_ratelimit_limit_header = "X-RateLimit-Limit";
        o.envoy_ratelimit_remaining_header = "X-RateLimit-Remaining";
        o.envoy_ratelimit_reset_header = "X-RateLimit-Reset";
      });
  const Response r = Call("h", {{{{"a", "x"}}}});
  ASSERT_EQ(r.response_headers_to_add_size(), 3);
  EXPECT_EQ(r.response_headers_to_add(0).key(), "X-RateLimit-Limit");
  EXPECT_EQ(r.response_headers_to_add(0).value(), "20");
  EXPECT_EQ(r.response_headers_to_add(1).key(), "X-RateLimit-Remaining");
  EXPECT_EQ(r.response_headers_to_add(1).value(), "19");
  EXPECT_EQ(r.response_headers_to_add(2).key(), "X-RateLimit-Reset");
  EXPECT_EQ(r.response_headers_to_add(2).value(), "50");
}

TEST_F(EnvoyReferenceServerTest, NearLimitRatioIsTheServersSetting) {
  Start(
      "domain: n\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "10}\n",
      [](LimitsOptions& o) { o.envoy_near_limit_ratio = 0.5; });
  for (int i = 0; i < 11; ++i) Call("n", {{{{"a", "x"}}}});
  // Threshold 5: hits 6 to 10 are near; the 11th is over.
  const EnvoyRuleCounters c = server_->envoy_service()->stats().Snapshot().at("n.a");
  EXPECT_EQ(c.near_limit, 5u);
  EXPECT_EQ(c.over_limit, 1u);
}

}  // namespace
}  // namespace ratelimit
