// What the simulated Envoy of the RLQS benchmark enforces: the assignment it holds, and the
// fallbacks without one.
#include "bench/local_quota.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace ratelimit::bench {
namespace {

using BucketAction = LocalQuota::BucketAction;
constexpr int64_t kSecond = 1000000;

BucketAction TokenBucket(uint32_t max_tokens, uint32_t tokens_per_fill, int64_t fill_seconds,
                         int64_t ttl_seconds) {
  BucketAction a;
  auto* q = a.mutable_quota_assignment_action();
  q->mutable_assignment_time_to_live()->set_seconds(ttl_seconds);
  auto* tb = q->mutable_rate_limit_strategy()->mutable_token_bucket();
  tb->set_max_tokens(max_tokens);
  tb->mutable_tokens_per_fill()->set_value(tokens_per_fill);
  tb->mutable_fill_interval()->set_seconds(fill_seconds);
  return a;
}

BucketAction Blanket(envoy::type::v3::RateLimitStrategy::BlanketRule rule, int64_t ttl_seconds) {
  BucketAction a;
  auto* q = a.mutable_quota_assignment_action();
  q->mutable_assignment_time_to_live()->set_seconds(ttl_seconds);
  q->mutable_rate_limit_strategy()->set_blanket_rule(rule);
  return a;
}

TEST(LocalQuotaTest, WithoutAnAssignmentEverythingIsAllowedAndCountedApart) {
  LocalQuota q;
  EXPECT_FALSE(q.HasAssignment(0));
  EXPECT_EQ(q.Admit(500, 0), 500u);
  EXPECT_EQ(q.admitted_without_assignment(), 500u);
  EXPECT_EQ(q.AssignedRate(0), 0);
}

TEST(LocalQuotaTest, TokenBucketStartsFullAndRefillsAtItsRate) {
  LocalQuota q;
  q.Apply(TokenBucket(/*max=*/100, /*per_fill=*/200, /*fill=*/2, /*ttl=*/3), 0);
  EXPECT_EQ(q.AssignedRate(0), 100);
  EXPECT_EQ(q.Admit(150, 0), 100u);  // the full bucket
  EXPECT_EQ(q.Admit(10, 0), 0u);
  EXPECT_EQ(q.Admit(100, kSecond / 2), 50u);    // half a second at 100/s
  EXPECT_EQ(q.Admit(1000, 2 * kSecond), 100u);  // refilled up to max_tokens only
  EXPECT_EQ(q.admitted_without_assignment(), 0u);
}

TEST(LocalQuotaTest, SubSecondFillIntervalIsARateOfZero) {
  LocalQuota q;
  BucketAction a = TokenBucket(10, 10, 0, 3);
  a.mutable_quota_assignment_action()
      ->mutable_rate_limit_strategy()
      ->mutable_token_bucket()
      ->mutable_fill_interval()
      ->set_nanos(500000000);
  q.Apply(a, 0);
  EXPECT_EQ(q.Admit(20, 0), 10u);
  EXPECT_EQ(q.Admit(20, 2 * kSecond), 0u);
}

TEST(LocalQuotaTest, ExpiredAssignmentFallsBackToAllowAll) {
  LocalQuota q;
  q.Apply(TokenBucket(10, 10, 1, /*ttl=*/2), 0);
  EXPECT_EQ(q.Admit(20, 0), 10u);
  EXPECT_TRUE(q.HasAssignment(2 * kSecond - 1));
  EXPECT_FALSE(q.HasAssignment(2 * kSecond));
  EXPECT_EQ(q.Admit(1000, 2 * kSecond), 1000u);
  EXPECT_EQ(q.admitted_without_assignment(), 1000u);
  // A TTL of 0 expires the assignment at once.
  q.Apply(TokenBucket(10, 10, 1, 0), 3 * kSecond);
  EXPECT_EQ(q.Admit(50, 3 * kSecond), 50u);
}

TEST(LocalQuotaTest, SameBucketAgainKeepsItsTokensAChangedOneItsRatio) {
  LocalQuota q;
  q.Apply(TokenBucket(100, 100, 1, 3), 0);
  EXPECT_EQ(q.Admit(75, 0), 75u);  // 25 of 100 left
  q.Apply(TokenBucket(100, 100, 1, 3), 0);
  EXPECT_EQ(q.Admit(30, 0), 25u);                     // an extension: not refilled
  q.Apply(TokenBucket(100, 100, 1, 3), kSecond / 2);  // 50 of 100 now
  q.Apply(TokenBucket(40, 40, 1, 3), kSecond / 2);    // the same half of 40
  EXPECT_EQ(q.AssignedRate(kSecond / 2), 40);
  EXPECT_EQ(q.Admit(100, kSecond / 2), 20u);
}

TEST(LocalQuotaTest, BlanketRulesAndAbandon) {
  LocalQuota q;
  q.Apply(Blanket(envoy::type::v3::RateLimitStrategy::DENY_ALL, 3), 0);
  EXPECT_EQ(q.Admit(10, 0), 0u);
  q.Apply(Blanket(envoy::type::v3::RateLimitStrategy::ALLOW_ALL, 3), 0);
  EXPECT_EQ(q.Admit(10, 0), 10u);
  EXPECT_EQ(q.admitted_without_assignment(), 0u);
  BucketAction abandon;
  abandon.mutable_abandon_action();
  q.Apply(abandon, 0);
  EXPECT_FALSE(q.HasAssignment(0));
  EXPECT_EQ(q.Admit(10, 0), 10u);
  EXPECT_EQ(q.admitted_without_assignment(), 10u);
}

TEST(LocalQuotaTest, RequestsPerTimeUnitIsIgnoredAsEnvoyDoes) {
  LocalQuota q;
  q.Apply(Blanket(envoy::type::v3::RateLimitStrategy::DENY_ALL, 3), 0);
  BucketAction a;
  auto* q2 = a.mutable_quota_assignment_action();
  q2->mutable_assignment_time_to_live()->set_seconds(3);
  q2->mutable_rate_limit_strategy()->mutable_requests_per_time_unit();
  q.Apply(a, 0);
  EXPECT_EQ(q.Admit(10, 0), 0u);  // DENY_ALL still in force
}

}  // namespace
}  // namespace ratelimit::bench
