// The concurrency-limit conversions on their own (server/v1/lease_convert.cc): Acquire, Release,
// Extend and ListLeases requests resolved to lease ops, every bad field named, and outcomes
// converted back. Pure functions, no server.
#include "server/v1/lease_convert.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/v1/limits_file.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kSecond = ::ratelimit::testing::kSecond;
constexpr char kLeaseId[] = "0123456789abcdef0123456789abcdef";

LimitSet Defined() {
  absl::StatusOr<LimitSet> set = ParseLimitsYaml(R"(
limits:
  - name: jobs
    kind: concurrency
    capacity: 5
    lease_ttl: 10s
    max_lease_ttl: 1m
  - name: api
    kind: token_bucket
    rate: 10
    period: 1s
)",
                                                 "test");
  EXPECT_TRUE(set.ok()) << set.status();
  return *set;
}

v1::AcquireRequest Acquire(const std::string& name = "jobs", const std::string& key = "t1") {
  v1::AcquireRequest r;
  v1::LimitRequest* l = r.add_limits();
  l->set_name(name);
  l->set_key(key);
  return r;
}

v1::ListLeasesRequest ListOf(const std::string& name, const std::string& key) {
  v1::ListLeasesRequest r;
  r.set_name(name);
  r.set_key(key);
  return r;
}

// An inline concurrency limit of 4 slots.
v1::LimitConfig JobsInline() {
  v1::LimitConfig c;
  c.set_kind(v1::CONCURRENCY);
  c.set_capacity(4);
  return c;
}

// AcquireFromProto into a fresh plan, as the server calls it: the plan, or the error.
absl::StatusOr<AcquirePlan> PlanOf(const v1::AcquireRequest& r, const LimitSet& defined) {
  AcquirePlan plan;
  if (absl::Status s =
          AcquireFromProto(r, defined, InlineLimits::kAllow, *LeaseId::Parse(kLeaseId), plan);
      !s.ok()) {
    return s;
  }
  return plan;
}

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(field)) << s;
}

TEST(AcquireFromProtoTest, ResolvesTheConcurrencyLimitWithItsDefaultTtl) {
  v1::AcquireRequest r = Acquire();
  r.set_request_id("job-7");
  r.set_holder("worker-3");
  absl::StatusOr<AcquirePlan> plan = PlanOf(r, Defined());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->concurrency, 0u);
  EXPECT_EQ(plan->lease.action, LeaseAction::kAcquire);
  EXPECT_EQ(plan->lease.key, (StateKey{"jobs", "t1", LimitSource::kDefined}));
  EXPECT_EQ(plan->lease.count, 1);
  EXPECT_EQ(plan->lease.ttl_us, 10 * kSecond);
  EXPECT_EQ(plan->lease.lease_id, LeaseId::Parse(kLeaseId));
  EXPECT_EQ(plan->lease.request_id, "job-7");
  EXPECT_EQ(plan->lease.holder, "worker-3");
}

TEST(AcquireFromProtoTest, TakesRateLimitsBesideTheConcurrencyLimit) {
  v1::AcquireRequest r = Acquire("api", "t1");
  v1::LimitRequest* c = r.add_limits();
  c->set_name("jobs");
  c->set_key("t1");
  c->set_count(3);
  r.mutable_ttl()->set_seconds(30);
  absl::StatusOr<AcquirePlan> plan = PlanOf(r, Defined());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->concurrency, 1u);
  EXPECT_EQ(plan->lease.count, 3);
  EXPECT_EQ(plan->lease.ttl_us, 30 * kSecond);
  EXPECT_EQ(plan->limits.size(), 2u);
}

TEST(AcquireFromProtoTest, AnInlineConcurrencyLimitGetsTheDefaultTtls) {
  v1::AcquireRequest r = Acquire("inline_jobs");
  v1::LimitConfig* config = r.mutable_limits(0)->mutable_config();
  config->set_kind(v1::CONCURRENCY);
  config->set_capacity(2);
  absl::StatusOr<AcquirePlan> plan = PlanOf(r, Defined());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->lease.key.source, LimitSource::kInline);
  EXPECT_EQ(plan->lease.config.lease_ttl_us, kDefaultLeaseTtlMicros);
  EXPECT_EQ(plan->lease.config.max_lease_ttl_us, kDefaultMaxLeaseTtlMicros);
}

TEST(AcquireFromProtoTest, BadInputNamesTheField) {
  const LimitSet defined = Defined();
  auto plan = [&](const v1::AcquireRequest& r) { return PlanOf(r, defined).status(); };
  ExpectInvalid(plan(v1::AcquireRequest()), "limits");
  ExpectInvalid(plan(Acquire("api")), "limits: an Acquire needs exactly one concurrency limit");
  {
    v1::AcquireRequest r = Acquire();
    *r.add_limits() = r.limits(0);
    r.mutable_limits(1)->set_key("t2");
    ExpectInvalid(plan(r), "limits[1].name");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.mutable_limits(0)->set_count(1.5);
    ExpectInvalid(plan(r), "limits[0].count");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.mutable_limits(0)->set_count(0);
    ExpectInvalid(plan(r), "limits[0].count");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.mutable_ttl()->set_seconds(61);  // max_lease_ttl is 1m
    ExpectInvalid(plan(r), "ttl");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.mutable_ttl()->set_nanos(999999);  // under 1 ms
    ExpectInvalid(plan(r), "ttl");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.mutable_ttl()->set_seconds(-1);
    ExpectInvalid(plan(r), "ttl");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.set_request_id(std::string(129, 'r'));
    ExpectInvalid(plan(r), "request_id");
  }
  {
    v1::AcquireRequest r = Acquire();
    r.set_holder(std::string(257, 'h'));
    ExpectInvalid(plan(r), "holder");
  }
  {
    v1::AcquireRequest r = Acquire("inline_jobs");
    v1::LimitConfig* config = r.mutable_limits(0)->mutable_config();
    config->set_kind(v1::CONCURRENCY);
    config->set_capacity(2.5);
    ExpectInvalid(plan(r), "limits[0].config.capacity");
    config->set_capacity(2);
    config->set_rate(3);
    ExpectInvalid(plan(r), "limits[0].config.rate");
    config->set_rate(0);
    config->mutable_lease_ttl()->set_seconds(7200);
    config->mutable_max_lease_ttl()->set_seconds(3600);
    ExpectInvalid(plan(r), "limits[0].config.lease_ttl");
    config->mutable_lease_ttl()->set_seconds(1);
    config->mutable_max_lease_ttl()->set_seconds(2 * 86400);
    ExpectInvalid(plan(r), "limits[0].config.max_lease_ttl");
  }
  {
    v1::AcquireRequest r = Acquire("inline_bucket");
    v1::LimitConfig* config = r.mutable_limits(0)->mutable_config();
    config->set_kind(v1::TOKEN_BUCKET);
    config->set_rate(1);
    config->mutable_period()->set_seconds(1);
    config->mutable_lease_ttl()->set_seconds(1);
    ExpectInvalid(plan(r), "limits[0].config.lease_ttl");
  }
  EXPECT_EQ(plan(Acquire("nope")).code(), absl::StatusCode::kNotFound);
}

TEST(LeaseTargetTest, ReleaseAndExtendNameTheLeaseAndTheLimit) {
  const LimitSet defined = Defined();
  v1::ReleaseRequest release;
  release.set_name("jobs");
  release.set_key("t1");
  release.set_lease_id(kLeaseId);
  absl::StatusOr<LeaseOp> op = ReleaseFromProto(release, defined, InlineLimits::kAllow);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->action, LeaseAction::kRelease);
  EXPECT_EQ(op->lease_id, LeaseId::Parse(kLeaseId));

  v1::ExtendRequest extend;
  extend.set_name("jobs");
  extend.set_key("t1");
  extend.set_lease_id(kLeaseId);
  op = ExtendFromProto(extend, defined, InlineLimits::kAllow);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->action, LeaseAction::kExtend);
  EXPECT_EQ(op->ttl_us, 10 * kSecond);

  release.set_lease_id("0123456789ABCDEF0123456789ABCDEF");
  ExpectInvalid(ReleaseFromProto(release, defined, InlineLimits::kAllow).status(), "lease_id");
  release.set_lease_id("");
  ExpectInvalid(ReleaseFromProto(release, defined, InlineLimits::kAllow).status(), "lease_id");
  release.set_lease_id(std::string(32, '0'));  // no lease's id
  ExpectInvalid(ReleaseFromProto(release, defined, InlineLimits::kAllow).status(), "lease_id");
  extend.set_lease_id(std::string(32, '0'));
  ExpectInvalid(ExtendFromProto(extend, defined, InlineLimits::kAllow).status(), "lease_id");
  extend.set_lease_id(kLeaseId);
  release.set_lease_id(kLeaseId);
  release.set_key("");
  ExpectInvalid(ReleaseFromProto(release, defined, InlineLimits::kAllow).status(), "key");
  release.set_key("t1");
  release.set_name("api");
  ExpectInvalid(ReleaseFromProto(release, defined, InlineLimits::kAllow).status(), "name");
  release.set_name("nope");
  EXPECT_EQ(ReleaseFromProto(release, defined, InlineLimits::kAllow).status().code(),
            absl::StatusCode::kNotFound);
  extend.mutable_ttl()->set_seconds(3600);
  ExpectInvalid(ExtendFromProto(extend, defined, InlineLimits::kAllow).status(), "ttl");
}

TEST(LeaseTargetTest, ListLeasesOfAnInlineLimitNeedsItsConfig) {
  const LimitSet defined = Defined();
  v1::ListLeasesRequest list;
  list.set_name("jobs");
  list.set_key("t1");
  absl::StatusOr<LeaseOp> op = ListLeasesFromProto(list, defined, InlineLimits::kAllow);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->action, LeaseAction::kList);
  list.set_source(v1::INLINE);
  ExpectInvalid(ListLeasesFromProto(list, defined, InlineLimits::kAllow).status(), "config");
  list.mutable_config()->set_kind(v1::CONCURRENCY);
  list.mutable_config()->set_capacity(4);
  op = ListLeasesFromProto(list, defined, InlineLimits::kAllow);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->key.source, LimitSource::kInline);
  // A config names an inline limit with the default source too, as in Release and Extend.
  list.set_source(v1::LIMITS_FILE);
  list.set_name("nope");
  op = ListLeasesFromProto(list, defined, InlineLimits::kAllow);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->key.source, LimitSource::kInline);
  EXPECT_EQ(op->config.capacity, 4);
  // But not for a name the limits file defines, as Release and Extend refuse it: the listing
  // would be of an inline limit nobody holds, under the defined limit's name.
  list.set_name("jobs");
  ExpectInvalid(ListLeasesFromProto(list, defined, InlineLimits::kAllow).status(), "config");
  list.set_source(v1::ENVOY);
  ExpectInvalid(ListLeasesFromProto(list, defined, InlineLimits::kAllow).status(), "source");
  list.set_source(v1::LIMITS_FILE);
  list.clear_config();
  list.set_name("nope");
  EXPECT_EQ(ListLeasesFromProto(list, defined, InlineLimits::kAllow).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(AcquireToProtoTest, ReportsFreeSlotsAndTheDenyingLimitInRequestOrder) {
  v1::AcquireRequest r = Acquire("api", "t1");
  v1::LimitRequest* c = r.add_limits();
  c->set_name("jobs");
  c->set_key("t1");
  absl::StatusOr<AcquirePlan> plan = PlanOf(r, Defined());
  ASSERT_TRUE(plan.ok()) << plan.status();
  LeaseOutcome outcome;
  outcome.now_us = 100 * kSecond;
  outcome.lease.allowed = false;
  outcome.lease.reason = DenyReason::kNoFreeSlots;
  outcome.lease.held = 5;
  outcome.lease.free = 0;
  outcome.lease.retry_at_us = 104 * kSecond;
  Decision rate;
  rate.allowed = true;
  rate.value = 9;
  outcome.decisions.push_back(rate);
  v1::AcquireResponse answer;
  AcquireToProto(*plan, outcome, &answer);
  EXPECT_FALSE(answer.allowed());
  EXPECT_FALSE(answer.has_lease());
  ASSERT_EQ(answer.results_size(), 2);
  EXPECT_EQ(answer.results(0).name(), "api");
  EXPECT_TRUE(answer.results(0).allowed());
  EXPECT_EQ(answer.results(1).name(), "jobs");
  EXPECT_EQ(answer.results(1).value(), 0);
  EXPECT_EQ(answer.results(1).capacity(), 5);
  EXPECT_EQ(answer.results(1).reason(), v1::NO_FREE_SLOTS);
  EXPECT_EQ(answer.denied_by(), 1);
  EXPECT_EQ(answer.reason(), v1::NO_FREE_SLOTS);
  EXPECT_EQ(answer.retry_after().seconds(), 4);
}

TEST(AcquireToProtoTest, AnAllowedAcquireCarriesItsLease) {
  absl::StatusOr<AcquirePlan> plan = PlanOf(Acquire(), Defined());
  ASSERT_TRUE(plan.ok()) << plan.status();
  LeaseOutcome outcome;
  outcome.allowed = true;
  outcome.now_us = 100 * kSecond;
  outcome.lease.allowed = true;
  outcome.lease.held = 1;
  outcome.lease.free = 4;
  outcome.lease.lease = Lease{.id = *LeaseId::Parse(kLeaseId),
                              .count = 1,
                              .acquired_at_us = 100 * kSecond,
                              .expires_at_us = 110 * kSecond,
                              .request_id = "",
                              .holder = "w1"};
  v1::AcquireResponse answer;
  AcquireToProto(*plan, outcome, &answer);
  EXPECT_TRUE(answer.allowed());
  EXPECT_EQ(answer.denied_by(), -1);
  EXPECT_EQ(answer.lease().id(), kLeaseId);
  EXPECT_EQ(answer.lease().name(), "jobs");
  EXPECT_EQ(answer.lease().key(), "t1");
  EXPECT_EQ(answer.lease().count(), 1u);
  EXPECT_EQ(answer.lease().expires_at().seconds(), 110);
  EXPECT_EQ(answer.lease().holder(), "w1");
  EXPECT_EQ(answer.results(0).value(), 4);
}

TEST(CheckSameAcquireTest, ARetryMustAskForTheReplayedLeasesCountAndHolder) {
  Lease earlier;
  earlier.count = 2;
  earlier.holder = "pod-a";
  LeaseOp retry;
  retry.action = LeaseAction::kAcquire;
  retry.request_id = "job-1";
  retry.count = 2;
  retry.holder = "pod-a";
  EXPECT_TRUE(CheckSameAcquire(retry, earlier).ok());
  retry.count = 1;
  const absl::Status fewer = CheckSameAcquire(retry, earlier);
  ExpectInvalid(fewer, "request_id");
  EXPECT_THAT(std::string(fewer.message()), HasSubstr("2 slot(s) by holder \"pod-a\""));
  retry.count = 2;
  retry.holder = "pod-b";
  ExpectInvalid(CheckSameAcquire(retry, earlier), "request_id");
}

TEST(RefuseConcurrencyLimitsTest, ConsumeNamesTheConcurrencyLimit) {
  v1::RateLimitRequest r;
  for (const char* name : {"api", "jobs"}) {
    v1::LimitRequest* l = r.add_limits();
    l->set_name(name);
    l->set_key("k");
  }
  absl::StatusOr<LimitRequests> limits = ResolveRequest(r, Defined());
  ASSERT_TRUE(limits.ok()) << limits.status();
  const absl::Status s = RefuseConcurrencyLimits(*limits, "Consume");
  ExpectInvalid(s, "limits[1].name");
  EXPECT_THAT(std::string(s.message()), HasSubstr("Acquire"));
}

// The holder is shown to operators (ListLeases, `ratelimit leases`): a control character, which
// a terminal would act on, is refused; printable text in any script is kept.
TEST(AcquireFromProtoTest, AHolderWithControlCharactersIsRefused) {
  const LimitSet defined = Defined();
  for (const std::string& holder :
       {std::string("worker\n3"), std::string("w\0rker", 6), std::string("\x1b[31mred"),
        std::string("tab\there"), std::string("del\x7f")}) {
    v1::AcquireRequest r = Acquire();
    r.set_holder(holder);
    ExpectInvalid(PlanOf(r, defined).status(), "holder: must not contain control characters");
  }
  v1::AcquireRequest r = Acquire();
  r.set_holder("w\xc3\xb6rker-3 (pod a/b)");
  absl::StatusOr<AcquirePlan> plan = PlanOf(r, defined);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->lease.holder, "w\xc3\xb6rker-3 (pod a/b)");
}

// An error shows the value it refused as it was given: a TTL a microsecond over the limit's
// max_lease_ttl is not rounded to the maximum itself, nor a count of slots one over 1e9 to 1e9.
TEST(AcquireFromProtoTest, ErrorsShowTheRefusedValueExactly) {
  const LimitSet defined = Defined();
  v1::AcquireRequest r = Acquire();
  r.mutable_ttl()->set_seconds(60);  // max_lease_ttl is 1m
  r.mutable_ttl()->set_nanos(1000);
  EXPECT_THAT(std::string(PlanOf(r, defined).status().message()),
              HasSubstr("max_lease_ttl (1m), got 1m0.000001s"));
  // A TTL past every duration's bound is out of the TTL's range too, said as such.
  r = Acquire();
  r.mutable_ttl()->set_seconds(100000LL * 86400);
  EXPECT_THAT(
      std::string(PlanOf(r, defined).status().message()),
      HasSubstr("ttl: must be between 1ms and the limit's max_lease_ttl (1m), got 2400000h"));
  r = Acquire();
  r.mutable_ttl()->set_nanos(500000);
  EXPECT_THAT(std::string(PlanOf(r, defined).status().message()), HasSubstr("got 500us"));
  // Under the microsecond the server keeps: shown as sent, not as 0 or 999us.
  r.mutable_ttl()->set_nanos(500);
  EXPECT_THAT(std::string(PlanOf(r, defined).status().message()), HasSubstr("got 500ns"));
  r.mutable_ttl()->set_nanos(999999);
  EXPECT_THAT(std::string(PlanOf(r, defined).status().message()), HasSubstr("got 999.999us"));
  r.mutable_ttl()->set_nanos(0);
  r.mutable_ttl()->set_seconds(-2);
  EXPECT_THAT(std::string(PlanOf(r, defined).status().message()),
              HasSubstr("ttl: must not be negative, got -2s"));
  r = Acquire();
  r.mutable_limits(0)->set_count(1e9 + 1);
  EXPECT_THAT(
      std::string(PlanOf(r, defined).status().message()),
      HasSubstr("limits[0].count: must be a whole number of slots, 1..1e9, got 1000000001"));
  r = Acquire("inline_jobs");
  v1::LimitConfig* config = r.mutable_limits(0)->mutable_config();
  config->set_kind(v1::CONCURRENCY);
  config->set_capacity(1e9 + 1);
  EXPECT_THAT(
      std::string(PlanOf(r, defined).status().message()),
      HasSubstr("config.capacity: must be a whole number of slots, 1..1e9, got 1000000001"));
}

// ListLeases checks the name as Release, Extend and Reset do, before it looks the limit up: a
// name no limit could have is INVALID_ARGUMENT naming `name`, not NOT_FOUND echoing it.
TEST(LeaseTargetTest, ListLeasesChecksTheNameAsTheOtherCallsDo) {
  const LimitSet defined = Defined();
  v1::ListLeasesRequest list;
  list.set_key("t1");
  for (const std::string& name : {std::string(), std::string(257, 'n'),
                                  std::string("jo\x01"
                                              "bs"),
                                  std::string("a\nb")}) {
    list.set_name(name);
    ExpectInvalid(ListLeasesFromProto(list, defined, InlineLimits::kAllow).status(), "name");
  }
  list.set_name("jobs");
  list.set_key("");
  ExpectInvalid(ListLeasesFromProto(list, defined, InlineLimits::kAllow).status(), "key");
}

// A key's leases (here five, two sharing an expiry and two an expiry and acquisition, given out
// of order) listed two at a time, each page as a store lists it (ListingPage) after the place
// the last page's token names: every lease once, in the listing's order, the key's held and
// capacity on every page, and no token after the last.
TEST(ListLeasesPageTest, PagesFollowEachOtherInTheListingsOrder) {
  LeaseOp op;
  op.key = StateKey{"jobs", "t1", LimitSource::kDefined};
  op.config = *Defined().Find("jobs");
  LeaseDecision d;
  d.held = 5;
  std::vector<Lease> held;
  const int64_t expiry[] = {30, 10, 20, 10, 30};
  const int64_t acquired[] = {1, 2, 1, 1, 1};
  for (int i = 0; i < 5; ++i) {
    Lease l;
    l.id = LeaseId::FromWords(0, 5 - i);
    l.count = 1;
    l.expires_at_us = expiry[i] * kSecond;
    l.acquired_at_us = acquired[i] * kSecond;
    held.push_back(l);
  }
  // (expiry, acquired, id): (10,1,2) (10,2,4) (20,1,3) (30,1,1) (30,1,5).
  const uint64_t want[] = {2, 4, 3, 1, 5};
  v1::ListLeasesRequest request = ListOf("jobs", "t1");
  request.set_page_size(2);
  std::vector<std::string> ids;
  for (int pages = 1;; ++pages) {
    absl::StatusOr<LeaseOp> page = ListLeasesFromProto(request, Defined(), InlineLimits::kAllow);
    ASSERT_TRUE(page.ok()) << page.status();
    d.held_leases = ListingPage(held, page->list_after, page->list_limit, &d.more_listed);
    v1::ListLeasesResponse out;
    ListLeasesToProto(op, d, &out);
    EXPECT_EQ(out.held(), 5u);
    EXPECT_EQ(out.capacity(), 5u);
    EXPECT_LE(out.leases_size(), 2);
    for (const v1::Lease& l : out.leases()) ids.push_back(l.id());
    if (out.next_page_token().empty()) {
      EXPECT_EQ(pages, 3);
      break;
    }
    ASSERT_LT(pages, 3);
    request.set_page_token(out.next_page_token());
  }
  ASSERT_EQ(ids.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    char digits[LeaseId::kDigits];
    LeaseId::FromWords(0, want[i]).WriteDigits(digits);
    EXPECT_EQ(ids[i], std::string(digits, sizeof(digits))) << i;
  }
  // The default page holds them all.
  const LeaseOp whole =
      ListLeasesFromProto(ListOf("jobs", "t1"), Defined(), InlineLimits::kAllow).value();
  EXPECT_EQ(whole.list_limit, kDefaultLeasePageSize);
  d.held_leases = ListingPage(held, whole.list_after, whole.list_limit, &d.more_listed);
  v1::ListLeasesResponse all;
  ListLeasesToProto(op, d, &all);
  EXPECT_EQ(all.leases_size(), 5);
  EXPECT_TRUE(all.next_page_token().empty());
}

// A token names a place, not a lease: released since, the lease is gone and the next page
// starts with the first lease after its place.
TEST(ListLeasesPageTest, ThePageAfterAReleasedLeaseStartsAfterItsPlace) {
  LeaseOp op;
  op.key = StateKey{"jobs", "t1", LimitSource::kDefined};
  op.config = *Defined().Find("jobs");
  LeaseDecision d;
  std::vector<Lease> held;
  for (int i = 1; i <= 3; ++i) {
    Lease l;
    l.id = LeaseId::FromWords(0, i);
    l.count = 1;
    l.expires_at_us = i * kSecond;
    held.push_back(l);
  }
  d.held = 3;
  d.held_leases = ListingPage(held, std::nullopt, 1, &d.more_listed);
  v1::ListLeasesResponse out;
  ListLeasesToProto(op, d, &out);
  ASSERT_FALSE(out.next_page_token().empty());
  held.erase(held.begin());  // the first lease, released
  d.held = 2;
  v1::ListLeasesRequest request = ListOf("jobs", "t1");
  request.set_page_token(out.next_page_token());
  absl::StatusOr<LeaseOp> page = ListLeasesFromProto(request, Defined(), InlineLimits::kAllow);
  ASSERT_TRUE(page.ok()) << page.status();
  d.held_leases = ListingPage(held, page->list_after, page->list_limit, &d.more_listed);
  v1::ListLeasesResponse next;
  ListLeasesToProto(op, d, &next);
  ASSERT_EQ(next.leases_size(), 2);
  EXPECT_EQ(next.leases(0).expires_at().seconds(), 2);
}

TEST(ListLeasesPageTest, BadPageSizeAndTokenAreNamed) {
  auto list = [](const v1::ListLeasesRequest& r) {
    return ListLeasesFromProto(r, Defined(), InlineLimits::kAllow);
  };
  v1::ListLeasesRequest request = ListOf("jobs", "t1");
  EXPECT_EQ(list(request).value().list_limit, kDefaultLeasePageSize);
  request.set_page_size(kMaxLeasePageSize);
  EXPECT_EQ(list(request).value().list_limit, kMaxLeasePageSize);
  for (int size : {-1, kMaxLeasePageSize + 1}) {
    request.set_page_size(size);
    ExpectInvalid(list(request).status(), "page_size");
  }
  request.set_page_size(0);
  // A token this key's listing gave: its first lease's place.
  LeaseOp op = list(request).value();
  LeaseDecision d;
  Lease first;
  first.id = *LeaseId::Parse(kLeaseId);
  first.count = 1;
  first.acquired_at_us = 3;
  first.expires_at_us = 7;
  d.held = 2;
  d.held_leases = {first};
  d.more_listed = true;
  v1::ListLeasesResponse out;
  ListLeasesToProto(op, d, &out);
  const std::string token = out.next_page_token();
  ASSERT_FALSE(token.empty());
  std::string text;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(token, &text));
  const std::string tag = text.substr(text.rfind('.'));  // ".<the key's tag>"
  for (const std::string& bad :
       {std::string("not base64!"), absl::WebSafeBase64Escape("1.2"),
        absl::WebSafeBase64Escape("7.3.0123456789abcdef0123456789abcdef"),  // no key tag
        absl::WebSafeBase64Escape("1.2.0123456789ABCDEF0123456789abcdef" + tag),
        absl::WebSafeBase64Escape("x.2.0123456789abcdef0123456789abcdef" + tag)}) {
    request.set_page_token(bad);
    ExpectInvalid(list(request).status(), "page_token");
  }
  request.set_page_token(token);
  absl::StatusOr<LeaseOp> page = list(request);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_TRUE(page->list_after.has_value());
  EXPECT_EQ(page->list_after->expires_at_us, 7);
  EXPECT_EQ(page->list_after->acquired_at_us, 3);
  EXPECT_EQ(page->list_after->id, LeaseId::Parse(kLeaseId));
  // The same token names no place in another key's listing, nor in another limit's.
  v1::ListLeasesRequest other = ListOf("jobs", "t2");
  other.set_page_token(token);
  ExpectInvalid(list(other).status(), "page_token");
  EXPECT_NE(list(other).status().message().find("another key"), std::string::npos);
  other = ListOf("jobs", "t1");
  other.set_source(v1::INLINE);
  *other.mutable_config() = JobsInline();
  other.set_page_token(token);
  ExpectInvalid(list(other).status(), "page_token");
}

}  // namespace
}  // namespace ratelimit
