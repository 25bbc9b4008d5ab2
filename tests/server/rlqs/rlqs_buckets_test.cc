#include "server/rlqs/rlqs_buckets.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit {
namespace {

constexpr int64_t kSec = 1000000;
using Kind = RlqsAssignment::Kind;

class RlqsBucketsTest : public ::testing::Test {
 protected:
  void SetConfig(const std::string& yaml) {
    absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> c =
        ParseRlqsQuotaBuckets(YAML::Load(yaml), "edge.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
  }

  std::unique_ptr<RlqsBuckets> Make(RlqsBucketsOptions options = {}) {
    return std::make_unique<RlqsBuckets>(
        options, [this](absl::string_view domain) { return domain == "edge" ? config_ : nullptr; });
  }

  // Pushes of `out` to `stream`.
  static std::vector<RlqsPush> To(const std::vector<RlqsPush>& out, uint64_t stream) {
    std::vector<RlqsPush> mine;
    for (const RlqsPush& p : out) {
      if (p.stream == stream) mine.push_back(p);
    }
    return mine;
  }

  static double Rate(const RlqsAssignment& a) {
    return static_cast<double>(a.token_bucket.tokens_per_fill) /
           static_cast<double>(a.token_bucket.fill_interval_seconds);
  }

  std::shared_ptr<const RlqsDomainConfig> config_;
  const RlqsBucketKey tenant_a_ = {{"tenant", "a"}};
  int64_t now_ = 1000 * kSec;
};

constexpr char kLimit100[] = R"(
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 100,
     fair_share: {newcomer_reserve: 0, smoothing: 1}}
)";

TEST_F(RlqsBucketsTest, FirstReportSubscribesAndIsAssignedAtOnce) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 0, now_, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].stream, 1u);
  EXPECT_EQ(out[0].bucket, tenant_a_);
  EXPECT_EQ(out[0].assignment.kind, Kind::kTokenBucket);
  EXPECT_EQ(out[0].assignment.token_bucket, (WholeSecondTokenBucket{100, 100, 1}));
  EXPECT_EQ(out[0].assignment.ttl_seconds, 15);  // 3 x the default 5 s interval
  EXPECT_EQ(t->BucketsOf(1), 1u);
  // A second report is no new subscription.
  out.clear();
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 10, 0, 1 * kSec, now_, out).ok());
  EXPECT_TRUE(out.empty());
}

// A stream that ends gives its share back once the assignment it holds has expired: its Envoy
// may go on enforcing it until then (a broken stream), so nobody grows into it sooner.
TEST_F(RlqsBucketsTest, JoinDividesAtOnceAndLeaveGivesTheShareBackWhenItsAssignmentExpires) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 500, 0, 1 * kSec, now_, out).ok());
  out.clear();
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 0, 0, 0, now_, out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Rate(To(out, 1)[0].assignment) + Rate(To(out, 2)[0].assignment), 100);
  EXPECT_EQ(Rate(To(out, 1)[0].assignment), 50);
  const int64_t ttl_us = To(out, 2)[0].assignment.ttl_seconds * kSec;
  const int64_t left_at = now_;
  out.clear();
  t->RemoveStream(2, now_, out);
  EXPECT_EQ(t->BucketsOf(2), 0u);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].stream, 1u);
  EXPECT_EQ(Rate(out[0].assignment), 50);  // stream 2's Envoy still holds the other 50
  EXPECT_DOUBLE_EQ(t->Stats().at("edge/tenants").assigned_rate, 100);
  // Until the assignment has expired (and the second its delivery may have taken), no more.
  for (now_ = left_at + kSec; now_ < left_at + ttl_us + kSec; now_ += kSec) {
    ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 500, 0, 1 * kSec, now_, out).ok());
    t->Tick(now_, out);
    for (const RlqsPush& p : out) EXPECT_LE(Rate(p.assignment), 50) << "at " << now_ - left_at;
    out.clear();
  }
  now_ = left_at + ttl_us + 2 * kSec;
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Rate(out[0].assignment), 100);
}

// The newcomers' reserve is a share of the whole rule, kept back while a departed stream's share
// is held too: it was taken from what the departed left (10% of 55/s), and the stream that stayed
// was sent 49.5/s while 45/s were still held elsewhere, past the 90/s the rule ever assigns.
TEST_F(RlqsBucketsTest, TheReserveIsKeptWhileADepartedShareIsHeld) {
  SetConfig(R"(
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 100,
     fair_share: {newcomer_reserve: 0.1, smoothing: 1}}
)");
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 500, 0, 1 * kSec, now_, out).ok());
  out.clear();
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 0, 0, 0, now_, out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Rate(To(out, 1)[0].assignment), 45);
  EXPECT_EQ(Rate(To(out, 2)[0].assignment), 45);
  const int64_t ttl_us = To(out, 2)[0].assignment.ttl_seconds * kSec;
  const int64_t left_at = now_;
  out.clear();
  t->RemoveStream(2, now_, out);
  for (const RlqsPush& p : out) EXPECT_LE(Rate(p.assignment), 45);
  out.clear();
  for (now_ = left_at + kSec; now_ < left_at + ttl_us + kSec; now_ += kSec) {
    ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 500, 0, 1 * kSec, now_, out).ok());
    t->Tick(now_, out);
    for (const RlqsPush& p : out) EXPECT_LE(Rate(p.assignment), 45) << "at " << now_ - left_at;
    out.clear();
  }
  now_ = left_at + ttl_us + 2 * kSec;
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Rate(out[0].assignment), 90);
}

// A bucket whose last stream ended is kept while that stream's assignment lasts: a newcomer then
// gets only what it leaves.
TEST_F(RlqsBucketsTest, ANewcomerAfterTheLastStreamEndedGetsWhatItsAssignmentLeaves) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 500, 0, 1 * kSec, now_, out).ok());
  ASSERT_EQ(out.size(), 1u);
  const int64_t ttl_us = out[0].assignment.ttl_seconds * kSec;
  out.clear();
  t->RemoveStream(1, now_, out);
  EXPECT_TRUE(out.empty());
  now_ += kSec;
  t->Tick(now_, out);
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 0, 0, 0, now_, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.kind, Kind::kDenyAll);  // stream 1's Envoy may hold all 100
  // Once that assignment expired, the bucket is whole again for the newcomer.
  out.clear();
  now_ += ttl_us + kSec;
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.kind, Kind::kTokenBucket);
  EXPECT_EQ(Rate(out[0].assignment), 100);
}

TEST_F(RlqsBucketsTest, TickPushesOnlyMovedSharesAndRefreshesBeforeExpiry) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 200, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 200, 0, 1 * kSec, now_, out).ok());
  out.clear();
  // Steady demand: nothing to push (TTL 3 s, refresh after 1.5 s).
  now_ += kSec;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 200, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 200, 0, 1 * kSec, now_, out).ok());
  t->Tick(now_, out);
  EXPECT_TRUE(out.empty());
  // Stream 2 drops to 10/s: both shares move (10 and 90).
  now_ += kSec / 4;
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 10, 0, 1 * kSec, now_, out).ok());
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_LT(Rate(To(out, 2)[0].assignment), 50);
  EXPECT_LE(Rate(To(out, 1)[0].assignment) + Rate(To(out, 2)[0].assignment), 100);
  // Half the TTL later, the same assignments again (an extension).
  const std::vector<RlqsPush> first = out;
  out.clear();
  now_ += 2 * kSec;
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(To(out, 1)[0].assignment, To(first, 1)[0].assignment);
}

TEST_F(RlqsBucketsTest, TtlIsThreeReportingIntervalsInWholeSeconds) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 2 * kSec, now_, out).ok());
  EXPECT_EQ(out[0].assignment.ttl_seconds, 6);
  // A huge time_elapsed (a bucket idle for a day) counts as 300 s.
  out.clear();
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 1, 0, 86400 * kSec, now_, out).ok());
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].assignment.ttl_seconds, 900);
  // The subscribers' latest intervals count, not the longest ever seen.
  out.clear();
  now_ += 1000 * kSec;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  t->Tick(now_, out);  // both assignments are past half their time to live
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].assignment.ttl_seconds, 3);
}

// A fractional time_elapsed counts to the microsecond: three times 1.9 s is 5.7 s, rounded up to
// 6 (not three times a truncated second).
TEST_F(RlqsBucketsTest, TtlIsThreeFractionalIntervalsRoundedUp) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1900 * kSec / 1000, now_, out).ok());
  EXPECT_EQ(out[0].assignment.ttl_seconds, 6);
}

// Divisions every 5 s while the Envoy reports every second: an assignment lives long enough
// for the one sent at the first division past its half to arrive before it ends.
TEST_F(RlqsBucketsTest, TtlCoversTheReallocationInterval) {
  SetConfig(kLimit100);
  RlqsBucketsOptions options;
  options.reallocation_interval_us = 5 * kSec;
  auto t = Make(options);
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.ttl_seconds, 15);
  int64_t expires = now_ + out[0].assignment.ttl_seconds * kSec;
  for (int tick = 0; tick < 12; ++tick) {
    now_ += 5 * kSec;
    ASSERT_LT(now_, expires) << "no live assignment before division " << tick;
    out.clear();
    ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
    t->Tick(now_, out);
    for (const RlqsPush& p : To(out, 1)) expires = now_ + p.assignment.ttl_seconds * kSec;
  }
}

// A share below one request a minute is one token every longer interval; below one a day it is
// DENY_ALL, never a TokenBucket of 0 tokens, which Envoy's validation refuses.
TEST_F(RlqsBucketsTest, ASmallShareIsALongFillAndNoShareIsDenyAll) {
  SetConfig(R"(
rules:
  - {name: daily, match: {tenant: "*"}, requests_per_unit: 100, unit: day,
     fair_share: {newcomer_reserve: 0, smoothing: 1}}
  - {name: rare, match: {tenant: rare}, requests_per_unit: 1, unit: day,
     fair_share: {newcomer_reserve: 0, smoothing: 1}}
)");
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.kind, Kind::kTokenBucket);
  EXPECT_EQ(out[0].assignment.token_bucket, (WholeSecondTokenBucket{1, 1, 864}));

  const RlqsBucketKey rare = {{"tenant", "rare"}};
  out.clear();
  ASSERT_TRUE(t->Report(1, "edge", rare, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(2, "edge", rare, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_FALSE(To(out, 2).empty());
  EXPECT_EQ(To(out, 2).back().assignment.kind, Kind::kDenyAll) << "half a request a day";
}

TEST_F(RlqsBucketsTest, IdleSubscriptionsAreAbandoned) {
  SetConfig(kLimit100);
  RlqsBucketsOptions options;
  options.idle_abandon = absl::Seconds(30);
  auto t = Make(options);
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  out.clear();
  now_ += 29 * kSec;
  t->Tick(now_, out);
  for (const RlqsPush& p : out) EXPECT_NE(p.assignment.kind, Kind::kAbandon);
  out.clear();
  now_ += kSec;
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.kind, Kind::kAbandon);
  EXPECT_EQ(t->bucket_count(), 0u);
  EXPECT_EQ(t->BucketsOf(1), 0u);
  // A new report starts over: a new subscription.
  out.clear();
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.kind, Kind::kTokenBucket);
}

TEST_F(RlqsBucketsTest, ReloadIsPushedAtTheNextTick) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1000, 0, 1 * kSec, now_, out).ok());
  out.clear();
  SetConfig(R"(
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 50, unit: second,
     fair_share: {newcomer_reserve: 0}}
)");
  t->Tick(now_, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Rate(out[0].assignment), 50);
}

TEST_F(RlqsBucketsTest, DenyAllShadowAndUnconfiguredDomains) {
  SetConfig(R"(
default: deny_all
rules:
  - {name: shadowed, match: {tenant: "*"}, requests_per_unit: 1, unit: second, shadow: true}
)");
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", {{"other", "x"}}, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 7, 3, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(1, "nodomain", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].assignment.kind, Kind::kDenyAll);
  EXPECT_EQ(out[1].assignment.kind, Kind::kAllowAll);
  EXPECT_EQ(out[2].assignment.kind, Kind::kAllowAll);
  const std::map<std::string, RlqsRuleStats> stats = t->Stats();
  ASSERT_TRUE(stats.contains("edge/shadowed"));
  EXPECT_EQ(stats.at("edge/shadowed").reported_allowed, 7u);
  EXPECT_EQ(stats.at("edge/shadowed").reported_denied, 3u);
  EXPECT_EQ(stats.at("edge/shadowed").subscribers, 1u);
  EXPECT_EQ(stats.at("edge/default").subscribers, 1u);
}

TEST_F(RlqsBucketsTest, BucketsPerStreamAreBounded) {
  SetConfig(kLimit100);
  RlqsBucketsOptions options;
  options.max_buckets_per_stream = 3;
  auto t = Make(options);
  std::vector<RlqsPush> out;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        t->Report(1, "edge", {{"tenant", std::to_string(i)}}, 1, 0, 1 * kSec, now_, out).ok());
  }
  absl::Status s = t->Report(1, "edge", {{"tenant", "x"}}, 1, 0, 1 * kSec, now_, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->BucketsOf(1), 3u);
  EXPECT_EQ(t->bucket_count(), 3u);
  // A known bucket is still fine.
  EXPECT_TRUE(t->Report(1, "edge", {{"tenant", "0"}}, 1, 0, 1 * kSec, now_, out).ok());
}

TEST_F(RlqsBucketsTest, ShutdownExpiresEveryAssignment) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 1, 0, 1 * kSec, now_, out).ok());
  out.clear();
  t->Shutdown(out);
  ASSERT_EQ(out.size(), 2u);
  for (const RlqsPush& p : out) {
    EXPECT_EQ(p.assignment.ttl_seconds, 0);
    EXPECT_EQ(p.assignment.kind, Kind::kTokenBucket);
  }
  // Those ended the assignments: the streams ending then leave no share held, and nothing more
  // is divided or sent.
  out.clear();
  t->RemoveStream(1, now_, out);
  t->Tick(now_ + kSec, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(t->DepartedUntil(), 0);
}

// Many subscribers whose demands move every tick: the rates they hold never sum over the limit.
TEST_F(RlqsBucketsTest, HeldRatesNeverExceedTheLimit) {
  SetConfig(R"(
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 1000, unit: second}
)");
  auto t = Make();
  // What each stream's Envoy holds once it has read the pushes so far, and until when: an Envoy
  // whose stream ended goes on enforcing its last assignment until it expires.
  std::map<uint64_t, std::pair<double, int64_t>> held;
  std::vector<RlqsPush> out;
  uint64_t seed = 7;
  auto apply = [&] {
    for (const RlqsPush& p : out) {
      held[p.stream] = {Rate(p.assignment), now_ + p.assignment.ttl_seconds * kSec};
    }
    out.clear();
    double sum = 0;
    for (const auto& [s, r] : held) sum += r.second > now_ ? r.first : 0;
    return sum;
  };
  for (int round = 0; round < 200; ++round) {
    for (uint64_t s = 1; s <= 20; ++s) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      if (round % 50 == 49 && s % 5 == 0) {
        t->RemoveStream(s, now_, out);  // its Envoy keeps what it holds
      } else {
        ASSERT_TRUE(
            t->Report(s, "edge", tenant_a_, (seed >> 33) % 400, 0, 1 * kSec, now_, out).ok());
      }
      ASSERT_LE(apply(), 1000) << "round " << round << " stream " << s;
    }
    t->Tick(now_, out);
    ASSERT_LE(apply(), 1000) << "round " << round;
    now_ += kSec;
  }
  EXPECT_EQ(t->Stats().at("edge/tenants").over_assignments, 0u);
}

// The admin view: a bucket's rule and each subscriber's demand and held assignment; a domain's
// buckets a page at a time, in key order.
TEST_F(RlqsBucketsTest, ViewShowsSubscribersAndPagesTheDomain) {
  SetConfig(kLimit100);
  auto t = Make();
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 60, 0, 1 * kSec, now_, out).ok());
  ASSERT_TRUE(t->Report(2, "edge", tenant_a_, 0, 0, 0, now_ + kSec, out).ok());
  for (const char* tenant : {"c", "b"}) {
    ASSERT_TRUE(t->Report(1, "edge", {{"tenant", tenant}}, 0, 0, 0, now_, out).ok());
  }
  ASSERT_TRUE(t->Report(1, "other", {{"tenant", "a"}}, 0, 0, 0, now_, out).ok());

  std::optional<RlqsBucketView> a = t->View("edge", tenant_a_);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->rule.name, "tenants");
  ASSERT_EQ(a->subscribers.size(), 2u);
  const RlqsSubscriberView& first = a->subscribers[0];
  EXPECT_EQ(first.stream, 1u);
  EXPECT_EQ(first.demand, 60.0);
  EXPECT_FALSE(a->subscribers[1].demand.has_value());  // no whole-second report yet
  EXPECT_TRUE(first.has_sent);
  EXPECT_EQ(first.sent_at_us, now_ + kSec);  // re-divided when stream 2 joined
  EXPECT_EQ(first.last_report_us, now_);
  EXPECT_EQ(first.sent.kind, Kind::kTokenBucket);
  EXPECT_DOUBLE_EQ(first.held.rate + a->subscribers[1].held.rate, 100);
  EXPECT_EQ(first.sent.token_bucket, ToWholeSecondTokenBucket(first.held));
  EXPECT_FALSE(t->View("edge", {{"tenant", "zz"}}).has_value());

  std::vector<RlqsBucketView> page = t->ViewDomain("edge", nullptr, 2);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].key, tenant_a_);
  EXPECT_EQ(page[1].key, (RlqsBucketKey{{"tenant", "b"}}));
  page = t->ViewDomain("edge", &page[1].key, 2);
  ASSERT_EQ(page.size(), 1u);  // the other domain's bucket is not in it
  EXPECT_EQ(page[0].key, (RlqsBucketKey{{"tenant", "c"}}));
  EXPECT_TRUE(t->ViewDomain("edge", &page[0].key, 2).empty());
  EXPECT_FALSE(t->View("edge", tenant_a_)->part.has_value());  // alone: no part
}

// With several replicas, the view shows this replica's part of the global rate.
TEST_F(RlqsBucketsTest, ViewShowsTheReplicasPart) {
  SetConfig(kLimit100);
  RlqsBucketsOptions options;
  options.fleet = true;
  auto t = Make(options);
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 0, 0, 0, now_, out).ok());
  EXPECT_FALSE(t->View("edge", tenant_a_)->part.has_value());  // none given yet
  t->SetPart("edge", tenant_a_, FairShare{40, 20}, 0, now_, out);
  std::optional<RlqsBucketView> v = t->View("edge", tenant_a_);
  ASSERT_TRUE(v->part.has_value());
  EXPECT_EQ(v->part->rate, 40);
  EXPECT_EQ(v->part->burst, 20);
  EXPECT_LE(v->subscribers[0].held.rate, 40);
}

// With several replicas, no assignment outlives what this replica's record last told the fleet
// (RlqsReplicaRecord::held_until_us): the fleet holds a dead replica's part back until then.
TEST_F(RlqsBucketsTest, AFleetAssignmentNeverOutlivesTheReplicasLastClaim) {
  SetConfig(kLimit100);
  RlqsBucketsOptions options;
  options.fleet = true;
  options.default_reporting_interval_seconds = 5;  // a time to live of 15 s
  auto t = Make(options);
  std::vector<RlqsPush> out;
  ASSERT_TRUE(t->Report(1, "edge", tenant_a_, 0, 0, 0, now_, out).ok());
  std::vector<RlqsLimitedBucket> limited = t->LimitedBuckets(false);
  ASSERT_EQ(limited.size(), 1u);
  EXPECT_EQ(limited[0].ttl_seconds, 15);
  EXPECT_EQ(limited[0].sent_until_us, 0);  // nothing sent before a part
  t->SetPart("edge", tenant_a_, FairShare{40, 20}, now_ + 7 * kSec, now_, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.ttl_seconds, 6) << "a second for its delivery";
  EXPECT_EQ(t->LimitedBuckets(false)[0].sent_until_us, now_ + 7 * kSec);
  // A later record claims more: the next assignment has the whole time to live.
  out.clear();
  now_ += 4 * kSec;
  t->SetPart("edge", tenant_a_, FairShare{40, 20}, now_ + 30 * kSec, now_, out);
  ASSERT_EQ(out.size(), 1u) << "half-way through its time to live: sent again";
  EXPECT_EQ(out[0].assignment.ttl_seconds, 15);
  EXPECT_EQ(t->LimitedBuckets(false)[0].sent_until_us, now_ + 16 * kSec);
  // No sync renewed the claim for so long that less than a second of it is left: nothing is
  // sent (in practice the part is dropped well before, after two intervals without a sync).
  auto late = Make(options);
  out.clear();
  ASSERT_TRUE(late->Report(1, "edge", tenant_a_, 0, 0, 0, now_, out).ok());
  late->SetPart("edge", tenant_a_, FairShare{40, 20}, now_ + 1900000, now_, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace ratelimit
