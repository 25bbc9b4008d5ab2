// Envoy request validation and planning, and response building, without a server.
#include "server/envoy/envoy_convert.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config_loader.h"
#include "storage/leases/lease_id.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kSecond;
using ::testing::HasSubstr;
using Kind = EnvoyDescriptorPlan::Kind;
using Code = rlsv3::RateLimitResponse::Code;

constexpr char kConfig[] = R"(
domain: web
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 20}
  - key: vip
    rate_limit: {name: vip, replaces: [{name: per_user}], unit: minute, requests_per_unit: 100}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 40}
  - key: llm
    concurrency: {capacity: 3, lease_ttl: 5m}
)";

// Response options with the rate-limit headers on or off.
EnvoyResponseOptions Headers(bool on) {
  EnvoyResponseOptions o;
  o.ratelimit_headers = on;
  return o;
}

class EnvoyConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<EnvoyConfig> c = BuildEnvoyConfig({{"web.yaml", kConfig}});
    ASSERT_OK(c);
    config_ = *std::move(c);
  }

  static void AddDescriptor(rlsv3::RateLimitRequest& r,
                            std::vector<std::pair<std::string, std::string>> entries) {
    auto* d = r.add_descriptors();
    for (const auto& [k, v] : entries) {
      auto* e = d->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
  }

  rlsv3::RateLimitRequest Request(std::vector<std::pair<std::string, std::string>> entries) {
    rlsv3::RateLimitRequest r;
    r.set_domain("web");
    AddDescriptor(r, std::move(entries));
    return r;
  }

  std::string Error(const rlsv3::RateLimitRequest& r) {
    auto plan = PlanEnvoyRequest(r, config_);
    if (plan.ok()) return "";
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(plan.status().message());
  }

  EnvoyConfig config_;
};

TEST_F(EnvoyConvertTest, BadInputNamesTheField) {
  rlsv3::RateLimitRequest r = Request({{"user", "u1"}});
  r.set_domain("");
  EXPECT_EQ(Error(r), "domain: must not be empty");
  r.set_domain(std::string(300, 'd'));
  EXPECT_THAT(Error(r), HasSubstr("domain: must be at most 256 bytes"));

  rlsv3::RateLimitRequest none;
  none.set_domain("web");
  EXPECT_EQ(Error(none), "descriptors: at least one descriptor is required");

  rlsv3::RateLimitRequest empty = Request({{"user", "u1"}});
  empty.add_descriptors();
  EXPECT_EQ(Error(empty), "descriptors[1].entries: at least one entry is required");

  EXPECT_EQ(Error(Request({{"user", "u1"}, {"", "x"}})),
            "descriptors[0].entries[1].key: must not be empty");
  EXPECT_EQ(Error(Request({{"user", ""}})), "descriptors[0].entries[0].value: must not be empty");

  rlsv3::RateLimitRequest huge = Request({{"user", "u1"}});
  huge.mutable_descriptors(0)->mutable_hits_addend()->set_value(uint64_t{1} << 63);
  EXPECT_THAT(Error(huge), HasSubstr("descriptors[0].hits_addend: must be at most 1e15"));

  rlsv3::RateLimitRequest bad_unit = Request({{"user", "u1"}});
  bad_unit.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(5);
  EXPECT_THAT(Error(bad_unit), HasSubstr("descriptors[0].limit.unit: must be SECOND"));
  bad_unit.mutable_descriptors(0)->mutable_limit()->set_unit(
      static_cast<::envoy::type::v3::RateLimitUnit>(99));
  EXPECT_THAT(Error(bad_unit), HasSubstr("descriptors[0].limit.unit"));

  rlsv3::RateLimitRequest many;
  many.set_domain("web");
  for (int i = 0; i <= kMaxEnvoyDescriptors; ++i) AddDescriptor(many, {{"user", "u"}});
  EXPECT_THAT(Error(many), HasSubstr("descriptors: at most 64 descriptors per request, got 65"));

  std::vector<std::pair<std::string, std::string>> deep(kMaxEnvoyEntries + 1, {"k", "v"});
  EXPECT_THAT(Error(Request(deep)), HasSubstr("descriptors[0].entries: at most 32 entries"));

  EXPECT_THAT(Error(Request({{"user", std::string(2000, 'x')}})),
              HasSubstr("descriptors[0].entries: the joined values are 2000 bytes"));
  // Validation does not depend on the domain being known.
  rlsv3::RateLimitRequest unknown = Request({{"user", ""}});
  unknown.set_domain("nope");
  EXPECT_EQ(Error(unknown), "descriptors[0].entries[0].value: must not be empty");
}

TEST_F(EnvoyConvertTest, NamesKeysAndConfigs) {
  auto plan = PlanEnvoyRequest(Request({{"user", "u|1\\x"}}), config_);
  ASSERT_OK(plan);
  const EnvoyDescriptorPlan& p = (*plan)[0];
  EXPECT_EQ(p.kind, Kind::kLimited);
  EXPECT_EQ(p.rule()->limit_name, "web.user");
  EXPECT_EQ(p.requests[0].name, "R3:web4:user0:");
  EXPECT_EQ(p.requests[0].source, LimitSource::kEnvoy);
  EXPECT_EQ(p.requests[0].key, "u\\|1\\\\x");
  EXPECT_EQ(p.requests[0].count, 1);
  EXPECT_EQ(p.requests[0].config.kind, LimitKind::kFixedWindow);
  EXPECT_EQ(p.requests[0].config.rate, 20);
  EXPECT_EQ(p.requests[0].config.period_us, 60 * testing::kSecond);
  EXPECT_EQ(p.requests[0].config.start_us, 0);  // aligned to minute boundaries
  EXPECT_OK(ValidateLimitConfig(p.requests[0].config, ""));

  std::vector<EnvoyEntry> a = {{"k", "a|b"}, {"k", "c"}};
  std::vector<EnvoyEntry> b = {{"k", "a"}, {"k", "b|c"}};
  EXPECT_NE(EnvoyStateKey(a), EnvoyStateKey(b));
  // What EnvoyStateKey makes is what ValidateEnvoyStateKey accepts, for the rule's depth only.
  EXPECT_OK(ValidateEnvoyStateKey(EnvoyStateKey(a), 2, "key"));
  const std::vector<EnvoyEntry> escaped = {{"k", "\\|\\"}};
  EXPECT_OK(ValidateEnvoyStateKey(EnvoyStateKey(escaped), 1, "key"));
  EXPECT_EQ(ValidateEnvoyStateKey(EnvoyStateKey(a), 3, "key").code(),
            absl::StatusCode::kInvalidArgument);
  const std::pair<const char*, size_t> bad[] = {
      {"a\\", 1}, {"a\\b", 1}, {"a|", 2}, {"|b", 2}, {"a||b", 3}};
  for (const auto& [key, levels] : bad) {
    const absl::Status s = ValidateEnvoyStateKey(key, levels, "key");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_TRUE(absl::StartsWith(s.message(), "key: ")) << s;
  }

  auto tb = PlanEnvoyRequest(Request({{"tb", "x"}}), config_);
  ASSERT_OK(tb);
  const LimitConfig& c = (*tb)[0].requests[0].config;
  EXPECT_EQ(c.kind, LimitKind::kTokenBucket);
  EXPECT_EQ(c.rate, 10);
  EXPECT_EQ(c.period_us, testing::kSecond);
  EXPECT_EQ(c.capacity, 40);
  EXPECT_OK(ValidateLimitConfig(c, ""));
}

TEST_F(EnvoyConvertTest, HitsAddendResolution) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  AddDescriptor(r, {{"user", "a"}});
  AddDescriptor(r, {{"user", "b"}});
  AddDescriptor(r, {{"user", "c"}});
  r.mutable_descriptors(1)->mutable_hits_addend()->set_value(7);
  r.mutable_descriptors(2)->mutable_hits_addend()->set_value(0);
  auto plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].hits, 1u);  // request hits_addend 0 means 1
  EXPECT_EQ((*plan)[1].hits, 7u);  // the descriptor's own wins
  EXPECT_EQ((*plan)[2].hits, 0u);
  EXPECT_TRUE((*plan)[2].check_only);
  EXPECT_EQ((*plan)[2].requests[0].count, 1);
  r.set_hits_addend(3);
  plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].hits, 3u);
  EXPECT_EQ((*plan)[0].requests[0].count, 3);
  EXPECT_EQ((*plan)[1].hits, 7u);
  EXPECT_TRUE((*plan)[2].check_only);
}

TEST_F(EnvoyConvertTest, KindsReplacesAndOverrides) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  AddDescriptor(r, {{"user", "u1"}});
  AddDescriptor(r, {{"vip", "u1"}});
  AddDescriptor(r, {{"ldap", "x"}});
  AddDescriptor(r, {{"banned", "x"}});
  AddDescriptor(r, {{"nothing", "x"}});
  AddDescriptor(r, {{"nothing", "x"}});
  r.mutable_descriptors(5)->mutable_limit()->set_requests_per_unit(3);
  r.mutable_descriptors(5)->mutable_limit()->set_unit(::envoy::type::v3::HOUR);
  auto plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].kind, Kind::kNoLimit);  // per_user replaced by vip
  EXPECT_EQ((*plan)[1].kind, Kind::kLimited);
  EXPECT_EQ((*plan)[2].kind, Kind::kUnlimited);
  EXPECT_EQ((*plan)[3].kind, Kind::kBlocked);
  EXPECT_EQ((*plan)[4].kind, Kind::kNoLimit);
  const EnvoyDescriptorPlan& o = (*plan)[5];
  EXPECT_EQ(o.kind, Kind::kLimited);
  EXPECT_EQ(o.rule()->limit_name, "web.nothing#override");
  EXPECT_EQ(o.requests[0].name, "O3:web7:nothing0:");
  EXPECT_EQ(o.requests[0].source, LimitSource::kEnvoy);
  EXPECT_EQ(o.requests[0].config.rate, 3);
  EXPECT_EQ(o.requests[0].config.period_us, 3600 * testing::kSecond);
  // The plan survives being moved (the override rule lives inside it).
  std::vector<EnvoyDescriptorPlan> moved = *std::move(plan);
  EXPECT_EQ(moved[5].rule()->limits[0].requests_per_unit, 3u);

  // Unknown domain: every descriptor is OK, overrides included (as the reference).
  r.set_domain("other");
  plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  for (const auto& p : *plan) EXPECT_EQ(p.kind, Kind::kNoLimit);
}

// An unlimited rule's replaces take effect ("this path is unlimited, instead of the general
// limit"), as in the reference: the rule it names is not counted.
TEST(EnvoyConvertReplacesTest, AnUnlimitedRuleReplacesTheRulesItNames) {
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfig({{"m.yaml", R"(
domain: m
descriptors:
  - key: a
    rate_limit: {name: la, unit: minute, requests_per_unit: 1}
  - key: u
    rate_limit: {unlimited: true, replaces: [{name: la}]}
)"}});
  ASSERT_OK(config);
  rlsv3::RateLimitRequest r;
  r.set_domain("m");
  for (const char* key : {"u", "a"}) {
    auto* e = r.add_descriptors()->add_entries();
    e->set_key(key);
    e->set_value("1");
  }
  auto plan = PlanEnvoyRequest(r, *config);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].kind, Kind::kUnlimited);
  EXPECT_EQ((*plan)[1].kind, Kind::kNoLimit);
  EXPECT_TRUE((*plan)[1].requests.empty());
}

// Limits Envoy sends for one descriptor path keep a counter per unit (two rate-limit actions of
// 3 a minute and 5 a day both hold), and share one within a unit, as the reference keys them.
TEST_F(EnvoyConvertTest, LimitsEnvoySendsKeepACounterPerUnit) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  const std::pair<uint32_t, ::envoy::type::v3::RateLimitUnit> limits[] = {
      {3, ::envoy::type::v3::MINUTE}, {5, ::envoy::type::v3::DAY}, {7, ::envoy::type::v3::MINUTE}};
  for (const auto& [requests, unit] : limits) {
    AddDescriptor(r, {{"nothing", "v"}});
    auto* limit = r.mutable_descriptors(r.descriptors_size() - 1)->mutable_limit();
    limit->set_requests_per_unit(requests);
    limit->set_unit(unit);
  }
  auto plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  ASSERT_EQ(plan->size(), 3u);
  for (const EnvoyDescriptorPlan& p : *plan) {
    ASSERT_EQ(p.requests.size(), 1u);
    EXPECT_EQ(p.requests[0].name, "O3:web7:nothing0:");
  }
  EXPECT_EQ((*plan)[0].requests[0].key, "v|@minute");
  EXPECT_EQ((*plan)[1].requests[0].key, "v|@day");
  EXPECT_EQ((*plan)[2].requests[0].key, "v|@minute");

  // The values leave room for the unit in the key: 1,016 bytes at most with "|@minute".
  r = Request({{"nothing", std::string(1017, 'v')}});
  r.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(3);
  r.mutable_descriptors(0)->mutable_limit()->set_unit(::envoy::type::v3::MINUTE);
  EXPECT_EQ(Error(r),
            "descriptors[0].entries: the joined values are 1017 bytes; at most 1016 are accepted");
  r.mutable_descriptors(0)->mutable_entries(0)->set_value(std::string(1016, 'v'));
  plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].requests[0].key.size(), kMaxKeyBytes);
}

TEST_F(EnvoyConvertTest, ResponseStatusesAndHeaders) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  AddDescriptor(r, {{"user", "u1"}});
  AddDescriptor(r, {{"tb", "x"}});
  AddDescriptor(r, {{"ldap", "x"}});
  AddDescriptor(r, {{"nothing", "x"}});
  auto plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  const int64_t now = 1700000000 * testing::kSecond;  // 20 s into a minute
  std::vector<EnvoyOutcome> outcomes = {
      {false, 12, now}, {false, 30.5, now}, {false, 0, now}, {false, 0, now}};
  rlsv3::RateLimitResponse resp;
  BuildEnvoyResponse(*plan, outcomes, Headers(true), &resp);
  EXPECT_EQ(resp.overall_code(), rlsv3::RateLimitResponse::OK);
  ASSERT_EQ(resp.statuses_size(), 4);
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 12u);
  EXPECT_EQ(resp.statuses(0).current_limit().name(), "per_user");
  EXPECT_EQ(resp.statuses(0).current_limit().requests_per_unit(), 20u);
  EXPECT_EQ(resp.statuses(0).current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::MINUTE);
  EXPECT_EQ(resp.statuses(0).duration_until_reset().seconds(), 40);
  // Token bucket: 9.5 tokens missing at 10/s -> full again in 0.95 s.
  EXPECT_EQ(resp.statuses(1).limit_remaining(), 30u);
  EXPECT_EQ(resp.statuses(1).duration_until_reset().seconds(), 0);
  EXPECT_EQ(resp.statuses(1).duration_until_reset().nanos(), 950000000);
  EXPECT_EQ(resp.statuses(2).limit_remaining(), 4294967295u);
  EXPECT_FALSE(resp.statuses(2).has_current_limit());
  EXPECT_EQ(resp.statuses(3).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_FALSE(resp.statuses(3).has_current_limit());
  EXPECT_EQ(resp.statuses(3).limit_remaining(), 0u);
  // The most restrictive descriptor is the per-user window: 12 left, reset in 40 s.
  ASSERT_EQ(resp.response_headers_to_add_size(), 3);
  EXPECT_EQ(resp.response_headers_to_add(0).key(), "RateLimit-Limit");
  EXPECT_EQ(resp.response_headers_to_add(0).value(), "20");
  EXPECT_EQ(resp.response_headers_to_add(1).key(), "RateLimit-Remaining");
  EXPECT_EQ(resp.response_headers_to_add(1).value(), "12");
  EXPECT_EQ(resp.response_headers_to_add(2).key(), "RateLimit-Reset");
  EXPECT_EQ(resp.response_headers_to_add(2).value(), "40");

  outcomes[1] = {false, 2.25, now};
  rlsv3::RateLimitResponse resp2;
  BuildEnvoyResponse(*plan, outcomes, Headers(true), &resp2);
  EXPECT_EQ(resp2.response_headers_to_add(0).value(), "40");  // the bucket's burst
  EXPECT_EQ(resp2.response_headers_to_add(1).value(), "2");
  EXPECT_EQ(resp2.response_headers_to_add(2).value(), "4");  // 37.75 missing at 10/s: 3.775 s

  outcomes[0] = {true, 0, now};
  rlsv3::RateLimitResponse resp3;
  BuildEnvoyResponse(*plan, outcomes, Headers(false), &resp3);
  EXPECT_EQ(resp3.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(resp3.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(resp3.statuses(1).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(resp3.response_headers_to_add_size(), 0);
}

// A descriptor of a concurrency rule takes hits_addend slots (default 1) by a new lease, or checks
// one slot with hits_addend 0.
TEST_F(EnvoyConvertTest, AConcurrencyRuleTakesSlotsByANewLease) {
  rlsv3::RateLimitRequest r = Request({{"llm", "u1"}});
  AddDescriptor(r, {{"llm", "u2"}});
  r.mutable_descriptors(0)->mutable_hits_addend()->set_value(2);
  r.mutable_descriptors(1)->mutable_hits_addend()->set_value(0);
  auto plan = PlanEnvoyRequest(r, config_);
  ASSERT_OK(plan);
  const EnvoyRateLimit* rule = (*plan)[0].rule();
  ASSERT_NE(rule, nullptr);
  ASSERT_TRUE(rule->concurrency.has_value());
  EXPECT_EQ((*plan)[0].kind, Kind::kAcquire);
  const LeaseOp& take = (*plan)[0].lease;
  EXPECT_EQ(take.action, LeaseAction::kAcquire);
  EXPECT_EQ(take.count, 2);
  EXPECT_EQ(take.ttl_us, 300 * kSecond);
  EXPECT_EQ(take.key, (StateKey{rule->state_name, "u1", LimitSource::kEnvoy}));
  EXPECT_EQ(take.config.capacity, 3);
  EXPECT_FALSE(take.lease_id.empty());  // a new id (LeaseId::New)
  EXPECT_EQ((*plan)[1].kind, Kind::kAcquire);
  EXPECT_TRUE((*plan)[1].check_only);
  EXPECT_EQ((*plan)[1].lease.action, LeaseAction::kCheck);
  EXPECT_EQ((*plan)[1].lease.count, 1);
}

// A release descriptor is one entry, ratelimit.lease, whose value is the token a response handed
// out: it releases that lease, on the key it was taken on.
TEST_F(EnvoyConvertTest, AReleaseDescriptorReleasesTheLeaseOfItsToken) {
  const std::string state_name = EnvoyStateName("web", {EnvoyEntry{"llm", ""}}, false);
  const LeaseId id = LeaseId::New();
  auto plan = PlanEnvoyRequest(
      Request({{"ratelimit.lease", EnvoyLeaseToken(id, state_name, "u|1")}}), config_);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].kind, Kind::kRelease);
  EXPECT_EQ((*plan)[0].lease.action, LeaseAction::kRelease);
  EXPECT_EQ((*plan)[0].lease.lease_id, id);
  EXPECT_EQ((*plan)[0].lease.key, (StateKey{state_name, "u|1", LimitSource::kEnvoy}));
  // The token of a rule no longer configured releases nothing (its leases end by their TTL).
  const std::string gone = EnvoyStateName("web", {EnvoyEntry{"gpu", ""}}, false);
  plan = PlanEnvoyRequest(Request({{"ratelimit.lease", EnvoyLeaseToken(id, gone, "u1")}}), config_);
  ASSERT_OK(plan);
  EXPECT_EQ((*plan)[0].kind, Kind::kNoLimit);
  // Not a token, or one of another domain.
  EXPECT_THAT(Error(Request({{"ratelimit.lease", "u1"}})),
              HasSubstr("descriptors[0].entries[0].value: not a lease token"));
  const std::string other = EnvoyStateName("mobile", {EnvoyEntry{"llm", ""}}, false);
  EXPECT_THAT(Error(Request({{"ratelimit.lease", EnvoyLeaseToken(id, other, "u1")}})),
              HasSubstr("descriptors[0].entries[0].value: the token names a lease of another "
                        "domain"));
}

TEST_F(EnvoyConvertTest, ConcurrencyRuleErrorsNameTheField) {
  rlsv3::RateLimitRequest two = Request({{"llm", "u1"}});
  AddDescriptor(two, {{"llm", "u2"}});
  EXPECT_THAT(Error(two), HasSubstr("descriptors[1]: a request takes the slots of one "
                                    "concurrency rule at most; descriptors[0] takes some"));
  rlsv3::RateLimitRequest negative = Request({{"llm", "u1"}});
  negative.mutable_descriptors(0)->set_is_negative_hits(true);
  EXPECT_THAT(Error(negative), HasSubstr("descriptors[0].is_negative_hits"));
  rlsv3::RateLimitRequest many = Request({{"llm", "u1"}});
  many.set_hits_addend(2000000000);
  EXPECT_THAT(Error(many), HasSubstr("hits_addend: a concurrency rule takes at most"));
}

// A concurrency rule's status: its capacity as the limit, the free slots as what remains, and,
// denied, how long until enough slots free at the latest.
TEST_F(EnvoyConvertTest, AConcurrencyStatusReportsSlots) {
  auto plan = PlanEnvoyRequest(Request({{"llm", "u1"}}), config_);
  ASSERT_OK(plan);
  const int64_t now = 1000 * kSecond;
  EnvoyOutcome denied;
  denied.over = true;
  denied.now_us = now;
  denied.retry_at_us = now + 7 * kSecond;
  rlsv3::RateLimitResponse resp;
  BuildEnvoyResponse(*plan, {denied}, Headers(true), &resp);
  EXPECT_EQ(resp.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(resp.statuses(0).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(resp.statuses(0).duration_until_reset().seconds(), 7);
  ASSERT_EQ(resp.response_headers_to_add_size(), 3);
  EXPECT_EQ(resp.response_headers_to_add(0).value(), "3");
  EnvoyOutcome taken;
  taken.value = 2;
  taken.now_us = now;
  rlsv3::RateLimitResponse ok;
  BuildEnvoyResponse(*plan, {taken}, Headers(false), &ok);
  EXPECT_EQ(ok.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(ok.statuses(0).limit_remaining(), 2u);
}

}  // namespace
}  // namespace ratelimit
