// Runtime overrides of Envoy descriptor rules: how an adjusted limit is reported in Envoy's
// units, and through a real server (RocksDB, the Envoy API and the OverrideService) a raise, a
// block, an unlimited key and a pattern applied to ShouldRateLimit, the target shown by domain and
// path, and bad or unknown targets refused.
#include "server/envoy/envoy_overrides.h"

#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/server_test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Descriptor;
using ::ratelimit::testing::EnvoyServiceTestBase;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::Refund;

constexpr char kToken[] = "envoy-override-token";

// user: a fixed window of 10 a minute. api_key: a token bucket of 5 a second, burst 20.
constexpr char kConfig[] = R"(domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}
)";

EnvoyLimit Configured(EnvoyUnit unit, uint32_t rpu, bool bucket = false) {
  EnvoyLimit l;
  l.unit = unit;
  l.requests_per_unit = rpu;
  l.algorithm = bucket ? EnvoyAlgorithm::kTokenBucket : EnvoyAlgorithm::kFixedWindow;
  return l;
}

LimitConfig Adjusted(double rate, int64_t period_us, std::optional<double> capacity = {}) {
  LimitConfig c;
  c.rate = rate;
  c.period_us = period_us;
  c.capacity = capacity;
  return c;
}

TEST(EnvoyReportedLimitTest, APeriodOfOneUnitReportsInThatUnit) {
  const EnvoyLimit r =
      EnvoyReportedLimit(Configured(EnvoyUnit::kMinute, 10), Adjusted(300, 3600 * kSecond));
  EXPECT_EQ(r.unit, EnvoyUnit::kHour);
  EXPECT_EQ(r.requests_per_unit, 300u);
}

TEST(EnvoyReportedLimitTest, AnyOtherPeriodIsScaledToTheConfiguredUnitRoundedDown) {
  const EnvoyLimit r =
      EnvoyReportedLimit(Configured(EnvoyUnit::kSecond, 10), Adjusted(25, 2 * kSecond));
  EXPECT_EQ(r.unit, EnvoyUnit::kSecond);
  EXPECT_EQ(r.requests_per_unit, 12u) << "12.5 a second, rounded down";
}

TEST(EnvoyReportedLimitTest, ARateBelowOnePerUnitMovesToALongerUnit) {
  const EnvoyLimit r =
      EnvoyReportedLimit(Configured(EnvoyUnit::kSecond, 10), Adjusted(3, 90 * kSecond));
  EXPECT_EQ(r.unit, EnvoyUnit::kMinute);
  EXPECT_EQ(r.requests_per_unit, 2u) << "3 per 90 s is 2 a minute, rounded down";
}

TEST(EnvoyReportedLimitTest, ATokenBucketReportsTheNewCapacityAsItsBurst) {
  const EnvoyLimit r = EnvoyReportedLimit(Configured(EnvoyUnit::kSecond, 5, /*bucket=*/true),
                                          Adjusted(50, kSecond, 80.5));
  EXPECT_EQ(r.requests_per_unit, 50u);
  ASSERT_TRUE(r.burst.has_value());
  EXPECT_EQ(*r.burst, 80u);
}

TEST(EnvoyReportedLimitTest, AFixedWindowReportsWhatAWindowAdmitsItsRateAtMostItsCapacity) {
  const EnvoyLimit cut =
      EnvoyReportedLimit(Configured(EnvoyUnit::kHour, 10), Adjusted(10, 3600 * kSecond, 2));
  EXPECT_EQ(cut.unit, EnvoyUnit::kHour);
  EXPECT_EQ(cut.requests_per_unit, 2u) << "a window holds at most 2";
  const EnvoyLimit raised =
      EnvoyReportedLimit(Configured(EnvoyUnit::kHour, 10), Adjusted(10, 3600 * kSecond, 20));
  EXPECT_EQ(raised.requests_per_unit, 10u) << "a window refills 10; 20 only after quiet ones";
  const EnvoyLimit slow =
      EnvoyReportedLimit(Configured(EnvoyUnit::kMinute, 10), Adjusted(0.5, 60 * kSecond, 3));
  EXPECT_EQ(slow.unit, EnvoyUnit::kHour);
  EXPECT_EQ(slow.requests_per_unit, 30u) << "half a request a minute";
}

TEST(EnvoyReportedLimitTest, AFixedWindowWithoutRoomForARequestReportsZero) {
  const EnvoyLimit r =
      EnvoyReportedLimit(Configured(EnvoyUnit::kHour, 10), Adjusted(10, 3600 * kSecond, 0.5));
  EXPECT_EQ(r.unit, EnvoyUnit::kHour);
  EXPECT_EQ(r.requests_per_unit, 0u) << "as a rule of requests_per_unit: 0, which blocks";
}

class EnvoyOverridesTest : public EnvoyServiceTestBase {
 protected:
  void SetUp() override {
    // RocksDB (from options.store.open) keeps overrides; the memory store does not.
    Start(kConfig, false, nullptr, [](ServerOptions& o) {
      o.admin.token = kToken;
      o.observability.metrics_listen = "127.0.0.1:0";
    });
    admin_ = RateLimitClient::Connect("127.0.0.1:" + std::to_string(server_->port()),
                                      ClientOptions{absl::Seconds(10), kToken});
  }

  static v1::OverrideTarget Rule(const std::string& descriptor_key) {
    v1::OverrideTarget t;
    t.set_source(v1::ENVOY);
    t.set_name("web");
    t.add_envoy_path()->set_key(descriptor_key);
    return t;
  }
  static v1::SetOverrideRequest Set(v1::OverrideTarget target) {
    v1::SetOverrideRequest r;
    *r.mutable_override()->mutable_target() = std::move(target);
    r.set_actor("ops");
    return r;
  }
  static v1::OverrideTarget Key(v1::OverrideTarget t, const std::string& key) {
    t.set_key(key);
    return t;
  }
  static v1::OverrideTarget Pattern(v1::OverrideTarget t, const std::string& pattern) {
    t.set_key_pattern(pattern);
    return t;
  }
  rlsv3::RateLimitResponse::DescriptorStatus One(const std::string& key, const std::string& value,
                                                 uint64_t hits = 1) {
    const Response r = Call("web", {Descriptor({{key, value}}, hits)});
    EXPECT_EQ(r.statuses_size(), 1);
    return r.statuses_size() == 1 ? r.statuses(0) : rlsv3::RateLimitResponse::DescriptorStatus();
  }

  std::unique_ptr<RateLimitClient> admin_;
};

TEST_F(EnvoyOverridesTest, ARaiseAppliesToOneKeyAndAFixedWindowKeepsItsCount) {
  EXPECT_EQ(One("user", "u1", 4).limit_remaining(), 6u);
  v1::SetOverrideRequest set = Set(Key(Rule("user"), "u1"));
  set.mutable_override()->mutable_limit()->set_rate(100);
  ASSERT_OK(admin_->SetOverride(set));

  const auto raised = One("user", "u1");
  EXPECT_EQ(raised.code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(raised.limit_remaining(), 95u) << "100 - the 4 counted in this window - 1";
  EXPECT_EQ(raised.current_limit().requests_per_unit(), 100u);
  EXPECT_EQ(raised.current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::MINUTE);
  const auto other = One("user", "u2");
  EXPECT_EQ(other.limit_remaining(), 9u) << "another key keeps the configured 10";
  EXPECT_EQ(other.current_limit().requests_per_unit(), 10u);

  // Deleted: back to 10 a minute with the window's count of 5 kept.
  v1::DeleteOverrideRequest del;
  *del.mutable_target() = Key(Rule("user"), "u1");
  ASSERT_OK(admin_->DeleteOverride(del));
  EXPECT_EQ(One("user", "u1").limit_remaining(), 4u);

  const auto [status, metrics] = ::ratelimit::testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(
      absl::StrContains(metrics, "ratelimit_override_decisions_total{limit=\"web.user\"} 1"))
      << metrics;
}

TEST_F(EnvoyOverridesTest, AFixedWindowsCapacityCutIsTheLimitItsStatusReports) {
  v1::SetOverrideRequest set = Set(Key(Rule("user"), "u1"));
  set.mutable_override()->mutable_limit()->set_capacity(2);
  ASSERT_OK(admin_->SetOverride(set));
  for (uint32_t remaining : {1u, 0u}) {
    const auto s = One("user", "u1");
    EXPECT_EQ(s.code(), rlsv3::RateLimitResponse::OK);
    EXPECT_EQ(s.limit_remaining(), remaining);
    EXPECT_EQ(s.current_limit().requests_per_unit(), 2u);
    EXPECT_EQ(s.current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::MINUTE);
  }
  const auto over = One("user", "u1");
  EXPECT_EQ(over.code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.current_limit().requests_per_unit(), 2u);
}

TEST_F(EnvoyOverridesTest, ATokenBucketCutIsClampedAndRefillsAtTheNewRate) {
  EXPECT_EQ(One("api_key", "k", 2).limit_remaining(), 18u);
  v1::SetOverrideRequest set = Set(Key(Rule("api_key"), "k"));
  set.mutable_override()->mutable_limit()->set_capacity(3);
  set.mutable_override()->mutable_limit()->set_rate(1);
  ASSERT_OK(admin_->SetOverride(set));
  const auto cut = One("api_key", "k");
  EXPECT_EQ(cut.limit_remaining(), 2u) << "18 clamped to the new capacity 3, then 1 taken";
  EXPECT_EQ(cut.current_limit().requests_per_unit(), 1u);
  clock_.Advance(kSecond);
  EXPECT_EQ(One("api_key", "k").limit_remaining(), 2u) << "1 a second refilled, 1 taken";
}

TEST_F(EnvoyOverridesTest, BlockedAndUnlimitedTakeNothingAndAPatternMatchesTheValues) {
  v1::SetOverrideRequest block = Set(Pattern(Rule("user"), "bot-*"));
  block.mutable_override()->set_blocked(true);
  ASSERT_OK(admin_->SetOverride(block));
  v1::SetOverrideRequest free = Set(Key(Rule("user"), "vip"));
  free.mutable_override()->set_unlimited(true);
  ASSERT_OK(admin_->SetOverride(free));

  const auto blocked = One("user", "bot-7");
  EXPECT_EQ(blocked.code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(blocked.limit_remaining(), 0u);
  EXPECT_EQ(blocked.current_limit().requests_per_unit(), 0u);
  const auto unlimited = One("user", "vip", 50);
  EXPECT_EQ(unlimited.code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(unlimited.limit_remaining(), std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(One("user", "human").limit_remaining(), 9u);
  // A refund is answered as a configured unlimited rule answers one.
  const Response refund = Call("web", {Refund({{"user", "vip"}}, 3)});
  ASSERT_EQ(refund.statuses_size(), 1);
  EXPECT_EQ(refund.statuses(0).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(refund.statuses(0).limit_remaining(), std::numeric_limits<uint32_t>::max());

  // Nothing was taken from either key while its override stood.
  v1::DeleteOverrideRequest del;
  *del.mutable_target() = Pattern(Rule("user"), "bot-*");
  ASSERT_OK(admin_->DeleteOverride(del));
  *del.mutable_target() = Key(Rule("user"), "vip");
  ASSERT_OK(admin_->DeleteOverride(del));
  EXPECT_EQ(One("user", "bot-7").limit_remaining(), 9u);
  EXPECT_EQ(One("user", "vip").limit_remaining(), 9u);
}

TEST_F(EnvoyOverridesTest, TheTargetIsShownByDomainAndPathAndListedByDomain) {
  v1::SetOverrideRequest set = Set(Key(Rule("user"), "u1"));
  set.mutable_override()->mutable_limit()->set_rate(20);
  ASSERT_OK(admin_->SetOverride(set));
  v1::SetOverrideRequest file_like = Set(Key(Rule("api_key"), "k"));
  file_like.mutable_override()->set_blocked(true);
  ASSERT_OK(admin_->SetOverride(file_like));

  v1::GetOverrideRequest get;
  *get.mutable_target() = Key(Rule("user"), "u1");
  auto got = admin_->GetOverride(get);
  ASSERT_OK(got);
  EXPECT_EQ(got->override().target().source(), v1::ENVOY);
  EXPECT_EQ(got->override().target().name(), "web");
  ASSERT_EQ(got->override().target().envoy_path_size(), 1);
  EXPECT_EQ(got->override().target().envoy_path(0).key(), "user");
  EXPECT_EQ(got->override().target().key(), "u1");
  EXPECT_FALSE(got->override().inert());

  v1::ListOverridesRequest list;
  list.set_source(v1::ENVOY);
  list.set_name("web");
  auto listed = admin_->ListOverrides(list);
  ASSERT_OK(listed);
  EXPECT_EQ(listed->overrides_size(), 2);
  list.set_name("other");
  listed = admin_->ListOverrides(list);
  ASSERT_OK(listed);
  EXPECT_EQ(listed->overrides_size(), 0);
  list.set_source(v1::LIMITS_FILE);
  list.clear_name();
  listed = admin_->ListOverrides(list);
  ASSERT_OK(listed);
  EXPECT_EQ(listed->overrides_size(), 0) << "the limits file's list holds no Envoy override";
}

TEST_F(EnvoyOverridesTest, BadAndUnknownTargetsAreNamedAndChangeNothing) {
  struct Case {
    v1::OverrideTarget target;
    absl::StatusCode code;
    std::string field;
  };
  v1::OverrideTarget no_path = Key(Rule("user"), "u1");
  no_path.clear_envoy_path();
  v1::OverrideTarget empty_key = Key(Rule("user"), "u1");
  empty_key.mutable_envoy_path(0)->clear_key();
  v1::OverrideTarget file_with_path = Key(Rule("user"), "u1");
  file_with_path.set_source(v1::LIMITS_FILE);
  v1::OverrideTarget unknown_domain = Key(Rule("user"), "u1");
  unknown_domain.set_name("nowhere");
  v1::OverrideTarget unknown_path = Key(Rule("nobody"), "u1");
  // Keys no descriptor of the one-level rule makes: two values, a broken escape, no value.
  v1::OverrideTarget two_values = Key(Rule("user"), "a|b");
  v1::OverrideTarget lone_escape = Key(Rule("user"), "a\\");
  v1::OverrideTarget empty_value = Key(Rule("user"), "|");
  const Case cases[] = {
      {two_values, absl::StatusCode::kInvalidArgument, "override.target.key:"},
      {lone_escape, absl::StatusCode::kInvalidArgument, "override.target.key:"},
      {empty_value, absl::StatusCode::kInvalidArgument, "override.target.key:"},
      {no_path, absl::StatusCode::kInvalidArgument, "override.target.envoy_path:"},
      {empty_key, absl::StatusCode::kInvalidArgument, "override.target.envoy_path[0].key:"},
      {file_with_path, absl::StatusCode::kInvalidArgument, "override.target.envoy_path:"},
      {unknown_domain, absl::StatusCode::kNotFound, "override.target.name:"},
      {unknown_path, absl::StatusCode::kNotFound, "override.target.envoy_path:"},
  };
  for (const Case& c : cases) {
    v1::SetOverrideRequest set = Set(c.target);
    set.mutable_override()->mutable_limit()->set_rate(100);
    const absl::Status s = admin_->SetOverride(set).status();
    EXPECT_EQ(s.code(), c.code) << c.field << " " << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.field)) << s;
  }
  v1::ListOverridesRequest list;
  list.set_source(v1::ENVOY);
  auto listed = admin_->ListOverrides(list);
  ASSERT_OK(listed);
  EXPECT_EQ(listed->overrides_size(), 0);
  EXPECT_EQ(One("user", "u1").limit_remaining(), 9u);
}

}  // namespace
}  // namespace ratelimit
