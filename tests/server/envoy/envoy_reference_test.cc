// The reference's behaviours the Envoy API matches (refunds with is_negative_hits, quota mode,
// the global shadow and quota switches) and our several limits per descriptor, through a real
// server on RocksDB and on a Redis Cluster.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_service.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/rocksdb_test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Descriptor;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::Refund;
using Code = rlsv3::RateLimitResponse::Code;
using Unit = rlsv3::RateLimitResponse::RateLimit::Unit;

constexpr char kConfig[] = R"(
domain: ref
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 10}
  - key: api
    rate_limits:
      - {name: api_per_second, unit: second, requests_per_unit: 2}
      - {name: api_per_minute, unit: minute, requests_per_unit: 3}
  # The reference's quota-mode example: two services, each with its own quota.
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 1}
  # Our concurrency rule: 2 requests of an org at once.
  - key: in_flight
    concurrency: {capacity: 2, lease_ttl: 30s}
)";

// One descriptor of one entry, charging `hits` (unset: the request's).
Descriptor D(const std::string& key, const std::string& value,
             std::optional<uint64_t> hits = std::nullopt) {
  return Descriptor(Descriptor::Entries{{key, value}}, hits);
}

// A refund of `hits` on one entry.
Descriptor R(const std::string& key, const std::string& value, uint64_t hits) {
  return Refund(Descriptor::Entries{{key, value}}, hits);
}

// The server's store: RocksDB, or a Redis Cluster (3 primaries) shared by the tests.
class EnvoyReferenceTest : public testing::EnvoyServiceTestBase,
                           public ::testing::WithParamInterface<std::string> {
 protected:
  void StartWith(const std::function<void(ServerOptions&)>& tune = nullptr) {
    // Redis expires states at absolute times of the server's clock (PXAT): the fake clock runs
    // from the start of the next whole minute of the real time, 10 s into it.
    minute_start_ = (SystemClock::Default().NowMicros() / (60 * kSecond) + 1) * 60 * kSecond;
    clock_.Set(minute_start_ + 10 * kSecond);
    std::unique_ptr<StateStore> store;
    if (GetParam() == "rocksdb") {
      store = testing::OpenRocksDbStore(dir_.File("db"), clock_);
    } else {
      absl::StatusOr<RedisTestTarget> target =
          testing::StartRedisTestTarget(RedisTopology::kCluster);
      ASSERT_TRUE(target.ok()) << target.status();
      redis_ = *std::move(target);
      auto opened = testing::OpenRedisTestStore(redis_, &clock_);
      ASSERT_TRUE(opened.ok()) << opened.status();
      store = *std::move(opened);
    }
    Start(kConfig, /*headers=*/false, std::move(store), tune);
  }

  // One descriptor's status.
  rlsv3::RateLimitResponse::DescriptorStatus One(const Descriptor& d) {
    const Response r = Call("ref", {d});
    EXPECT_EQ(r.statuses_size(), 1);
    return r.statuses_size() == 1 ? r.statuses(0) : rlsv3::RateLimitResponse::DescriptorStatus();
  }

  RedisTestTarget redis_;
  int64_t minute_start_ = 0;
};

// --- refunds (Envoy 1.38's hits_addend with is_negative_hits) ---

TEST_P(EnvoyReferenceTest, NegativeHitsGiveTheHitsBack) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  EXPECT_EQ(One(D("tokens", "u1", 8)).limit_remaining(), 2u);
  const auto refunded = One(R("tokens", "u1", 5));
  EXPECT_EQ(refunded.code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(refunded.limit_remaining(), 7u);
  // Charged again: the refund really is in the store.
  EXPECT_EQ(One(D("tokens", "u1", 7)).limit_remaining(), 0u);
  EXPECT_EQ(One(D("tokens", "u1", 1)).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
}

TEST_P(EnvoyReferenceTest, NegativeHitsAreFlooredAtAnUnusedCounter) {
  // The reference floors its counter at 0; ours never lifts a limit above its capacity.
  ASSERT_NO_FATAL_FAILURE(StartWith());
  One(D("tokens", "u1", 3));
  EXPECT_EQ(One(R("tokens", "u1", 100)).limit_remaining(), 10u);
  EXPECT_EQ(One(R("bucket", "u1", 100)).limit_remaining(), 10u);  // burst 10
  EXPECT_EQ(One(D("tokens", "u1", 11)).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
}

TEST_P(EnvoyReferenceTest, NegativeHitsRefundOnlyTheCurrentWindow) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  EXPECT_EQ(One(D("tokens", "u1", 9)).limit_remaining(), 1u);
  clock_.Set(minute_start_ + 60 * kSecond + 1);  // the next window: 10 left
  One(D("tokens", "u1", 4));
  // Refunding 9 in this window gives back at most what this window took.
  EXPECT_EQ(One(R("tokens", "u1", 9)).limit_remaining(), 10u);
}

TEST_P(EnvoyReferenceTest, ARefundAndAChargeInOneRequest) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  One(D("tokens", "u1", 10));
  // The refund comes first: the charge of the same request may use it.
  const Response r = Call("ref", {R("tokens", "u1", 4), D("tokens", "u1", 3)});
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 1u);
}

TEST_P(EnvoyReferenceTest, ARefundIsNeverOverLimit) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  One(D("tokens", "u1", 10));
  const Response r = Call("ref", {R("tokens", "u2", 1)});
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 10u);  // a key never charged stays full
  EXPECT_EQ(server_->envoy_service()->stats().Snapshot().at("ref.tokens").negative_hits, 1u);
}

// --- several limits on one descriptor ---

TEST_P(EnvoyReferenceTest, SeveralLimitsAreDecidedAllOrNothing) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  EXPECT_EQ(One(D("api", "k")).code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(One(D("api", "k")).code(), Code::RateLimitResponse_Code_OK);
  // The per-second limit denies; the per-minute one is not charged for it.
  const auto third = One(D("api", "k"));
  EXPECT_EQ(third.code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(third.current_limit().name(), "api_per_second");
  EXPECT_EQ(third.current_limit().unit(), Unit::RateLimitResponse_RateLimit_Unit_SECOND);
  clock_.Advance(kSecond);
  const auto fourth = One(D("api", "k"));
  EXPECT_EQ(fourth.code(), Code::RateLimitResponse_Code_OK);
  // The tightest limit is reported: the minute's, with nothing left.
  EXPECT_EQ(fourth.current_limit().name(), "api_per_minute");
  EXPECT_EQ(fourth.limit_remaining(), 0u);
  clock_.Advance(kSecond);
  const auto fifth = One(D("api", "k"));
  EXPECT_EQ(fifth.code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(fifth.current_limit().name(), "api_per_minute");
  EXPECT_EQ(fifth.current_limit().requests_per_unit(), 3u);
}

TEST_P(EnvoyReferenceTest, SeveralLimitsAreRefundedTogether) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  EXPECT_EQ(One(D("api", "k", 2)).current_limit().name(), "api_per_second");
  const auto refunded = One(R("api", "k", 2));
  EXPECT_EQ(refunded.limit_remaining(), 2u);
  EXPECT_EQ(One(D("api", "k", 2)).code(), Code::RateLimitResponse_Code_OK);
  clock_.Advance(kSecond);
  // The minute limit got its 2 back too: 1 left of 3.
  EXPECT_EQ(One(D("api", "k", 1)).limit_remaining(), 0u);
}

// --- quota mode (the reference's example and statuses) ---

TEST_P(EnvoyReferenceTest, QuotaModeIsOverLimitOnlyWhenEveryQuotaDescriptorIs) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  const std::vector<Descriptor> both = {D("service", "service_1"), D("service", "service_2")};
  Response r = Call("ref", both);
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OK);
  // service_1 is out of quota, service_2 is not: OK, and only service_2 is charged.
  r = Call("ref", both);
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(r.statuses(0).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(r.statuses(1).code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 0u);
  // Both out of quota: OVER_LIMIT, each status says so.
  r = Call("ref", both);
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(r.statuses(1).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  const auto stats = server_->envoy_service()->stats().Snapshot();
  EXPECT_EQ(stats.at("ref.service_service_1").over_limit, 2u);
  EXPECT_EQ(stats.at("ref.service_service_2").over_limit, 1u);
}

TEST_P(EnvoyReferenceTest, QuotaModeLeavesRegularDescriptorsAllOrNothing) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  One(D("regular", "x"));
  // A regular descriptor over its limit denies whatever the quota descriptors say, and the
  // quota descriptor is not charged.
  Response r = Call("ref", {D("regular", "x"), D("service", "service_2")});
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(One(D("service", "service_2", 0)).limit_remaining(), 2u);
}

TEST_P(EnvoyReferenceTest, GlobalQuotaModeMakesEveryDescriptorAQuotaDescriptor) {
  ASSERT_NO_FATAL_FAILURE(StartWith([](ServerOptions& o) { o.limits.envoy_quota_mode = true; }));
  const std::vector<Descriptor> two = {D("regular", "x"), D("other", "x")};
  One(D("regular", "x"));
  Response r = Call("ref", two);
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(r.statuses(0).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  r = Call("ref", two);
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OVER_LIMIT);
}

// --- concurrency rules (our extension; docs/leases.md, "Envoy") ---

// The token a response hands Envoy in its dynamic_metadata, or "" when it has none.
std::string LeaseToken(const rlsv3::RateLimitResponse& r) {
  const auto& fields = r.dynamic_metadata().fields();
  const auto it = fields.find("ratelimit.lease");
  return it == fields.end() ? "" : it->second.string_value();
}

// At most `capacity` requests of a key at once, all-or-nothing with the request's rate limits;
// the stream-done release descriptor gives a slot back, and a lease never released ends by its
// TTL. On RocksDB and on the Redis Cluster.
TEST_P(EnvoyReferenceTest, AConcurrencyRuleHoldsItsSlotsUntilReleasedOrExpired) {
  ASSERT_NO_FATAL_FAILURE(StartWith());
  // On the cluster, "x"'s rate limit and org1's slots are on different hash slots: the server
  // takes the lease first and the tokens then (releasing the lease if they were refused).
  const Response first = Call("ref", {D("in_flight", "org1"), D("regular", "x")});
  ASSERT_EQ(first.statuses_size(), 2);
  EXPECT_EQ(first.overall_code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 1u);
  const std::string token = LeaseToken(first);
  ASSERT_FALSE(token.empty());
  EXPECT_FALSE(LeaseToken(Call("ref", {D("in_flight", "org1")})).empty());
  // Full: refused, and the request's rate limit is not taken.
  const Response full = Call("ref", {D("in_flight", "org1"), D("other", "y")});
  ASSERT_EQ(full.statuses_size(), 2);
  EXPECT_EQ(full.overall_code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(full.statuses(0).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(full.statuses(0).current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(full.statuses(0).duration_until_reset().seconds(), 30);
  EXPECT_EQ(full.statuses(1).code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(LeaseToken(full), "");
  EXPECT_EQ(One(D("other", "y")).code(), Code::RateLimitResponse_Code_OK);
  // A free slot refused a token is not kept: "regular" has no token left for "x".
  const Response refused = Call("ref", {D("in_flight", "org3"), D("regular", "x")});
  ASSERT_EQ(refused.statuses_size(), 2);
  EXPECT_EQ(refused.overall_code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(LeaseToken(refused), "");
  EXPECT_EQ(One(D("in_flight", "org3", 0)).limit_remaining(), 2u);
  // Another org has slots of its own.
  EXPECT_EQ(One(D("in_flight", "org2")).code(), Code::RateLimitResponse_Code_OK);
  // The stream-done release descriptor gives the first lease's slot back; sent twice (a retry),
  // it changes nothing more.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(One(D("ratelimit.lease", token)).code(), Code::RateLimitResponse_Code_OK);
    EXPECT_EQ(One(D("in_flight", "org1", 0)).limit_remaining(), 1u);  // a check: 1 free
  }
  EXPECT_EQ(One(D("in_flight", "org1")).code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(One(D("in_flight", "org1")).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  // Never released: both leases end when their TTL runs out.
  clock_.Set(clock_.NowMicros() + 30 * kSecond);
  EXPECT_EQ(One(D("in_flight", "org1", 0)).limit_remaining(), 2u);
}

// --- the server's shadow mode ---

TEST_P(EnvoyReferenceTest, GlobalShadowModeAnswersOkAndCountsIt) {
  ASSERT_NO_FATAL_FAILURE(StartWith([](ServerOptions& o) { o.limits.envoy_shadow_mode = true; }));
  One(D("regular", "x"));
  const Response r = Call("ref", {D("regular", "x"), D("tokens", "t")});
  EXPECT_EQ(r.overall_code(), Code::RateLimitResponse_Code_OK);
  EXPECT_EQ(r.statuses(0).code(), Code::RateLimitResponse_Code_OVER_LIMIT);
  // The descriptor within its limit is charged as if the other were not there.
  EXPECT_EQ(r.statuses(1).limit_remaining(), 9u);
  EXPECT_EQ(server_->envoy_service()->stats().global_shadow_mode(), 1u);
  EXPECT_EQ(server_->envoy_service()->stats().Snapshot().at("ref.regular").over_limit, 1u);
}

INSTANTIATE_TEST_SUITE_P(Stores, EnvoyReferenceTest, ::testing::Values("rocksdb", "redis_cluster"));

}  // namespace
}  // namespace ratelimit
