// envoy.service.ratelimit.v3.RateLimitService over real gRPC on port 0, in process, with a
// fake clock and an in-memory store: the semantics of ShouldRateLimit.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::envoy::type::v3::RateLimitUnit;
using ::ratelimit::testing::Descriptor;
using ::ratelimit::testing::EnvoyRequest;
using ::ratelimit::testing::kMinuteStart;
using ::ratelimit::testing::kSecond;
using Response = rlsv3::RateLimitResponse;

using EnvoyServiceTest = ::ratelimit::testing::EnvoyServiceTestBase;

// envoyproxy/ratelimit's behaviour: 20 per minute called 25 times.
TEST_F(EnvoyServiceTest, ReferenceScenarioTwentyPerMinute) {
  Start(
      "domain: ref\ndescriptors:\n  - key: api\n"
      "    rate_limit: {unit: minute, requests_per_unit: 20}\n");
  for (int i = 0; i < 25; ++i) {
    const Response r = Call("ref", {{{{"api", "v1"}}}});
    ASSERT_EQ(r.statuses_size(), 1);
    const auto& s = r.statuses(0);
    if (i < 20) {
      EXPECT_EQ(r.overall_code(), Response::OK) << i;
      EXPECT_EQ(s.code(), Response::OK) << i;
      EXPECT_EQ(s.limit_remaining(), static_cast<uint32_t>(19 - i));
    } else {
      EXPECT_EQ(r.overall_code(), Response::OVER_LIMIT) << i;
      EXPECT_EQ(s.code(), Response::OVER_LIMIT) << i;
      EXPECT_EQ(s.limit_remaining(), 0u);
    }
    EXPECT_EQ(s.current_limit().requests_per_unit(), 20u);
    EXPECT_EQ(s.current_limit().unit(), Response::RateLimit::MINUTE);
    EXPECT_EQ(s.duration_until_reset().seconds(), 50);
  }
  clock_.Set(kMinuteStart + 60 * kSecond);  // the next window
  EXPECT_EQ(Call("ref", {{{{"api", "v1"}}}}).statuses(0).limit_remaining(), 19u);
}

// All-or-nothing: a second descriptor that is over does not drain the first (the reference
// would have counted every one of these calls against "a").
TEST_F(EnvoyServiceTest, OverDescriptorDoesNotDrainTheOthers) {
  Start(
      "domain: web\ndescriptors:\n"
      "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"
      "  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 1}\n");
  Response first = Call("web", {{{{"a", "x"}}}, {{{"b", "x"}}}});
  EXPECT_EQ(first.overall_code(), Response::OK);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 19u);
  EXPECT_EQ(first.statuses(1).limit_remaining(), 0u);
  for (int i = 0; i < 5; ++i) {
    Response r = Call("web", {{{{"a", "x"}}}, {{{"b", "x"}}}});
    EXPECT_EQ(r.overall_code(), Response::OVER_LIMIT);
    EXPECT_EQ(r.statuses(0).code(), Response::OK);    // "a" on its own would allow
    EXPECT_EQ(r.statuses(0).limit_remaining(), 19u);  // ... and was not consumed
    EXPECT_EQ(r.statuses(1).code(), Response::OVER_LIMIT);
  }
  EXPECT_EQ(Call("web", {{{{"a", "x"}}}}).statuses(0).limit_remaining(), 18u);
}

TEST_F(EnvoyServiceTest, NestedDescriptorsAndDepth) {
  Start(R"(domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
)");
  const Descriptor marketing{{{"message_type", "marketing"}, {"to_number", "2061111111"}}};
  const Descriptor number{{{"to_number", "2061111111"}}};
  Response r = Call("messaging", {marketing, number});
  EXPECT_EQ(r.statuses(0).limit_remaining(), 4u);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 5u);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 99u);
  // Another number has counters of its own.
  r = Call("messaging", {{{{"message_type", "marketing"}, {"to_number", "2062222222"}}}});
  EXPECT_EQ(r.statuses(0).limit_remaining(), 4u);
  // Depth must match: the parent alone and a deeper descriptor have no limit.
  r = Call("messaging", {{{{"message_type", "marketing"}}},
                         {{{"to_number", "1"}, {"extra", "x"}}},
                         {{{"message_type", "transactional"}, {"to_number", "1"}}}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.statuses(i).code(), Response::OK);
    EXPECT_FALSE(r.statuses(i).has_current_limit()) << i;
  }
}

TEST_F(EnvoyServiceTest, WildcardValues) {
  Start(
      "domain: w\ndescriptors:\n"
      "  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
      "  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 10}\n");
  // Every value under the wildcard has its own counter, under the wildcard rule's limit.
  EXPECT_EQ(Call("w", {{{{"path", "/api/a"}}}}).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(Call("w", {{{{"path", "/api/a"}}}}).statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(Call("w", {{{{"path", "/api/a"}}}}).overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(Call("w", {{{{"path", "/api/b"}}}}).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(Call("w", {{{{"path", "/web"}}}}).statuses(0).limit_remaining(), 9u);
}

TEST_F(EnvoyServiceTest, UnlimitedNeverLimits) {
  Start("domain: i\ndescriptors:\n  - key: ldap\n    rate_limit: {unlimited: true}\n");
  for (int i = 0; i < 50; ++i) {
    const Response r = Call("i", {{{{"ldap", "x"}}}});
    EXPECT_EQ(r.overall_code(), Response::OK);
    EXPECT_EQ(r.statuses(0).limit_remaining(), 4294967295u);
    EXPECT_FALSE(r.statuses(0).has_current_limit());
  }
}

TEST_F(EnvoyServiceTest, ReplacesDropsTheReplacedLimit) {
  Start(R"(domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
)");
  const Descriptor d1{{{"key_1", "value_1"}, {"user", "bkthomps"}}};
  const Descriptor d2{{{"key_2", "value_2"}, {"user", "bkthomps"}}};
  Response both = Call("example7", {d1, d2});
  EXPECT_FALSE(both.statuses(0).has_current_limit());  // replaced: not evaluated
  EXPECT_EQ(both.statuses(0).code(), Response::OK);
  EXPECT_EQ(both.statuses(1).limit_remaining(), 9u);
  // The replaced limit was not changed by that request.
  EXPECT_EQ(Call("example7", {d1}).statuses(0).limit_remaining(), 4u);
}

TEST_F(EnvoyServiceTest, ShadowModeReportsOkAndIsCounted) {
  Start(R"(domain: s
descriptors:
  - key: user
    value: user-a
    shadow_mode: true
    rate_limit: {requests_per_unit: 1, unit: minute}
  - key: api
    rate_limit: {requests_per_unit: 10, unit: minute}
)");
  for (int i = 0; i < 3; ++i) {
    const Response r = Call("s", {{{{"user", "user-a"}}}, {{{"api", "x"}}}});
    EXPECT_EQ(r.overall_code(), Response::OK) << i;
    EXPECT_EQ(r.statuses(0).code(), Response::OK) << i;
    EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
    // The shadow limit being over does not stop the others from being counted.
    EXPECT_EQ(r.statuses(1).limit_remaining(), static_cast<uint32_t>(9 - i));
  }
  const auto stats = server_->envoy_service()->stats().Snapshot();
  ASSERT_TRUE(stats.contains("s.user_user-a"));
  EXPECT_EQ(stats.at("s.user_user-a").total_hits, 3u);
  EXPECT_EQ(stats.at("s.user_user-a").within_limit, 1u);
  EXPECT_EQ(stats.at("s.user_user-a").over_limit, 2u);
  EXPECT_EQ(stats.at("s.user_user-a").shadow_mode, 2u);
  EXPECT_EQ(stats.at("s.api").within_limit, 3u);
}

TEST_F(EnvoyServiceTest, HitsAddendZeroChecksWithoutConsuming) {
  Start(
      "domain: h\ndescriptors:\n"
      "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
      "  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n");
  const Descriptor check{{{"a", "x"}}, 0};
  for (int i = 0; i < 3; ++i) {
    const Response r = Call("h", {check});
    EXPECT_EQ(r.statuses(0).code(), Response::OK);
    EXPECT_EQ(r.statuses(0).limit_remaining(), 2u);
  }
  EXPECT_EQ(Call("h", {{{{"a", "x"}}, 2}}).statuses(0).limit_remaining(), 0u);
  Response r = Call("h", {check, {{{"b", "x"}}}});
  EXPECT_EQ(r.statuses(0).code(), Response::OVER_LIMIT);  // exhausted: no hit would pass
  EXPECT_EQ(r.overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 5u);  // all-or-nothing: "b" was not consumed
  EXPECT_EQ(Call("h", {{{{"b", "x"}}}}).statuses(0).limit_remaining(), 4u);
}

TEST_F(EnvoyServiceTest, RequestAndDescriptorHitsAddend) {
  Start(
      "domain: h\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "20}\n");
  EXPECT_EQ(Call("h", {{{{"a", "x"}}}}, 5).statuses(0).limit_remaining(), 15u);
  EXPECT_EQ(Call("h", {{{{"a", "x"}}, 3}}, 5).statuses(0).limit_remaining(), 12u);
  const Response over = Call("h", {{{{"a", "x"}}}}, 13);
  EXPECT_EQ(over.overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).limit_remaining(), 12u);      // nothing taken
  const Response never = Call("h", {{{{"a", "y"}}, 21}});  // more than the limit holds
  EXPECT_EQ(never.overall_code(), Response::OVER_LIMIT);
}

TEST_F(EnvoyServiceTest, LimitOverrideFromEnvoy) {
  Start(
      "domain: o\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "100}\n");
  const Descriptor d{{{"a", "x"}}, std::nullopt, std::make_pair(3u, RateLimitUnit::HOUR)};
  for (int i = 0; i < 3; ++i) {
    const Response r = Call("o", {d});
    EXPECT_EQ(r.statuses(0).code(), Response::OK);
    EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 3u);
    EXPECT_EQ(r.statuses(0).current_limit().unit(), Response::RateLimit::HOUR);
    EXPECT_EQ(r.statuses(0).limit_remaining(), static_cast<uint32_t>(2 - i));
  }
  EXPECT_EQ(Call("o", {d}).overall_code(), Response::OVER_LIMIT);
  // The configured limit keeps its own counter.
  EXPECT_EQ(Call("o", {{{{"a", "x"}}}}).statuses(0).limit_remaining(), 99u);
}

TEST_F(EnvoyServiceTest, EveryUnitSecondThroughYearAndWeek) {
  Start(R"(domain: u
descriptors:
  - {key: second, rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: minute, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: hour, rate_limit: {unit: hour, requests_per_unit: 2}}
  - {key: day, rate_limit: {unit: day, requests_per_unit: 2}}
  - {key: week, rate_limit: {unit: week, requests_per_unit: 2}}
  - {key: month, rate_limit: {unit: month, requests_per_unit: 2}}
  - {key: year, rate_limit: {unit: year, requests_per_unit: 2}}
)");
  const struct {
    const char* key;
    int64_t seconds;
    Response::RateLimit::Unit unit;
  } units[] = {{"second", 1, Response::RateLimit::SECOND},
               {"minute", 60, Response::RateLimit::MINUTE},
               {"hour", 3600, Response::RateLimit::HOUR},
               {"day", 86400, Response::RateLimit::DAY},
               {"week", 7 * 86400, Response::RateLimit::WEEK},
               {"month", 30 * 86400, Response::RateLimit::MONTH},
               {"year", 365 * 86400, Response::RateLimit::YEAR}};
  for (const auto& u : units) {
    const int64_t now = int64_t{1700000000} * kSecond + 123456;
    clock_.Set(now);
    const int64_t period = u.seconds * kSecond;
    const int64_t reset = period - now % period;  // windows aligned to multiples of the unit
    for (int i = 0; i < 3; ++i) {
      const Response r = Call("u", {{{{u.key, "x"}}}});
      const auto& s = r.statuses(0);
      EXPECT_EQ(s.code(), i < 2 ? Response::OK : Response::OVER_LIMIT) << u.key << i;
      EXPECT_EQ(s.limit_remaining(), static_cast<uint32_t>(i < 2 ? 1 - i : 0)) << u.key;
      EXPECT_EQ(s.current_limit().unit(), u.unit);
      EXPECT_EQ(
          s.duration_until_reset().seconds() * kSecond + s.duration_until_reset().nanos() / 1000,
          reset)
          << u.key;
    }
    clock_.Set(now + reset - 1);  // still the same window
    EXPECT_EQ(Call("u", {{{{u.key, "x"}}}}).overall_code(), Response::OVER_LIMIT) << u.key;
    clock_.Set(now + reset);  // the next window starts full
    const Response next = Call("u", {{{{u.key, "x"}}}});
    EXPECT_EQ(next.overall_code(), Response::OK) << u.key;
    EXPECT_EQ(next.statuses(0).limit_remaining(), 1u) << u.key;
    EXPECT_EQ(next.statuses(0).duration_until_reset().seconds(), u.seconds) << u.key;
  }
}

TEST_F(EnvoyServiceTest, StatusesInRequestOrder) {
  Start(R"(domain: o
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: b, rate_limit: {unit: hour, requests_per_unit: 7}}
  - {key: u, rate_limit: {unlimited: true}}
)");
  const Response r = Call(
      "o", {{{{"b", "1"}}}, {{{"none", "1"}}}, {{{"a", "1"}}}, {{{"u", "1"}}}, {{{"b", "1"}}}});
  ASSERT_EQ(r.statuses_size(), 5);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 7u);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 6u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 3600 - 1699999990 % 3600);
  EXPECT_FALSE(r.statuses(1).has_current_limit());
  EXPECT_EQ(r.statuses(2).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(r.statuses(2).limit_remaining(), 2u);
  EXPECT_EQ(r.statuses(2).duration_until_reset().seconds(), 1);
  EXPECT_EQ(r.statuses(3).limit_remaining(), 4294967295u);
  // The same counter named twice: the second sees the first's hit.
  EXPECT_EQ(r.statuses(4).limit_remaining(), 5u);
}

TEST_F(EnvoyServiceTest, UnknownDomainIsOk) {
  Start(
      "domain: known\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "1}\n");
  for (int i = 0; i < 3; ++i) {
    const Response r = Call("unknown", {{{{"a", "x"}}}, {{{"b", "y"}}}});
    EXPECT_EQ(r.overall_code(), Response::OK);
    ASSERT_EQ(r.statuses_size(), 2);
    EXPECT_FALSE(r.statuses(0).has_current_limit());
  }
}

TEST_F(EnvoyServiceTest, BadInputIsInvalidArgumentAndChangesNothing) {
  Start(
      "domain: b\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "5}\n");
  const auto code = [&](const rlsv3::RateLimitRequest& r) {
    return client_->ShouldRateLimit(r).status();
  };
  absl::Status s = code(EnvoyRequest("", {{{{"a", "x"}}}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "domain: must not be empty");
  s = code(EnvoyRequest("b", {}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "descriptors: at least one descriptor is required");
  s = code(EnvoyRequest("b", {{{{"a", "x"}}}, {{}}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "descriptors[1].entries: at least one entry is required");
  s = code(EnvoyRequest("b", {{{{"a", "x"}}, uint64_t{1} << 60}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "descriptors[0].hits_addend: must be at most 1e15"))
      << s;
  EXPECT_EQ(Call("b", {{{{"a", "x"}}}}).statuses(0).limit_remaining(), 4u);
}

TEST_F(EnvoyServiceTest, BlockedRuleDeniesAndConsumesNothing) {
  Start(
      "domain: x\ndescriptors:\n"
      "  - key: ip\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n"
      "  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n");
  const Response r = Call("x", {{{{"ip", "50.0.0.5"}}}, {{{"ip", "50.0.0.6"}}}});
  EXPECT_EQ(r.overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).code(), Response::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 0u);
  EXPECT_EQ(r.statuses(1).code(), Response::OK);
  EXPECT_EQ(Call("x", {{{{"ip", "50.0.0.6"}}}}).statuses(0).limit_remaining(), 9u);
}

}  // namespace
}  // namespace ratelimit
