// RateLimitConfig resources as the Envoy configuration: each field of the message written as the
// YAML key the loader reads, defaults left out, and a response's resources loaded together.
#include "server/envoy/xds/xds_convert.h"

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config_loader.h"
#include "tests/support/test_support.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit {
namespace {

namespace rlsconf = ::ratelimit::config::ratelimit::v3;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using Resources = google::protobuf::RepeatedPtrField<google::protobuf::Any>;

Resources Pack(const std::vector<rlsconf::RateLimitConfig>& configs) {
  Resources r;
  for (const rlsconf::RateLimitConfig& c : configs) r.Add()->PackFrom(c);
  return r;
}

// The domain `config` loads as (through the YAML loader).
EnvoyDomain Load(const rlsconf::RateLimitConfig& config) {
  absl::StatusOr<EnvoyDomain> d = ParseEnvoyDomainYaml(RateLimitConfigToYaml(config), "xds:test");
  EXPECT_TRUE(d.ok()) << d.status() << "\n" << RateLimitConfigToYaml(config);
  return d.ok() ? *std::move(d) : EnvoyDomain();
}

rlsconf::RateLimitConfig Config(const std::string& domain) {
  rlsconf::RateLimitConfig c;
  c.set_name("r-" + domain);
  c.set_domain(domain);
  return c;
}

TEST(XdsConvertTest, DomainAndNoDescriptors) {
  EnvoyDomain d = Load(Config("web"));
  EXPECT_EQ(d.name, "web");
  EXPECT_EQ(d.source, "xds:test");
  EXPECT_TRUE(d.descriptors.nodes.empty());
}

TEST(XdsConvertTest, KeyValueAndEveryRateLimitField) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("user");
  d->set_value("alice");
  rlsconf::RateLimitPolicy* p = d->mutable_rate_limit();
  p->set_unit(rlsconf::MINUTE);
  p->set_requests_per_unit(7);
  p->set_name("per-user");
  p->add_replaces()->set_name("global");
  p->add_replaces()->set_name("other");
  EnvoyDomain domain = Load(c);
  ASSERT_EQ(domain.descriptors.nodes.size(), 1u);
  const EnvoyDescriptorNode& n = domain.descriptors.nodes[0];
  EXPECT_EQ(n.key, "user");
  EXPECT_EQ(n.value, "alice");
  ASSERT_TRUE(n.limit.has_value());
  EXPECT_EQ(n.limit->limits[0].unit, EnvoyUnit::kMinute);
  EXPECT_EQ(n.limit->limits[0].requests_per_unit, 7u);
  EXPECT_FALSE(n.limit->unlimited);
  EXPECT_EQ(n.limit->name, "per-user");
  EXPECT_EQ(n.limit->replaces, (std::vector<std::string>{"global", "other"}));
  EXPECT_FALSE(n.limit->shadow_mode);
  EXPECT_FALSE(n.limit->detailed_metric);
}

TEST(XdsConvertTest, EveryUnit) {
  for (const auto& [unit, want] : std::vector<std::pair<rlsconf::RateLimitUnit, EnvoyUnit>>{
           {rlsconf::SECOND, EnvoyUnit::kSecond},
           {rlsconf::MINUTE, EnvoyUnit::kMinute},
           {rlsconf::HOUR, EnvoyUnit::kHour},
           {rlsconf::DAY, EnvoyUnit::kDay},
           {rlsconf::WEEK, EnvoyUnit::kWeek},
           {rlsconf::MONTH, EnvoyUnit::kMonth},
           {rlsconf::YEAR, EnvoyUnit::kYear}}) {
    rlsconf::RateLimitConfig c = Config("web");
    rlsconf::RateLimitDescriptor* d = c.add_descriptors();
    d->set_key("k");
    d->mutable_rate_limit()->set_unit(unit);
    d->mutable_rate_limit()->set_requests_per_unit(1);
    EnvoyDomain domain = Load(c);
    ASSERT_EQ(domain.descriptors.nodes.size(), 1u);
    EXPECT_EQ(domain.descriptors.nodes[0].limit->limits[0].unit, want)
        << rlsconf::RateLimitUnit_Name(unit);
  }
}

TEST(XdsConvertTest, ZeroRequestsPerUnitIsWrittenAndBlocks) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("k");
  d->mutable_rate_limit()->set_unit(rlsconf::SECOND);
  EXPECT_THAT(RateLimitConfigToYaml(c), HasSubstr("requests_per_unit: 0"));
  EXPECT_EQ(Load(c).descriptors.nodes[0].limit->limits[0].requests_per_unit, 0u);
}

TEST(XdsConvertTest, UnlimitedWritesNoUnitNorRequests) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("k");
  d->mutable_rate_limit()->set_unlimited(true);
  const std::string yaml = RateLimitConfigToYaml(c);
  EXPECT_THAT(yaml, Not(HasSubstr("unit:")));
  EXPECT_THAT(yaml, Not(HasSubstr("requests_per_unit")));
  EXPECT_TRUE(Load(c).descriptors.nodes[0].limit->unlimited);
}

TEST(XdsConvertTest, UnlimitedWithAUnitIsRefusedAsInAFile) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("k");
  d->mutable_rate_limit()->set_unlimited(true);
  d->mutable_rate_limit()->set_unit(rlsconf::SECOND);
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Pack({c}));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("descriptors[0].rate_limit.unit: must not be set when unlimited is true"));
}

TEST(XdsConvertTest, UnknownUnitIsLeftOutAndRequired) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("k");
  d->mutable_rate_limit()->set_requests_per_unit(3);
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Pack({c}));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("xds:r-web:"));
  EXPECT_THAT(config.status().message(), HasSubstr("descriptors[0].rate_limit.unit: required"));
}

TEST(XdsConvertTest, ShadowModeAndDetailedMetric) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("k");
  d->set_shadow_mode(true);
  d->set_detailed_metric(true);
  d->mutable_rate_limit()->set_unit(rlsconf::SECOND);
  d->mutable_rate_limit()->set_requests_per_unit(1);
  const EnvoyDomain domain = Load(c);
  const EnvoyDescriptorNode& n = domain.descriptors.nodes.at(0);
  EXPECT_TRUE(n.limit->shadow_mode);
  EXPECT_TRUE(n.limit->detailed_metric);
}

TEST(XdsConvertTest, NestedDescriptors) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* parent = c.add_descriptors();
  parent->set_key("org");
  parent->set_value("acme");
  rlsconf::RateLimitDescriptor* child = parent->add_descriptors();
  child->set_key("user");
  child->mutable_rate_limit()->set_unit(rlsconf::DAY);
  child->mutable_rate_limit()->set_requests_per_unit(9);
  EnvoyDomain d = Load(c);
  ASSERT_EQ(d.descriptors.nodes.size(), 1u);
  EXPECT_FALSE(d.descriptors.nodes[0].limit.has_value());
  ASSERT_EQ(d.descriptors.nodes[0].children.nodes.size(), 1u);
  const EnvoyDescriptorNode& n = d.descriptors.nodes[0].children.nodes[0];
  EXPECT_EQ(n.key, "user");
  EXPECT_EQ(n.limit->limit_name, "web.org_acme.user");
  EXPECT_EQ(n.limit->limits[0].requests_per_unit, 9u);
}

// Strings are quoted: a value YAML would read as a boolean, a number or an alias stays text.
TEST(XdsConvertTest, StringsStayStrings) {
  rlsconf::RateLimitConfig c = Config("web");
  for (const std::string v : {"true", "123", "*x*", "a: b", "&anchor", "with \"quotes\"\n"}) {
    rlsconf::RateLimitDescriptor* d = c.add_descriptors();
    d->set_key("k");
    d->set_value(v);
  }
  EnvoyDomain d = Load(c);
  ASSERT_EQ(d.descriptors.nodes.size(), 6u);
  EXPECT_EQ(d.descriptors.nodes[0].value, "true");
  EXPECT_EQ(d.descriptors.nodes[1].value, "123");
  EXPECT_EQ(d.descriptors.nodes[2].value, "*x*");
  EXPECT_EQ(d.descriptors.nodes[3].value, "a: b");
  EXPECT_EQ(d.descriptors.nodes[4].value, "&anchor");
  EXPECT_EQ(d.descriptors.nodes[5].value, "with \"quotes\"\n");
}

// Fields left at their defaults are not written, so the loader's rules decide (an empty key is
// "required", as in a file).
TEST(XdsConvertTest, DefaultsAreLeftOut) {
  rlsconf::RateLimitConfig c = Config("web");
  c.add_descriptors();
  const std::string yaml = RateLimitConfigToYaml(c);
  for (const char* key : {"value", "rate_limit", "shadow_mode", "detailed_metric", "quota_mode",
                          "metadata", "  descriptors:"}) {
    EXPECT_THAT(yaml, Not(HasSubstr(key))) << yaml;
  }
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Pack({c}));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("descriptors[0].key: required"));
}

// quota_mode and metadata are written under the YAML keys of the same names when set (the
// loader decides whether it knows them); an empty metadata means nothing and is left out.
TEST(XdsConvertTest, QuotaModeAndMetadataAreWrittenWhenSet) {
  rlsconf::RateLimitConfig c = Config("web");
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("k");
  d->set_quota_mode(true);
  auto& fields = *d->mutable_metadata()->mutable_fields();
  fields["team"].set_string_value("payments");
  fields["weight"].set_number_value(3);
  fields["ratio"].set_number_value(0.5);
  fields["on"].set_bool_value(true);
  fields["tags"].mutable_list_value()->add_values()->set_string_value("a");
  (*fields["nested"].mutable_struct_value()->mutable_fields())["x"].set_string_value("y");
  fields["nothing"].set_null_value(google::protobuf::NULL_VALUE);
  rlsconf::RateLimitDescriptor* empty = c.add_descriptors();
  empty->set_key("e");
  empty->mutable_metadata();
  const std::string yaml = RateLimitConfigToYaml(c);
  EXPECT_THAT(yaml, HasSubstr("quota_mode: true"));
  const YAML::Node root = YAML::Load(yaml);
  const YAML::Node metadata = root["descriptors"][0]["metadata"];
  ASSERT_TRUE(metadata.IsMap()) << yaml;
  EXPECT_EQ(metadata["team"].as<std::string>(), "payments");
  EXPECT_EQ(metadata["weight"].Scalar(), "3");
  EXPECT_EQ(metadata["ratio"].as<double>(), 0.5);
  EXPECT_TRUE(metadata["on"].as<bool>());
  EXPECT_EQ(metadata["tags"][0].as<std::string>(), "a");
  EXPECT_EQ(metadata["nested"]["x"].as<std::string>(), "y");
  EXPECT_TRUE(metadata["nothing"].IsNull());
  EXPECT_FALSE(root["descriptors"][1]["metadata"].IsDefined()) << yaml;
}

TEST(XdsConvertTest, ResourcesLoadTogether) {
  absl::StatusOr<EnvoyConfig> config =
      BuildEnvoyConfigFromResources(Pack({Config("web"), Config("mobile")}));
  ASSERT_OK(config);
  ASSERT_EQ(config->domains.size(), 2u);
  EXPECT_EQ(config->FindDomain("web")->source, "xds:r-web");
  EXPECT_EQ(config->FindDomain("mobile")->source, "xds:r-mobile");
}

TEST(XdsConvertTest, NoResourcesNoDomains) {
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Resources());
  ASSERT_OK(config);
  EXPECT_TRUE(config->domains.empty());
}

TEST(XdsConvertTest, AResourceWithoutANameIsNamedByItsIndex) {
  rlsconf::RateLimitConfig c = Config("web");
  c.clear_name();
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Pack({Config("a"), c}));
  ASSERT_OK(config);
  EXPECT_EQ(config->FindDomain("web")->source, "xds:resources[1]");
}

TEST(XdsConvertTest, ADomainInTwoResourcesIsRefusedNamingBoth) {
  rlsconf::RateLimitConfig other = Config("web");
  other.set_name("second");
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Pack({Config("web"), other}));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              ContainsRegex("xds:second:[0-9]+:[0-9]+: domain: \"web\" is already defined at "
                            "xds:r-web:[0-9]+:[0-9]+"));
}

TEST(XdsConvertTest, ARepeatedResourceNameIsRefused) {
  rlsconf::RateLimitConfig other = Config("mobile");
  other.set_name("r-web");
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(Pack({Config("web"), other}));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("resources[1].name: \"r-web\" is repeated"));
}

TEST(XdsConvertTest, AResourceOfAnotherTypeIsRefused) {
  Resources r = Pack({Config("web")});
  google::protobuf::Struct not_a_config;
  r.Add()->PackFrom(not_a_config);
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(r);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              HasSubstr("resources[1].type_url: \"type.googleapis.com/google.protobuf.Struct\""));
}

TEST(XdsConvertTest, UndecodableBytesAreRefused) {
  Resources r;
  r.Add()->set_type_url(kRateLimitConfigTypeUrl);
  r[0].set_value("\xff\xff\xff");
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfigFromResources(r);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("resources[0].value: not a valid"));
}

}  // namespace
}  // namespace ratelimit
