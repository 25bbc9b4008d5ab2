// The ratelimit.v1 conversions on their own (server/convert.cc): resolving a request's limits to
// their definitions, and a verdict to the response. Pure functions, no server.
#include "server/v1/convert.h"

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/serving/grpc_convert.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSecond = ::ratelimit::testing::kSecond;

LimitConfig Bucket(double rate, int64_t period_us = kSecond) {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = rate;
  c.period_us = period_us;
  return c;
}

LimitSet Defined() {
  LimitSet set;
  set.limits.emplace("api", Bucket(10));
  return set;
}

v1::LimitRequest* AddLimit(v1::RateLimitRequest& request, const std::string& name,
                           const std::string& key) {
  v1::LimitRequest* l = request.add_limits();
  l->set_name(name);
  l->set_key(key);
  return l;
}

void SetInlineBucket(v1::LimitRequest* l, double rate, int64_t period_seconds = 1) {
  v1::LimitConfig* c = l->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(rate);
  c->mutable_period()->set_seconds(period_seconds);
}

// ---- ResolveRequest -----------------------------------------------------------------------

TEST(ResolveRequestTest, DefinedNamesTakeTheServersConfig) {
  v1::RateLimitRequest request;
  AddLimit(request, "api", "u1");
  auto resolved = ResolveRequest(request, Defined());
  ASSERT_OK(resolved);
  ASSERT_EQ(resolved->size(), 1u);
  const LimitRequest& r = (*resolved)[0];
  EXPECT_EQ(r.name, "api");
  EXPECT_EQ(r.key, "u1");
  EXPECT_EQ(r.source, LimitSource::kDefined);
  EXPECT_TRUE(r.config == Bucket(10));
}

TEST(ResolveRequestTest, CountDefaultsToOne) {
  v1::RateLimitRequest request;
  AddLimit(request, "api", "u1");
  AddLimit(request, "api", "u2")->set_count(2.5);
  auto resolved = ResolveRequest(request, Defined());
  ASSERT_OK(resolved);
  EXPECT_EQ((*resolved)[0].count, 1);
  EXPECT_EQ((*resolved)[1].count, 2.5);
}

TEST(ResolveRequestTest, InlineNamesTakeTheirOwnConfig) {
  v1::RateLimitRequest request;
  SetInlineBucket(AddLimit(request, "mine", "k"), 3, 60);
  auto resolved = ResolveRequest(request, Defined());
  ASSERT_OK(resolved);
  const LimitRequest& r = (*resolved)[0];
  EXPECT_EQ(r.source, LimitSource::kInline);
  EXPECT_TRUE(r.config == Bucket(3, 60 * kSecond));
}

TEST(ResolveRequestTest, AnInlineConfigForADefinedNameIsRefused) {
  v1::RateLimitRequest request;
  AddLimit(request, "api", "u1");
  SetInlineBucket(AddLimit(request, "api", "u2"), 3);
  auto resolved = ResolveRequest(request, Defined());
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(resolved.status().message(), HasSubstr("limits[1].config"));
}

TEST(ResolveRequestTest, UnknownNamesAreNotFound) {
  v1::RateLimitRequest request;
  AddLimit(request, "api", "u1");
  AddLimit(request, "nope", "u1");
  auto resolved = ResolveRequest(request, Defined());
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(resolved.status().message(), HasSubstr("limits[1].name"));
  EXPECT_THAT(resolved.status().message(), HasSubstr("\"nope\""));
}

TEST(ResolveRequestTest, InlineLimitsDenyRefusesInlineConfigsOnly) {
  v1::RateLimitRequest defined;
  AddLimit(defined, "api", "u1");
  EXPECT_OK(ResolveRequest(defined, Defined(), InlineLimits::kDeny));

  v1::RateLimitRequest request;
  AddLimit(request, "api", "u1");
  SetInlineBucket(AddLimit(request, "mine", "k"), 3);
  EXPECT_OK(ResolveRequest(request, Defined(), InlineLimits::kAllow));
  auto denied = ResolveRequest(request, Defined(), InlineLimits::kDeny);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.status().message(), HasSubstr("limits[1].config"));
  EXPECT_THAT(denied.status().message(), HasSubstr("--inline_limits=deny"));
}

TEST(ResolveRequestTest, TheSameInlineNameAndKeyTwiceMustCarryOneConfig) {
  v1::RateLimitRequest same;
  SetInlineBucket(AddLimit(same, "mine", "k"), 3);
  SetInlineBucket(AddLimit(same, "mine", "k"), 3);
  auto ok = ResolveRequest(same, Defined());
  ASSERT_OK(ok);
  EXPECT_EQ(ok->size(), 2u);

  // Another key, or another name, may carry another config.
  v1::RateLimitRequest other_key;
  SetInlineBucket(AddLimit(other_key, "mine", "k"), 3);
  SetInlineBucket(AddLimit(other_key, "mine", "j"), 4);
  SetInlineBucket(AddLimit(other_key, "yours", "k"), 5);
  EXPECT_OK(ResolveRequest(other_key, Defined()));

  v1::RateLimitRequest different;
  SetInlineBucket(AddLimit(different, "mine", "k"), 3);
  AddLimit(different, "api", "k");
  SetInlineBucket(AddLimit(different, "mine", "k"), 4);
  auto refused = ResolveRequest(different, Defined());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("limits[2].config"));
  EXPECT_THAT(refused.status().message(), HasSubstr("limits[0]"));
}

TEST(ResolveRequestTest, BadInputIsInvalidArgumentNamingTheField) {
  v1::RateLimitRequest empty;
  EXPECT_EQ(ResolveRequest(empty, Defined()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ResolveRequest(empty, Defined()).status().message(), HasSubstr("limits"));

  v1::RateLimitRequest too_many;
  for (int i = 0; i <= kMaxLimitsPerRequest; ++i) AddLimit(too_many, "api", "u");
  EXPECT_EQ(ResolveRequest(too_many, Defined()).status().code(),
            absl::StatusCode::kInvalidArgument);

  struct Case {
    std::function<void(v1::RateLimitRequest&)> build;
    const char* field;
  };
  const Case cases[] = {
      {[](v1::RateLimitRequest& r) { AddLimit(r, "", "u"); }, "limits[0].name"},
      {[](v1::RateLimitRequest& r) { AddLimit(r, "api", ""); }, "limits[0].key"},
      {[](v1::RateLimitRequest& r) { AddLimit(r, "api", "u")->set_count(0); }, "limits[0].count"},
      {[](v1::RateLimitRequest& r) {
         AddLimit(r, "api", "u");
         AddLimit(r, "api", "u")->set_count(-1);
       },
       "limits[1].count"},
      {[](v1::RateLimitRequest& r) {
         v1::LimitRequest* l = AddLimit(r, "mine", "u");
         SetInlineBucket(l, 3);
         l->mutable_config()->set_kind(v1::KIND_UNSPECIFIED);
       },
       "limits[0].config.kind"},
      {[](v1::RateLimitRequest& r) {
         v1::LimitRequest* l = AddLimit(r, "mine", "u");
         SetInlineBucket(l, 3);
         l->mutable_config()->clear_period();
       },
       "limits[0].config.period"},
      {[](v1::RateLimitRequest& r) {
         v1::LimitRequest* l = AddLimit(r, "mine", "u");
         SetInlineBucket(l, 3);
         l->mutable_config()->mutable_period()->set_nanos(-5);
       },
       "limits[0].config.period"},
      // A limit's fields are checked without their names first; the error still names them in
      // full, after valid limits before it.
      {[](v1::RateLimitRequest& r) {
         AddLimit(r, "api", "u");
         v1::LimitRequest* l = AddLimit(r, "mine", "u");
         SetInlineBucket(l, 3);
         l->mutable_config()->set_capacity(-2);
       },
       "limits[1].config.capacity: "},
      {[](v1::RateLimitRequest& r) {
         AddLimit(r, "api", "u");
         v1::LimitRequest* l = AddLimit(r, "mine", "u");
         SetInlineBucket(l, 3);
         l->mutable_config()->set_rate(std::nan(""));
       },
       "limits[1].config.rate: "},
  };
  for (const Case& c : cases) {
    v1::RateLimitRequest request;
    c.build(request);
    auto resolved = ResolveRequest(request, Defined());
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(resolved.status().message(), HasSubstr(c.field));
  }
}

// ---- CheckSlotCounts ------------------------------------------------------------------------

TEST(CheckSlotCountsTest, AConcurrencyLimitTakesWholeSlotsUpToABillion) {
  LimitConfig slots;
  slots.kind = LimitKind::kConcurrency;
  slots.capacity = 5;
  LimitRequests limits(2);
  limits[0].config = Bucket(10);
  limits[0].count = 0.5;  // tokens of a rate limit: any positive amount
  limits[1].config = slots;
  for (double whole : {1.0, 6.0, 1e9}) {
    limits[1].count = whole;
    const absl::Status s = CheckSlotCounts(limits);
    EXPECT_TRUE(s.ok()) << whole << ": " << s;
  }
  for (double bad : {0.5, 2.25, 1e9 + 1, 1099511627776.0}) {
    limits[1].count = bad;
    const absl::Status s = CheckSlotCounts(limits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("limits[1].count: must be a whole number"));
  }
}

// ---- ResolveBatch ----------------------------------------------------------------------------

// A CHECK entry may name a concurrency limit (it reads slots, as Check does), for whole slots; a
// CONSUME or RESERVE entry may not (only Acquire takes slots). Entries without one read none.
TEST(ResolveBatchTest, OnlyACheckEntryReadsSlotsAndForWholeSlotsOnly) {
  LimitSet defined = Defined();
  LimitConfig slots;
  slots.kind = LimitKind::kConcurrency;
  slots.capacity = 5;
  FillLeaseTtlDefaults(slots);
  defined.limits.emplace("jobs", slots);
  v1::BatchRequest batch;
  auto add = [&batch](v1::BatchEntry::Method method, double slot_count, bool with_rate) {
    v1::BatchEntry* e = batch.add_entries();
    e->set_method(method);
    if (with_rate) AddLimit(*e->mutable_request(), "api", "u1");
    if (slot_count > 0) AddLimit(*e->mutable_request(), "jobs", "u1")->set_count(slot_count);
  };
  add(v1::BatchEntry::CHECK, 2, true);     // 0: reads slots
  add(v1::BatchEntry::CHECK, 0, true);     // 1: a rate limit only
  add(v1::BatchEntry::CONSUME, 1, false);  // 2: refused
  add(v1::BatchEntry::RESERVE, 1, true);   // 3: refused
  add(v1::BatchEntry::CHECK, 0.5, false);  // 4: not a whole slot
  add(v1::BatchEntry::CONSUME, 0, true);   // 5: a rate limit only
  auto plans = ResolveBatch(batch, defined);
  ASSERT_OK(plans);
  ASSERT_EQ(plans->size(), 6u);
  const std::vector<BatchEntryPlan>& p = *plans;
  ASSERT_OK(p[0].error);
  EXPECT_TRUE(NamesConcurrencyLimit(p[0].limits));
  EXPECT_EQ(p[0].limits.size(), 2u);
  ASSERT_OK(p[1].error);
  EXPECT_FALSE(NamesConcurrencyLimit(p[1].limits));
  EXPECT_EQ(p[2].error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p[2].error.message()), HasSubstr("entries[2].limits[0].name"));
  EXPECT_EQ(p[3].error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p[3].error.message()), HasSubstr("entries[3].limits[1].name"));
  EXPECT_EQ(p[4].error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p[4].error.message()), HasSubstr("entries[4].limits[0].count"));
  ASSERT_OK(p[5].error);
  EXPECT_FALSE(NamesConcurrencyLimit(p[5].limits));
}

// ---- ResolveNamedLimit ---------------------------------------------------------------------

TEST(NonNegativeDurationProblemTest, SaysWhyADurationCannotBeRead) {
  auto problem = [](int64_t seconds, int32_t nanos) {
    google::protobuf::Duration d;
    d.set_seconds(seconds);
    d.set_nanos(nanos);
    const char* p = NonNegativeDurationProblem(d);
    return p == nullptr ? std::string("ok") : std::string(p);
  };
  EXPECT_EQ(problem(0, 0), "ok");
  EXPECT_EQ(problem(1, 999999999), "ok");
  EXPECT_EQ(problem(kMaxProtoDurationSeconds, 0), "ok");
  EXPECT_EQ(problem(-1, 0), "must not be negative");
  EXPECT_EQ(problem(0, -1), "must not be negative");
  EXPECT_EQ(problem(-1, -1), "must not be negative");
  const std::string malformed = "is not a valid google.protobuf.Duration";
  EXPECT_EQ(problem(1, 1000000000), malformed);
  EXPECT_EQ(problem(1, -1), malformed);
  EXPECT_EQ(problem(-1, 1), malformed);
  EXPECT_EQ(problem(0, -1000000000), malformed);
  EXPECT_EQ(problem(kMaxProtoDurationSeconds + 1, 0), malformed);
  EXPECT_EQ(problem(-kMaxProtoDurationSeconds - 1, 0), malformed);
}

TEST(DurationTextTest, ShowsTheDurationAsSentAndMalformedFieldsAsTheyAre) {
  google::protobuf::Duration d;
  d.set_seconds(60);
  d.set_nanos(1000);
  EXPECT_EQ(DurationText(d), "1m0.000001s");
  d.set_seconds(-1);
  d.set_nanos(0);
  EXPECT_EQ(DurationText(d), "-1s");
  // Not normalised into the valid duration they would sum to (4.999999999s).
  d.set_seconds(5);
  d.set_nanos(-1);
  EXPECT_EQ(DurationText(d), "{seconds: 5, nanos: -1}");
  d.set_seconds(0);
  d.set_nanos(1000000000);
  EXPECT_EQ(DurationText(d), "{seconds: 0, nanos: 1000000000}");
  absl::StatusOr<int64_t> us = DurationMicros(d, "limits[0].config.period", "");
  ASSERT_FALSE(us.ok());
  EXPECT_EQ(us.status().message(),
            "limits[0].config.period: is not a valid google.protobuf.Duration, got {seconds: 0, "
            "nanos: 1000000000}");
}

TEST(ResolveNamedLimitTest, ResolvesADefinedNameOrAnInlineConfig) {
  absl::StatusOr<LimitRequest> defined = ResolveNamedLimit("api", "u1", nullptr, Defined());
  ASSERT_OK(defined);
  EXPECT_EQ(defined->name, "api");
  EXPECT_EQ(defined->key, "u1");
  EXPECT_EQ(defined->source, LimitSource::kDefined);
  EXPECT_EQ(defined->config, Bucket(10));

  v1::LimitRequest proto;
  SetInlineBucket(&proto, 3);
  absl::StatusOr<LimitRequest> inline_limit =
      ResolveNamedLimit("tmp", "u2", &proto.config(), Defined());
  ASSERT_OK(inline_limit);
  EXPECT_EQ(inline_limit->source, LimitSource::kInline);
  EXPECT_EQ(inline_limit->config, Bucket(3));
}

TEST(ResolveNamedLimitTest, ErrorsNameTheFieldsBare) {
  v1::LimitRequest proto;
  SetInlineBucket(&proto, -1);
  struct Case {
    std::string name, key;
    const v1::LimitConfig* config;
    absl::StatusCode code;
    std::string starts;
  };
  const Case cases[] = {
      {"", "k", nullptr, absl::StatusCode::kInvalidArgument, "name: "},
      {"api", "", nullptr, absl::StatusCode::kInvalidArgument, "key: "},
      {"tmp", "k", &proto.config(), absl::StatusCode::kInvalidArgument, "config.rate: "},
      {"api", "k", &proto.config(), absl::StatusCode::kInvalidArgument, "config: "},
      {"nope", "k", nullptr, absl::StatusCode::kNotFound, "name: "},
  };
  for (const Case& c : cases) {
    absl::StatusOr<LimitRequest> r = ResolveNamedLimit(c.name, c.key, c.config, Defined());
    EXPECT_EQ(r.status().code(), c.code) << c.starts;
    EXPECT_THAT(std::string(r.status().message()), ::testing::StartsWith(c.starts)) << r.status();
  }
  SetInlineBucket(&proto, 3);
  absl::StatusOr<LimitRequest> denied =
      ResolveNamedLimit("tmp", "k", &proto.config(), Defined(), InlineLimits::kDeny);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.status().message()), ::testing::StartsWith("config: "));
}

// ---- VerdictToProto -----------------------------------------------------------------------

std::vector<LimitRequest> TwoLimits() {
  LimitRequest a{"a", "k1", Bucket(10), 1, LimitSource::kDefined};
  LimitRequest b{"b", "k2", Bucket(4), 1, LimitSource::kInline};
  b.config.capacity = 6;
  return {a, b};
}

TEST(VerdictToProtoTest, ResultsFollowTheRequestOrder) {
  Verdict v;
  v.allowed = true;
  v.now_us = 100 * kSecond;
  v.decisions.resize(2);
  v.decisions[0].allowed = true;
  v.decisions[0].value = 9;
  v.decisions[1].allowed = true;
  v.decisions[1].value = 5.5;
  v1::RateLimitResponse response;
  VerdictToProto(v, TwoLimits(), &response);
  EXPECT_TRUE(response.allowed());
  EXPECT_EQ(response.denied_by(), -1);
  EXPECT_EQ(response.reason(), v1::DENY_REASON_UNSPECIFIED);
  EXPECT_FALSE(response.has_retry_at());
  EXPECT_FALSE(response.has_retry_after());
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).name(), "a");
  EXPECT_EQ(response.results(0).key(), "k1");
  EXPECT_TRUE(response.results(0).allowed());
  EXPECT_EQ(response.results(0).value(), 9);
  EXPECT_EQ(response.results(0).capacity(), 10);
  EXPECT_FALSE(response.results(0).has_retry_at());
  EXPECT_EQ(response.results(1).name(), "b");
  EXPECT_EQ(response.results(1).key(), "k2");
  EXPECT_EQ(response.results(1).value(), 5.5);
  EXPECT_EQ(response.results(1).capacity(), 6);
  EXPECT_FALSE(response.failed_open());
}

TEST(VerdictToProtoTest, DeniedByReasonAndRetryTimes) {
  Verdict v;
  v.allowed = false;
  v.now_us = 100 * kSecond;
  v.decisions.resize(2);
  v.decisions[0].allowed = true;
  v.decisions[0].value = 3;
  v.decisions[1].allowed = false;
  v.decisions[1].reason = DenyReason::kInsufficientTokens;
  v.decisions[1].value = 0.25;
  v.decisions[1].retry_at_us = 102 * kSecond + 500000;
  v.denied_by = 1;
  v.retry_at_us = 102 * kSecond + 500000;
  v1::RateLimitResponse response;
  VerdictToProto(v, TwoLimits(), &response);
  EXPECT_FALSE(response.allowed());
  EXPECT_EQ(response.denied_by(), 1);
  EXPECT_EQ(response.reason(), v1::INSUFFICIENT_TOKENS);
  EXPECT_EQ(response.retry_at().seconds(), 102);
  EXPECT_EQ(response.retry_at().nanos(), 500000000);
  EXPECT_EQ(response.retry_after().seconds(), 2);
  EXPECT_EQ(response.retry_after().nanos(), 500000000);
  EXPECT_EQ(response.results(0).reason(), v1::DENY_REASON_UNSPECIFIED);
  EXPECT_FALSE(response.results(0).has_retry_after());
  EXPECT_FALSE(response.results(1).allowed());
  EXPECT_EQ(response.results(1).reason(), v1::INSUFFICIENT_TOKENS);
  EXPECT_EQ(response.results(1).value(), 0.25);
  EXPECT_EQ(response.results(1).retry_at().seconds(), 102);
  EXPECT_EQ(response.results(1).retry_after().seconds(), 2);
  EXPECT_EQ(response.results(1).retry_after().nanos(), 500000000);
}

TEST(VerdictToProtoTest, EveryDenyReasonMapsToItsProtoValue) {
  const std::pair<DenyReason, v1::DenyReason> reasons[] = {
      {DenyReason::kInsufficientTokens, v1::INSUFFICIENT_TOKENS},
      {DenyReason::kCountExceedsCapacity, v1::COUNT_EXCEEDS_CAPACITY},
      {DenyReason::kMaxReservedExceeded, v1::MAX_RESERVED_EXCEEDED},
  };
  for (const auto& [reason, proto] : reasons) {
    Verdict v;
    v.decisions.resize(2);
    v.decisions[0].reason = reason;
    v.denied_by = 0;
    v1::RateLimitResponse response;
    VerdictToProto(v, TwoLimits(), &response);
    EXPECT_EQ(response.reason(), proto);
    EXPECT_EQ(response.results(0).reason(), proto);
  }
}

TEST(VerdictToProtoTest, ARetryTimeInThePastGivesAZeroRetryAfter) {
  Verdict v;
  v.allowed = true;  // a reservation whose time has come
  v.now_us = 100 * kSecond;
  v.decisions.resize(2);
  v.decisions[0].allowed = true;
  v.decisions[0].retry_at_us = 99 * kSecond;
  v.decisions[1].allowed = true;
  v.decisions[1].retry_at_us = 101 * kSecond;
  v.retry_at_us = 99 * kSecond;
  v1::RateLimitResponse response;
  VerdictToProto(v, TwoLimits(), &response);
  EXPECT_EQ(response.retry_at().seconds(), 99);
  ASSERT_TRUE(response.has_retry_after());
  EXPECT_EQ(response.retry_after().seconds(), 0);
  EXPECT_EQ(response.retry_after().nanos(), 0);
  EXPECT_EQ(response.results(0).retry_after().seconds(), 0);
  EXPECT_EQ(response.results(0).retry_after().nanos(), 0);
  EXPECT_EQ(response.results(1).retry_after().seconds(), 1);
}

TEST(VerdictToProtoTest, FailedOpenAllowsEveryLimit) {
  v1::RateLimitResponse response;
  FailedOpenToProto(TwoLimits(), &response);
  EXPECT_TRUE(response.allowed());
  EXPECT_TRUE(response.failed_open());
  EXPECT_EQ(response.denied_by(), -1);
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(1).name(), "b");
  EXPECT_TRUE(response.results(1).allowed());
  EXPECT_EQ(response.results(1).capacity(), 6);
}

}  // namespace
}  // namespace ratelimit
