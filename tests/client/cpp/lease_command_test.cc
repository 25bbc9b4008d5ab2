// The lease commands' requests from flags and their output (client/cpp/lease_command.h).
#include "client/cpp/lease_command.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;

LeaseFlags Flags() {
  LeaseFlags f;
  f.name = "jobs";
  f.key = "t1";
  return f;
}

TEST(LeaseCommandTest, AcquireCarriesCountTtlRequestIdAndHolder) {
  LeaseFlags f = Flags();
  f.count = 2;
  f.ttl = "1m30s";
  f.request_id = "job-7";
  f.holder = "worker-3";
  absl::StatusOr<v1::AcquireRequest> r = AcquireOf(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->limits(0).name(), "jobs");
  EXPECT_EQ(r->limits(0).count(), 2);
  EXPECT_EQ(r->ttl().seconds(), 90);
  EXPECT_EQ(r->request_id(), "job-7");
  EXPECT_EQ(r->holder(), "worker-3");
  EXPECT_FALSE(AcquireOf(Flags()).value().has_ttl());
}

TEST(LeaseCommandTest, BadFlagsAreNamed) {
  LeaseFlags f = Flags();
  f.ttl = "soon";
  EXPECT_THAT(std::string(AcquireOf(f).status().message()), HasSubstr("--ttl"));
  f.ttl = "-1s";
  EXPECT_THAT(std::string(AcquireOf(f).status().message()), HasSubstr("--ttl"));
  EXPECT_THAT(std::string(ReleaseOf(Flags()).status().message()), HasSubstr("--lease_id"));
  EXPECT_THAT(std::string(ExtendOf(Flags()).status().message()), HasSubstr("--lease_id"));
}

TEST(LeaseCommandTest, ReleaseAndExtendNameTheLease) {
  LeaseFlags f = Flags();
  f.lease_id = "0123456789abcdef0123456789abcdef";
  f.ttl = "10s";
  absl::StatusOr<v1::ReleaseRequest> release = ReleaseOf(f);
  ASSERT_TRUE(release.ok());
  EXPECT_EQ(release->lease_id(), f.lease_id);
  absl::StatusOr<v1::ExtendRequest> extend = ExtendOf(f);
  ASSERT_TRUE(extend.ok());
  EXPECT_EQ(extend->ttl().seconds(), 10);
}

TEST(LeaseCommandTest, FormatsTheAnswers) {
  v1::AcquireResponse acquired;
  acquired.set_allowed(true);
  v1::Lease* l = acquired.mutable_lease();
  l->set_id("abc");
  l->set_name("jobs");
  l->set_key("t1");
  l->set_count(2);
  l->mutable_expires_at()->set_seconds(1798000000);
  l->set_holder("w3");
  EXPECT_EQ(FormatAcquire(acquired, absl::FromUnixSeconds(1797999990)),
            "acquired lease abc jobs/t1: 2 slots until 2026-12-23T04:26:40Z (w3)\n");
  // A replay says it took nothing now: its lease may have been released since.
  acquired.set_replayed(true);
  EXPECT_EQ(FormatAcquire(acquired, absl::FromUnixSeconds(1797999990)),
            "replayed (the first acquire of this request_id; nothing taken now, the lease may be "
            "released since): lease abc jobs/t1: 2 slots until 2026-12-23T04:26:40Z (w3)\n");
  v1::AcquireResponse refused;
  refused.set_reason(v1::NO_FREE_SLOTS);
  refused.mutable_retry_at()->set_seconds(1798000004);
  refused.set_denied_by(0);
  v1::LimitResult* r = refused.add_results();
  r->set_name("jobs");
  r->set_key("t1");
  r->set_capacity(10);
  EXPECT_EQ(FormatAcquire(refused, absl::FromUnixSeconds(1798000000)),
            "refused: NO_FREE_SLOTS, retry in 4s (jobs/t1: 0 free of 10)\n");
  // Against a clock with nanoseconds, the wait is shown in whole microseconds, rounded up.
  EXPECT_EQ(FormatAcquire(refused, absl::FromUnixNanos(1798000004'000000000 - 4'821032935)),
            "refused: NO_FREE_SLOTS, retry in 4.821033s (jobs/t1: 0 free of 10)\n");
  v1::ReleaseResponse not_held;
  not_held.set_state(v1::NOT_HELD);
  not_held.set_held(1);
  EXPECT_THAT(FormatRelease(not_held), HasSubstr("not held"));
  EXPECT_THAT(FormatRelease(not_held), HasSubstr("; 1 slot held now"));
  v1::ListLeasesRequest list = ListLeasesOf(Flags());
  v1::ListLeasesResponse leases;
  leases.set_held(2);
  leases.set_capacity(10);
  *leases.add_leases() = *l;
  EXPECT_EQ(FormatLeases(list, leases),
            "jobs/t1: 2 of 10 slots held\n"
            "  lease abc jobs/t1: 2 slots until 2026-12-23T04:26:40Z (w3)\n");
}

// --count is sent as given (its default is 1): 0, a negative or NaN reach the server, which names
// limits[0].count, instead of turning into the default and taking a slot.
TEST(LeaseCommandTest, AcquireSendsTheCountAsGivenForTheServerToJudge) {
  absl::StatusOr<v1::AcquireRequest> r = AcquireOf(Flags());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->limits(0).has_count());
  EXPECT_EQ(r->limits(0).count(), 1);
  for (double count : {0.0, -1.0, 1.5}) {
    LeaseFlags f = Flags();
    f.count = count;
    r = AcquireOf(f);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->limits(0).has_count()) << count;
    EXPECT_EQ(r->limits(0).count(), count);
  }
  LeaseFlags f = Flags();
  f.count = std::nan("");
  r = AcquireOf(f);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->limits(0).has_count());
  EXPECT_TRUE(std::isnan(r->limits(0).count()));
}

// An inline concurrency limit goes with every lease request; ListLeases then names source INLINE
// (as --source=inline does alone).
TEST(LeaseCommandTest, AnInlineConfigGoesWithEveryRequest) {
  LeaseFlags f = Flags();
  f.lease_id = "0123456789abcdef0123456789abcdef";
  v1::LimitConfig config;
  config.set_kind(v1::CONCURRENCY);
  config.set_capacity(3);
  f.config = config;
  EXPECT_EQ(AcquireOf(f).value().limits(0).config().capacity(), 3);
  EXPECT_EQ(ReleaseOf(f).value().config().capacity(), 3);
  EXPECT_EQ(ExtendOf(f).value().config().capacity(), 3);
  const v1::ListLeasesRequest list = ListLeasesOf(f);
  EXPECT_EQ(list.source(), v1::INLINE);
  EXPECT_EQ(list.config().capacity(), 3);
  EXPECT_FALSE(AcquireOf(Flags()).value().limits(0).has_config());
  EXPECT_EQ(ListLeasesOf(Flags()).source(), v1::LIMITS_FILE);
  LeaseFlags inline_source = Flags();
  inline_source.inline_limits = true;
  EXPECT_EQ(ListLeasesOf(inline_source).source(), v1::INLINE);
}

TEST(LeaseCommandTest, LeasesPagesAndPrintsTheNextPagesToken) {
  LeaseFlags f = Flags();
  f.page_size = 2;
  f.page_token = "abc";
  const v1::ListLeasesRequest list = ListLeasesOf(f);
  EXPECT_EQ(list.page_size(), 2);
  EXPECT_EQ(list.page_token(), "abc");
  v1::ListLeasesResponse leases;
  leases.set_held(3);
  leases.set_capacity(10);
  leases.set_next_page_token("NzA");
  EXPECT_THAT(FormatLeases(list, leases), HasSubstr("\nnext page: --page_token=NzA\n"));
  leases.clear_next_page_token();
  EXPECT_THAT(FormatLeases(list, leases), ::testing::Not(HasSubstr("next page")));
}

}  // namespace
}  // namespace ratelimit
