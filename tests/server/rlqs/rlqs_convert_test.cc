#include "server/rlqs/rlqs_convert.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/rlqs/rlqs_test_server.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;
using testing::Usage;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

TEST(ParseRlqsReportsTest, NamesTheField) {
  rlqs_v3::RateLimitQuotaUsageReports m = Usage("", {{"a", "b"}}, 1, 0, 1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "domain: required in the first message of a stream");
  EXPECT_TRUE(ParseRlqsReports(m, "edge").ok());  // later messages may leave it empty
  m.set_domain("other");
  EXPECT_THAT(ParseRlqsReports(m, "edge").status().message(), HasSubstr("domain: \"other\""));
  m = Usage("edge", {}, 1, 0, 1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].bucket_id: at least one pair");
  m = Usage("edge", {{"a", "b"}}, 1, 0, 1);
  m.mutable_bucket_quota_usages(0)->clear_time_elapsed();
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].time_elapsed: required");
  m.mutable_bucket_quota_usages(0)->mutable_time_elapsed()->set_seconds(-1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].time_elapsed: must not be negative");
  m.clear_bucket_quota_usages();
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(), "bucket_quota_usages: at least one usage");
}

TEST(ParseRlqsReportsTest, AMalformedTimeElapsedIsNamedAsSuch) {
  // A time_elapsed that is no Duration at all is not called negative: the message says what to
  // fix. Each is refused, and so changes nothing.
  const struct {
    int64_t seconds;
    int32_t nanos;
  } malformed[] = {{1, 2000000000}, {1, -5}, {1000000000000, 0}, {0, -1000000000}};
  for (const auto& d : malformed) {
    rlqs_v3::RateLimitQuotaUsageReports m = Usage("edge", {{"a", "b"}}, 1, 0, 1);
    m.mutable_bucket_quota_usages(0)->mutable_time_elapsed()->set_seconds(d.seconds);
    m.mutable_bucket_quota_usages(0)->mutable_time_elapsed()->set_nanos(d.nanos);
    EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
              "bucket_quota_usages[0].time_elapsed: is not a valid google.protobuf.Duration")
        << d.seconds << " s " << d.nanos << " ns";
  }
}

TEST(ParseRlqsReportsTest, SortsTheBucketAndKeepsTimeToTheMicrosecond) {
  rlqs_v3::RateLimitQuotaUsageReports m = Usage("edge", {{"z", "1"}, {"a", "2"}}, 3, 4, 2);
  m.mutable_bucket_quota_usages(0)->mutable_time_elapsed()->set_nanos(900000999);
  absl::StatusOr<RlqsReports> r = ParseRlqsReports(m, "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->domain, "edge");
  ASSERT_EQ(r->usages.size(), 1u);
  EXPECT_EQ(r->usages[0].bucket, (RlqsBucketKey{{"a", "2"}, {"z", "1"}}));
  EXPECT_EQ(r->usages[0].allowed, 3u);
  EXPECT_EQ(r->usages[0].denied, 4u);
  EXPECT_EQ(r->usages[0].elapsed_us, 2900000);
}

// What the administrative view can show (GetRlqsAssignments) is what a stream may report.
TEST(ParseRlqsReportsTest, ADomainOrBucketPastTheBoundsIsRefused) {
  rlqs_v3::RateLimitQuotaUsageReports m = Usage(std::string(257, 'd'), {{"a", "b"}}, 1, 0, 1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(), "domain: at most 256 bytes, got 257");
  m.set_domain(std::string(256, 'd'));
  EXPECT_TRUE(ParseRlqsReports(m, "").ok());

  m = Usage("edge", {{"", "b"}}, 1, 0, 1);
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].bucket_id: a key must not be empty");
  m = Usage("edge", {{"a", "b"}}, 1, 0, 1);
  auto& pairs = *m.mutable_bucket_quota_usages(0)->mutable_bucket_id()->mutable_bucket();
  for (int i = 0; i < 31; ++i) pairs["k" + std::to_string(i)] = "v";
  EXPECT_TRUE(ParseRlqsReports(m, "").ok()) << "32 pairs";
  pairs["k31"] = "v";
  EXPECT_EQ(ParseRlqsReports(m, "").status().message(),
            "bucket_quota_usages[0].bucket_id: at most 32 pairs, got 33");
}

// The one check of a domain and of a BucketId, which the stream and the administrative view share.
TEST(RlqsBoundsTest, ADomainAndABucketKeyAreCheckedUnderTheFieldNamed) {
  EXPECT_TRUE(CheckRlqsDomain(std::string(256, 'd'), "domain").ok());
  EXPECT_EQ(CheckRlqsDomain(std::string(300, 'd'), "x.domain").message(),
            "x.domain: at most 256 bytes, got 300");

  google::protobuf::Map<std::string, std::string> pairs;
  absl::StatusOr<RlqsBucketKey> key = ToRlqsBucketKey(pairs, "bucket");
  ASSERT_TRUE(key.ok());
  EXPECT_TRUE(key->empty());
  pairs["z"] = "1";
  pairs["a"] = "2";
  pairs["m"] = "";
  key = ToRlqsBucketKey(pairs, "bucket");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, (RlqsBucketKey{{"a", "2"}, {"m", ""}, {"z", "1"}}));
  pairs[""] = "v";
  EXPECT_EQ(ToRlqsBucketKey(pairs, "f").status().message(), "f: a key must not be empty");
  pairs.erase("");
  for (int i = 0; i < 30; ++i) pairs["k" + std::to_string(i)] = "v";
  EXPECT_EQ(ToRlqsBucketKey(pairs, "f").status().message(), "f: at most 32 pairs, got 33");
}

TEST(ToBucketActionTest, TokenBucketBlanketRulesAndAbandon) {
  RlqsAssignment a;
  a.kind = RlqsAssignment::Kind::kTokenBucket;
  a.token_bucket = {20, 21, 2};
  a.ttl_seconds = 15;
  auto action = ToBucketAction({{"tenant", "a"}}, a);
  EXPECT_EQ(action.bucket_id().bucket().at("tenant"), "a");
  const auto& q = action.quota_assignment_action();
  EXPECT_EQ(q.assignment_time_to_live().seconds(), 15);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().max_tokens(), 20u);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().tokens_per_fill().value(), 21u);
  EXPECT_EQ(q.rate_limit_strategy().token_bucket().fill_interval().seconds(), 2);
  a.kind = RlqsAssignment::Kind::kAllowAll;
  action = ToBucketAction({{"tenant", "a"}}, a);
  EXPECT_TRUE(action.quota_assignment_action().rate_limit_strategy().has_blanket_rule());
  EXPECT_EQ(action.quota_assignment_action().rate_limit_strategy().blanket_rule(),
            envoy::type::v3::RateLimitStrategy::ALLOW_ALL);
  a.kind = RlqsAssignment::Kind::kDenyAll;
  action = ToBucketAction({{"tenant", "a"}}, a);
  EXPECT_EQ(action.quota_assignment_action().rate_limit_strategy().blanket_rule(),
            envoy::type::v3::RateLimitStrategy::DENY_ALL);
  a.kind = RlqsAssignment::Kind::kAbandon;
  EXPECT_TRUE(ToBucketAction({{"tenant", "a"}}, a).has_abandon_action());
}

}  // namespace
}  // namespace ratelimit
