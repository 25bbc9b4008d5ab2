// The envoyproxy/ratelimit YAML format: parsing, errors with file:line, descriptor matching.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_config_loader.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kSecond;
using ::testing::HasSubstr;

constexpr auto MustParse = testing::MustParseEnvoyDomain;
constexpr auto ParseError = testing::EnvoyDomainParseError;

// The limit name matched by entries {k, v}..., or "-" when none applies.
std::string Match(const EnvoyDomain& d, std::vector<std::pair<std::string, std::string>> kv) {
  std::vector<EnvoyEntry> entries;
  for (const auto& [k, v] : kv) entries.push_back(EnvoyEntry{k, v});
  const EnvoyMatch m = MatchDescriptor(d, entries);
  return m.limit ? m.limit->limit_name : "-";
}

TEST(EnvoyConfigTest, ParsesEveryKey) {
  const EnvoyDomain d = MustParse(R"(
domain: example
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        detailed_metric: true
        rate_limit:
          name: a
          replaces: [{name: b}]
          unit: Second
          requests_per_unit: 10
  - key: tb
    rate_limit:
      unit: minute
      requests_per_unit: 60
      algorithm: token_bucket
      burst: 5
      max_reserved: 100
  - key: ldap
    rate_limit:
      unlimited: true
)");
  EXPECT_EQ(d.name, "example");
  EXPECT_EQ(d.source, "test.yaml");
  ASSERT_EQ(d.descriptors.nodes.size(), 3u);
  const EnvoyDescriptorNode& user = d.descriptors.nodes[0].children.nodes[0];
  ASSERT_TRUE(user.limit.has_value());
  EXPECT_EQ(user.limit->limit_name, "example.service.user_user-a");
  EXPECT_EQ(user.limit->name, "a");
  EXPECT_EQ(user.limit->replaces, std::vector<std::string>{"b"});
  ASSERT_EQ(user.limit->limits.size(), 1u);
  EXPECT_EQ(user.limit->limits[0].name, "a");
  EXPECT_EQ(user.limit->limits[0].unit, EnvoyUnit::kSecond);
  EXPECT_EQ(user.limit->limits[0].requests_per_unit, 10u);
  EXPECT_TRUE(user.limit->shadow_mode);
  EXPECT_TRUE(user.limit->detailed_metric);
  EXPECT_EQ(user.limit->limits[0].algorithm, EnvoyAlgorithm::kFixedWindow);
  EXPECT_THAT(user.limit->where, HasSubstr("test.yaml:6:"));
  const EnvoyRateLimit& tb = *d.descriptors.nodes[1].limit;
  ASSERT_EQ(tb.limits.size(), 1u);
  EXPECT_EQ(tb.limits[0].algorithm, EnvoyAlgorithm::kTokenBucket);
  EXPECT_EQ(tb.limits[0].burst, 5u);
  EXPECT_EQ(tb.limits[0].max_reserved, 100u);
  EXPECT_TRUE(d.descriptors.nodes[2].limit->unlimited);
  EXPECT_TRUE(d.descriptors.nodes[2].limit->limits.empty());
  EXPECT_FALSE(d.descriptors.nodes[0].limit.has_value());
}

TEST(EnvoyConfigTest, UnitsAndTheirWindows) {
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kSecond), 1);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kMinute), 60);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kHour), 3600);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kDay), 86400);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kWeek), 7 * 86400);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kMonth), 30 * 86400);  // as envoyproxy/ratelimit
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kYear), 365 * 86400);
  EXPECT_EQ(ParseEnvoyUnit("week"), EnvoyUnit::kWeek);
  EXPECT_EQ(ParseEnvoyUnit("YEAR"), EnvoyUnit::kYear);
  EXPECT_EQ(ParseEnvoyUnit("fortnight"), std::nullopt);
  EXPECT_EQ(ParseEnvoyUnit("unknown"), std::nullopt);
}

TEST(EnvoyConfigTest, ErrorsNameFileLineAndField) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      uint: second\n",
       "test.yaml:5:7: descriptors[0].rate_limit: unknown key \"uint\""},
      {"domain: d\ndescriptors:\n  - key: a\n    vale: x\n",
       "test.yaml:4:5: descriptors[0]: unknown key \"vale\""},
      {"domain: d\ndomains: x\n", "test.yaml:2:1: document: unknown key \"domains\""},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n"
       "      requests_per_unit: 1\n",
       "test.yaml:5:13: descriptors[0].rate_limit.unit: invalid unit \"fortnight\""},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n",
       "test.yaml:5:7: descriptors[0].rate_limit.unit: required"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n",
       "descriptors[0].rate_limit.requests_per_unit: required"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
       "      requests_per_unit: -1\n",
       "test.yaml:6:26: descriptors[0].rate_limit.requests_per_unit: must be a whole number"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n"
       "      unit: second\n",
       "test.yaml:6:13: descriptors[0].rate_limit.unit: must not be set when unlimited is true"},
      {"descriptors: []\n", "test.yaml:1:1: domain: required"},
      {"domain: \"\"\n", "test.yaml:1:9: domain: must not be empty"},
      {"", "domain: required (the file is empty)"},
      {"domain: d\ndescriptors:\n  - value: x\n", "test.yaml:3:5: descriptors[0].key: required"},
      {"domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
       "test.yaml:4:5: descriptors[1]: duplicate descriptor \"d.a\""},
      {"domain: d\ndescriptors:\n  - key: a\n    value: x*\n  - key: a\n    value: x*\n",
       "descriptors[1]: duplicate descriptor \"d.a_x*\""},
      {"domain: d\ndescriptors:\n  - key: a\n    key: b\n",
       "test.yaml:4:5: descriptors[0]: key \"key\" is repeated"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
       "      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
       "descriptors[0].rate_limit.replaces[0].name: must not be empty"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n"
       "      requests_per_unit: 1\n      replaces:\n        - name: x\n",
       "a limit cannot replace itself"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
       "      requests_per_unit: 1\n      algorithm: leaky\n",
       "test.yaml:7:18: descriptors[0].rate_limit.algorithm: must be fixed_window or token_bucket"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
       "      requests_per_unit: 1\n      burst: 5\n",
       "test.yaml:7:14: descriptors[0].rate_limit.burst: only applies to algorithm: token_bucket"},
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
       "      requests_per_unit: 1\n      algorithm: token_bucket\n      burst: 0\n",
       "descriptors[0].rate_limit.burst: must be a whole number between 1 and 4294967295"},
      {"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
       "test.yaml:4:18: descriptors[0].shadow_mode: must be true or false"},
      {"domain: d\ndescriptors:\n  key: a\n", "descriptors: must be a list of descriptors"},
      {"domain: d\ndescriptors: [\n", "test.yaml:"},
      {"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n"
       "        rate_limit: {unit: hour, requests_per_unit: 1, bogus: 1}\n",
       "test.yaml:6:56: descriptors[0].descriptors[0].rate_limit: unknown key \"bogus\""},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseError(c.yaml), HasSubstr(c.want)) << c.yaml;
  }
  // A limit name is at most 256 bytes: domain plus path.
  const std::string long_value(300, 'v');
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: a\n    value: " + long_value +
                         "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
              HasSubstr("test.yaml:3:5: descriptors[0]: limit name: must be at most 256 bytes"));
}

TEST(EnvoyConfigTest, RateLimitsGiveARuleSeveralLimits) {
  const EnvoyDomain d = MustParse(R"(
domain: api
descriptors:
  - key: user
    quota_mode: true
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 10, replaces: [{name: old}]}
      - {name: per_day, unit: day, requests_per_unit: 1000, algorithm: token_bucket, burst: 50}
)");
  const EnvoyRateLimit& rule = *d.descriptors.nodes[0].limit;
  ASSERT_EQ(rule.limits.size(), 2u);
  EXPECT_EQ(rule.name, "per_second");
  EXPECT_EQ(rule.limits[0].name, "per_second");
  EXPECT_EQ(rule.limits[0].unit, EnvoyUnit::kSecond);
  EXPECT_EQ(rule.limits[1].name, "per_day");
  EXPECT_EQ(rule.limits[1].requests_per_unit, 1000u);
  EXPECT_EQ(rule.limits[1].algorithm, EnvoyAlgorithm::kTokenBucket);
  EXPECT_EQ(rule.limits[1].burst, 50u);
  EXPECT_EQ(rule.replaces, std::vector<std::string>{"old"});
  EXPECT_TRUE(rule.quota_mode);
  EXPECT_TRUE(rule.Named("per_day"));
  EXPECT_FALSE(rule.Named("per_week"));
  EXPECT_EQ(EnvoyLimitKeySuffix(0), "");
  EXPECT_EQ(EnvoyLimitKeySuffix(1), "|#1");
}

TEST(EnvoyConfigTest, RateLimitsErrorsNameTheField) {
  const std::string head = "domain: d\ndescriptors:\n  - key: a\n";
  const std::pair<std::string, std::string> cases[] = {
      {"    rate_limit: {unit: second, requests_per_unit: 1}\n"
       "    rate_limits: [{unit: day, requests_per_unit: 1}]\n",
       "test.yaml:5:18: descriptors[0].rate_limits: a descriptor has rate_limit or rate_limits, "
       "not both"},
      {"    rate_limits: []\n",
       "descriptors[0].rate_limits: must be a non-empty list of rate_limit blocks"},
      {"    rate_limits: {unit: day}\n",
       "descriptors[0].rate_limits: must be a non-empty list of rate_limit blocks"},
      {"    rate_limits: [{unlimited: true}]\n",
       "descriptors[0].rate_limits[0].unlimited: not allowed in rate_limits"},
      {"    rate_limits: [{unit: day, requests_per_unit: 1}, {unit: hour}]\n",
       "descriptors[0].rate_limits[1].requests_per_unit: required"},
      {"    rate_limits: [{name: x, unit: day, requests_per_unit: 1},"
       " {name: x, unit: hour, requests_per_unit: 2}]\n",
       "descriptors[0].rate_limits[1].name: \"x\" names another limit of this rule too"},
      {"    rate_limits: ["
       "{unit: day, requests_per_unit: 1}, {unit: day, requests_per_unit: 1}, "
       "{unit: day, requests_per_unit: 1}, {unit: day, requests_per_unit: 1}, "
       "{unit: day, requests_per_unit: 1}, {unit: day, requests_per_unit: 1}, "
       "{unit: day, requests_per_unit: 1}, {unit: day, requests_per_unit: 1}, "
       "{unit: day, requests_per_unit: 1}]\n",
       "descriptors[0].rate_limits: at most 8 limits, got 9"},
      {"    quota_mode: sometimes\n", "descriptors[0].quota_mode: must be true or false"},
  };
  for (const auto& [body, want] : cases) {
    EXPECT_THAT(ParseError(head + body), HasSubstr(want)) << body;
  }
}

TEST(EnvoyConfigTest, ConcurrencyRulesHoldCapacityAndLeaseTtl) {
  const EnvoyDomain d = MustParse(R"(
domain: api
descriptors:
  - key: org
    shadow_mode: true
    concurrency: {capacity: 5, lease_ttl: 2m}
  - key: job
    concurrency: {capacity: 1}
)");
  const EnvoyRateLimit& org = *d.descriptors.nodes[0].limit;
  ASSERT_TRUE(org.concurrency.has_value());
  EXPECT_EQ(org.concurrency->capacity, 5u);
  EXPECT_EQ(org.concurrency->lease_ttl_us, 120 * kSecond);
  EXPECT_TRUE(org.limits.empty());
  EXPECT_TRUE(org.shadow_mode);
  EXPECT_FALSE(org.blocks());
  EXPECT_EQ(d.descriptors.nodes[1].limit->concurrency->lease_ttl_us, kDefaultLeaseTtlMicros);
}

TEST(EnvoyConfigTest, ConcurrencyErrorsNameTheField) {
  const std::string head = "domain: d\ndescriptors:\n  - key: a\n";
  const std::pair<std::string, std::string> cases[] = {
      {"    concurrency: {lease_ttl: 1m}\n", "descriptors[0].concurrency.capacity: required"},
      {"    concurrency: {capacity: 0}\n",
       "descriptors[0].concurrency.capacity: must be a whole number between 1"},
      {"    concurrency: {capacity: 2000000000}\n",
       "descriptors[0].concurrency.capacity: must be at most"},
      {"    concurrency: {capacity: 2, lease_ttl: 60}\n",
       "descriptors[0].concurrency.lease_ttl: not a duration"},
      {"    concurrency: {capacity: 2, lease_ttl: 2d}\n",
       "descriptors[0].concurrency.lease_ttl: must be between 1ms and 24h"},
      {"    concurrency: {capacity: 2, burst: 3}\n",
       "descriptors[0].concurrency: unknown key \"burst\""},
      {"    rate_limit: {unit: second, requests_per_unit: 1}\n    concurrency: {capacity: 1}\n",
       "descriptors[0].concurrency: a descriptor has a rate limit or a concurrency rule, not both"},
  };
  for (const auto& [body, want] : cases) {
    EXPECT_THAT(ParseError(head + body), HasSubstr(want)) << body;
  }
  EXPECT_THAT(ParseError("domain: d\ndescriptors:\n  - key: ratelimit.lease\n"
                         "    concurrency: {capacity: 1}\n"),
              HasSubstr("descriptors[0].key: \"ratelimit.lease\" is reserved"));
}

TEST(EnvoyConfigTest, DomainTwiceInADirectoryNamesBothFiles) {
  const std::vector<EnvoyConfigFile> files = {{"dir/a.yaml", "domain: d\n"},
                                              {"dir/b.yaml", "# the web tier\n\ndomain:   d\n"}};
  absl::StatusOr<EnvoyConfig> c = BuildEnvoyConfig(files);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "dir/b.yaml:3:11: domain: \"d\" is already defined at dir/a.yaml:1:9");
}

TEST(EnvoyConfigTest, ReadsYamlFilesOfADirectory) {
  testing::TempDir dir;
  testing::WriteFileAtomically(dir.File("b.yaml"), "domain: b\n");
  testing::WriteFileAtomically(dir.File("a.yml"), "domain: a\n");
  testing::WriteFileAtomically(dir.File(".hidden.yaml"), "domain: hidden\n");
  testing::WriteFileAtomically(dir.File("notes.txt"), "not yaml");
  absl::StatusOr<std::vector<EnvoyConfigFile>> files = ReadEnvoyConfigDir(dir.path());
  ASSERT_OK(files);
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, dir.File("a.yml"));
  EXPECT_EQ((*files)[1].path, dir.File("b.yaml"));
  absl::StatusOr<EnvoyConfig> c = BuildEnvoyConfig(*files);
  ASSERT_OK(c);
  EXPECT_NE(c->FindDomain("a"), nullptr);
  EXPECT_NE(c->FindDomain("b"), nullptr);
  EXPECT_EQ(c->FindDomain("hidden"), nullptr);
  EXPECT_EQ(ReadEnvoyConfigDir(dir.File("missing")).status().code(), absl::StatusCode::kNotFound);
}

constexpr char kMatching[] = R"(
domain: m
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    value: "10.*"
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: path
    value: "/api/*/items"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: "/api/*"
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: whitelisted
  - key: nested_only
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: child
        value: c
        rate_limit: {unit: hour, requests_per_unit: 2}
)";

TEST(EnvoyConfigTest, ExactBeatsWildcardBeatsKeyOnly) {
  const EnvoyDomain d = MustParse(kMatching);
  EXPECT_EQ(Match(d, {{"remote_address", "50.0.0.5"}}), "m.remote_address_50.0.0.5");
  EXPECT_EQ(Match(d, {{"remote_address", "10.1.2.3"}}), "m.remote_address_10.*");
  EXPECT_EQ(Match(d, {{"remote_address", "11.1.2.3"}}), "m.remote_address");
  // Wildcards may sit anywhere; the first matching one in file order wins.
  EXPECT_EQ(Match(d, {{"path", "/api/v1/items"}}), "m.path_/api/*/items");
  EXPECT_EQ(Match(d, {{"path", "/api/v1/users"}}), "m.path_/api/*");
  EXPECT_EQ(Match(d, {{"path", "/other"}}), "-");
  EXPECT_EQ(Match(d, {{"unknown", "x"}}), "-");
}

TEST(EnvoyConfigTest, LimitAppliesOnlyAtTheDepthOfTheLastEntry) {
  const EnvoyDomain d = MustParse(kMatching);
  EXPECT_EQ(Match(d, {{"message_type", "marketing"}, {"to_number", "2061111111"}}),
            "m.message_type_marketing.to_number");
  EXPECT_EQ(Match(d, {{"to_number", "2061111111"}}), "m.to_number");
  // The parent level has no limit of its own.
  EXPECT_EQ(Match(d, {{"message_type", "marketing"}}), "-");
  // More entries than configured levels: no limit (the reference's depth rule).
  EXPECT_EQ(Match(d, {{"to_number", "1"}, {"extra", "x"}}), "-");
  EXPECT_EQ(Match(d, {{"nested_only", "x"}}), "m.nested_only");
  EXPECT_EQ(Match(d, {{"nested_only", "x"}, {"child", "c"}}), "m.nested_only.child_c");
  EXPECT_EQ(Match(d, {{"nested_only", "x"}, {"child", "other"}}), "-");
  // A rule without limit and children matches and limits nothing.
  EXPECT_EQ(Match(d, {{"whitelisted", "x"}}), "-");
}

TEST(EnvoyConfigTest, DetailedMetricKeepsStatisticsPerValue) {
  const EnvoyDomain d = MustParse(R"(
domain: s
descriptors:
  - key: k
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    value: v1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
)");
  std::vector<EnvoyEntry> a = {{"k", "unspecified"}};
  EXPECT_EQ(MatchDescriptor(d, a).stat_key, "s.k_unspecified");
  EXPECT_EQ(MatchDescriptor(d, a).limit->limit_name, "s.k");  // one counter set per rule
  std::vector<EnvoyEntry> b = {{"k", "v1"}};
  EXPECT_EQ(MatchDescriptor(d, b).stat_key, "s.k_v1");
}

TEST(EnvoyConfigTest, AStateNameParsesBackAndFindsItsRule) {
  EnvoyConfig config;
  config.domains.emplace("s", MustParse(R"(
domain: s
descriptors:
  - key: k
    value: "a:b|c"
    descriptors:
      - key: n
        rate_limit: {unit: minute, requests_per_unit: 10}
)"));
  const std::vector<EnvoyEntry> path = {{"k", "a:b|c"}, {"n", ""}};
  const std::string name = EnvoyStateName("s", path, /*override_limit=*/false);
  const std::optional<EnvoyStatePath> parsed = ParseEnvoyStateName(name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->domain, "s");
  EXPECT_FALSE(parsed->override_limit);
  using Pair = std::pair<std::string, std::string>;
  EXPECT_EQ(parsed->path, (std::vector<Pair>{{"k", "a:b|c"}, {"n", ""}}));
  const EnvoyRateLimit* rule = FindEnvoyRule(config, name);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->limits[0].requests_per_unit, 10u);
  // Another path, another domain, a name Envoy sent ('O') and malformed names find nothing.
  EXPECT_EQ(FindEnvoyRule(config, EnvoyStateName("s", {{"k", "x"}}, false)), nullptr);
  EXPECT_EQ(FindEnvoyRule(config, EnvoyStateName("t", path, false)), nullptr);
  EXPECT_EQ(FindEnvoyRule(config, EnvoyStateName("s", path, true)), nullptr);
  for (const char* bad : {"", "X1:s", "R", "R9:s", "R1:s1:k", "Rx:s", "R-1:s"}) {
    EXPECT_FALSE(ParseEnvoyStateName(bad).has_value()) << bad;
  }
}

// The example shipped in deploy/envoy loads, and matches what deploy/envoy/envoy.yaml sends.
TEST(EnvoyConfigTest, DeployExampleLoads) {
  absl::StatusOr<std::vector<EnvoyConfigFile>> files =
      ReadEnvoyConfigDir(std::string(RATELIMIT_SOURCE_DIR) + "/deploy/envoy/limits");
  ASSERT_OK(files);
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfig(*files);
  ASSERT_OK(config);
  const EnvoyDomain* d = config->FindDomain("frontproxy");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(Match(*d, {{"remote_address", "192.0.2.1"}}), "frontproxy.remote_address");
  EXPECT_EQ(Match(*d, {{"remote_address", "198.51.100.9"}}),
            "frontproxy.remote_address_198.51.100.*");
  EXPECT_EQ(Match(*d, {{"generic_key", "api"}, {"user", "alice"}}),
            "frontproxy.generic_key_api.user");
  EXPECT_EQ(Match(*d, {{"generic_key", "search"}}), "frontproxy.generic_key_search");
  // The LLM route's descriptors: tokens (charged, then refunded) and requests, per user.
  EXPECT_EQ(Match(*d, {{"generic_key", "llm_tokens"}, {"user", "alice"}}),
            "frontproxy.generic_key_llm_tokens.user");
  const std::vector<EnvoyEntry> tokens_entries = {{"generic_key", "llm_tokens"}, {"user", "alice"}};
  const EnvoyMatch tokens = MatchDescriptor(*d, tokens_entries);
  ASSERT_NE(tokens.limit, nullptr);
  ASSERT_EQ(tokens.limit->limits.size(), 2u);
  EXPECT_EQ(tokens.limit->limits[0].algorithm, EnvoyAlgorithm::kTokenBucket);
  EXPECT_EQ(tokens.limit->limits[0].requests_per_unit, 2000u);
  EXPECT_EQ(tokens.limit->limits[0].burst, std::optional<uint32_t>(20000));
  EXPECT_EQ(tokens.limit->limits[1].unit, EnvoyUnit::kDay);
  EXPECT_EQ(tokens.limit->limits[1].requests_per_unit, 1000000u);
  EXPECT_EQ(Match(*d, {{"generic_key", "llm_requests"}, {"user", "alice"}}),
            "frontproxy.generic_key_llm_requests.user");
  const std::vector<EnvoyEntry> in_flight_entries = {{"generic_key", "llm_in_flight"},
                                                     {"user", "alice"}};
  const EnvoyMatch in_flight = MatchDescriptor(*d, in_flight_entries);
  ASSERT_NE(in_flight.limit, nullptr);
  ASSERT_TRUE(in_flight.limit->concurrency.has_value());
  EXPECT_EQ(in_flight.limit->concurrency->capacity, 4u);
  EXPECT_EQ(in_flight.limit->concurrency->lease_ttl_us, 360 * kSecond);
}

TEST(EnvoyConfigTest, GlobMatch) {
  EXPECT_TRUE(EnvoyGlobMatch("*", ""));
  EXPECT_TRUE(EnvoyGlobMatch("a*", "a"));
  EXPECT_TRUE(EnvoyGlobMatch("a*c", "abbbc"));
  EXPECT_TRUE(EnvoyGlobMatch("*b*", "abc"));
  EXPECT_FALSE(EnvoyGlobMatch("a*c", "abcd"));
  EXPECT_FALSE(EnvoyGlobMatch("abc", "ab"));
  EXPECT_TRUE(EnvoyGlobMatch("a**b", "ab"));
}

}  // namespace
}  // namespace ratelimit
