#include "server/rlqs/rlqs_config.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config_loader.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> Parse(const std::string& yaml) {
  return ParseRlqsQuotaBuckets(YAML::Load(yaml)["quota_buckets"], "edge.yaml");
}

std::shared_ptr<const RlqsDomainConfig> MustParse(const std::string& yaml) {
  absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> c = Parse(yaml);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : std::make_shared<const RlqsDomainConfig>();
}

std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> c = Parse(yaml);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

constexpr char kRules[] = R"(
quota_buckets:
  default: {requests_per_unit: 60, unit: minute}
  rules:
    - name: tenants
      match: {tenant: "*"}
      requests_per_unit: 100
      unit: second
    - name: acme
      match: {tenant: acme}
      requests_per_unit: 500
      unit: second
      burst: 50
      fair_share: {newcomer_reserve: 0.1, reassign_threshold: 0.2, smoothing: 1}
    - name: acme_checkout
      match: {tenant: "*", route: checkout}
      deny_all: true
    - match: {route: "*", tenant: "*"}
      requests_per_unit: 10
      unit: hour
      shadow: true
)";

TEST(RlqsConfigTest, ParsesRulesAndDefault) {
  std::shared_ptr<const RlqsDomainConfig> c = MustParse(kRules);
  ASSERT_EQ(c->rules.size(), 4u);
  EXPECT_EQ(c->default_rule.action, RlqsRuleAction::kLimit);
  EXPECT_DOUBLE_EQ(c->default_rule.rate_per_second, 1);
  EXPECT_DOUBLE_EQ(c->default_rule.burst, 1);
  const RlqsRule& acme = c->rules[1];
  EXPECT_EQ(acme.action, RlqsRuleAction::kLimit);
  EXPECT_DOUBLE_EQ(acme.rate_per_second, 500);
  EXPECT_DOUBLE_EQ(acme.burst, 50);
  EXPECT_DOUBLE_EQ(acme.fair_share.newcomer_reserve, 0.1);
  EXPECT_DOUBLE_EQ(acme.fair_share.reassign_threshold, 0.2);
  EXPECT_DOUBLE_EQ(acme.fair_share.smoothing, 1);
  EXPECT_EQ(acme.where, "edge.yaml:9:7");
  EXPECT_DOUBLE_EQ(c->rules[0].burst, 100);  // one second of the rate
  EXPECT_EQ(c->rules[0].fair_share, FairShareSettings());
  EXPECT_EQ(c->rules[2].action, RlqsRuleAction::kDenyAll);
  EXPECT_TRUE(c->rules[3].shadow);
  EXPECT_EQ(c->rules[3].name, "route=*,tenant=*");  // default name: the sorted match
}

TEST(RlqsConfigTest, MostSpecificRuleWins) {
  std::shared_ptr<const RlqsDomainConfig> c = MustParse(kRules);
  EXPECT_EQ(c->Match({{"tenant", "acme"}}).name, "acme");
  EXPECT_EQ(c->Match({{"tenant", "other"}}).name, "tenants");
  // Extra keys of the bucket do not prevent a match.
  EXPECT_EQ(c->Match({{"region", "eu"}, {"tenant", "other"}}).name, "tenants");
  // One exact value beats two wildcards.
  EXPECT_EQ(c->Match({{"route", "home"}, {"tenant", "acme"}}).name, "acme");
  // As many exact values: more wildcard pairs win.
  EXPECT_EQ(c->Match({{"route", "checkout"}, {"tenant", "acme"}}).name, "acme_checkout");
  // An exact value plus a wildcard beats a single wildcard.
  EXPECT_EQ(c->Match({{"route", "checkout"}, {"tenant", "x"}}).name, "acme_checkout");
  EXPECT_EQ(c->Match({{"route", "home"}, {"tenant", "x"}}).name, "route=*,tenant=*");
  EXPECT_EQ(c->Match({{"route", "home"}}).name, "default");
}

TEST(RlqsConfigTest, EqualSpecificityTheEarlierRuleWins) {
  std::shared_ptr<const RlqsDomainConfig> c = MustParse(R"(
quota_buckets:
  rules:
    - {name: first, match: {a: "1"}, requests_per_unit: 1, unit: second}
    - {name: second, match: {b: "2"}, requests_per_unit: 2, unit: second}
)");
  EXPECT_EQ(c->Match({{"a", "1"}, {"b", "2"}}).name, "first");
}

TEST(RlqsConfigTest, DefaultIsAllowAllUnlessSet) {
  EXPECT_EQ(MustParse("quota_buckets: {}")->default_rule.action, RlqsRuleAction::kAllowAll);
  EXPECT_EQ(MustParse("quota_buckets: {default: deny_all}")->default_rule.action,
            RlqsRuleAction::kDenyAll);
  EXPECT_EQ(MustParse("quota_buckets: {default: allow_all}")->Match({{"k", "v"}}).action,
            RlqsRuleAction::kAllowAll);
}

TEST(RlqsConfigTest, ErrorsNameTheFieldAndItsPlace) {
  EXPECT_EQ(ErrorOf("quota_buckets: {default: maybe}"),
            "edge.yaml:1:26: quota_buckets.default: must be allow_all, deny_all or a limit, got "
            "\"maybe\"");
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, unit: second}]}"),
              HasSubstr("quota_buckets.rules[0].requests_per_unit: required"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{requests_per_unit: 1, unit: second}]}"),
              HasSubstr("quota_buckets.rules[0].match: required"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {}, requests_per_unit: 1, unit: second}]}"),
              HasSubstr("quota_buckets.rules[0].match: at least one pair"));
  EXPECT_THAT(
      ErrorOf("quota_buckets: {rules: [{match: {a: b}, requests_per_unit: 1, unit: week}]}"),
      HasSubstr("quota_buckets.rules[0].unit: invalid unit \"week\""));
  EXPECT_THAT(
      ErrorOf("quota_buckets: {rules: [{match: {a: b}, requests_per_unit: -1, unit: second}]}"),
      HasSubstr("quota_buckets.rules[0].requests_per_unit: must be a whole number"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, requests_per_unit: 1, unit: "
                      "second, burst: 0}]}"),
              HasSubstr("quota_buckets.rules[0].burst: must be a whole number between 1"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, requests_per_unit: 1, unit: "
                      "second, colour: red}]}"),
              HasSubstr("quota_buckets.rules[0]: unknown key \"colour\""));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, requests_per_unit: 1, unit: "
                      "second, fair_share: {newcomer_reserve: 0.9}}]}"),
              HasSubstr("quota_buckets.rules[0].fair_share.newcomer_reserve: must be a number "
                        "from 0 to 0.5"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, requests_per_unit: 1, unit: "
                      "second, fair_share: {smoothing: 0}}]}"),
              HasSubstr("quota_buckets.rules[0].fair_share.smoothing: must be a number above 0"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, deny_all: true, "
                      "requests_per_unit: 1}]}"),
              HasSubstr("quota_buckets.rules[0].requests_per_unit: must not be set with deny_all"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: [{match: {a: b}, shadow: perhaps, deny_all: true}]}"),
              HasSubstr("quota_buckets.rules[0].shadow: must be true or false"));
  EXPECT_THAT(ErrorOf("quota_buckets: {colour: red}"),
              HasSubstr("quota_buckets: unknown key \"colour\""));
  EXPECT_THAT(ErrorOf("quota_buckets: [1]"), HasSubstr("quota_buckets: must be a mapping"));
  EXPECT_THAT(ErrorOf("quota_buckets: {rules: {a: b}}"),
              HasSubstr("quota_buckets.rules: must be a list of rules"));
}

TEST(RlqsConfigTest, DuplicateRulesAreErrors) {
  EXPECT_THAT(ErrorOf(R"(
quota_buckets:
  rules:
    - {name: x, match: {a: "1"}, deny_all: true}
    - {name: x, match: {a: "2"}, deny_all: true}
)"),
              HasSubstr("edge.yaml:5:7: quota_buckets.rules[1].name: \"x\" names another rule"));
  EXPECT_THAT(ErrorOf(R"(
quota_buckets:
  rules:
    - {match: {a: "1", b: "*"}, deny_all: true, name: one}
    - {match: {b: "*", a: "1"}, deny_all: true, name: two}
)"),
              HasSubstr("quota_buckets.rules[1].match: the same pairs as the rule at "
                        "edge.yaml:4:7"));
}

// The section lives in an Envoy domain file: the RLQS stream's domain is the file's.
TEST(RlqsConfigTest, IsASectionOfAnEnvoyDomainFile) {
  absl::StatusOr<EnvoyDomain> d = ParseEnvoyDomainYaml(R"(domain: edge
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
quota_buckets:
  rules:
    - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second}
)",
                                                       "edge.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_NE(d->quota_buckets, nullptr);
  EXPECT_EQ(d->quota_buckets->Match({{"tenant", "a"}}).name, "tenants");
  EXPECT_EQ(d->descriptors.nodes.size(), 1u);

  absl::StatusOr<EnvoyDomain> without = ParseEnvoyDomainYaml("domain: edge\n", "edge.yaml");
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->quota_buckets, nullptr);

  absl::StatusOr<EnvoyDomain> bad = ParseEnvoyDomainYaml(
      "domain: edge\nquota_buckets:\n  rules:\n    - {match: {a: b}, unit: second}\n", "edge.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "edge.yaml:4:7: quota_buckets.rules[0].requests_per_unit: required");
}

}  // namespace
}  // namespace ratelimit
