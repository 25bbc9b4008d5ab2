// The inline config the command line builds from its flags (client/cpp/inline_config.h).
#include "client/cpp/inline_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;

TEST(InlineConfigTest, NoKindIsNoConfig) {
  absl::StatusOr<std::optional<v1::LimitConfig>> c = InlineConfigOf(InlineConfigFlags());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_value());
}

// A config flag without --kind was dropped: `consume --name=api --rate=5 --period=1m` took from
// the limits file's api and exited 0.
TEST(InlineConfigTest, AConfigFlagWithoutAKindIsRefusedByName) {
  InlineConfigFlags f;
  f.rate = 5;
  f.period = "1m";
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()),
              HasSubstr("--rate: an inline config needs --kind"));
  f = InlineConfigFlags();
  f.capacity = 3;
  EXPECT_EQ(InlineConfigOf(f).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()), HasSubstr("--capacity"));
  f = InlineConfigFlags();
  f.lease_ttl = "30s";
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()), HasSubstr("--lease_ttl"));
}

TEST(InlineConfigTest, ATokenBucketCarriesItsRatePeriodCapacityAndReservations) {
  InlineConfigFlags f;
  f.kind = "token_bucket";
  f.rate = 10;
  f.period = "1m";
  f.capacity = 20;
  f.max_reserved = 0;
  absl::StatusOr<std::optional<v1::LimitConfig>> c = InlineConfigOf(f);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  const v1::LimitConfig& config = **c;
  EXPECT_EQ(config.kind(), v1::TOKEN_BUCKET);
  EXPECT_EQ(config.rate(), 10);
  EXPECT_EQ(config.period().seconds(), 60);
  EXPECT_EQ(config.capacity(), 20);
  ASSERT_TRUE(config.has_max_reserved());
  EXPECT_EQ(config.max_reserved(), 0);
  EXPECT_FALSE(config.has_lease_ttl());
}

TEST(InlineConfigTest, AConcurrencyLimitCarriesItsSlotsAndLeaseTtls) {
  InlineConfigFlags f;
  f.kind = "concurrency";
  f.capacity = 4;
  f.lease_ttl = "1500ms";
  f.max_lease_ttl = "1d";  // days, as the limits file writes them
  absl::StatusOr<std::optional<v1::LimitConfig>> c = InlineConfigOf(f);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  const v1::LimitConfig& config = **c;
  EXPECT_EQ(config.kind(), v1::CONCURRENCY);
  EXPECT_EQ(config.capacity(), 4);
  EXPECT_EQ(config.lease_ttl().seconds(), 1);
  EXPECT_EQ(config.lease_ttl().nanos(), 500000000);
  EXPECT_EQ(config.max_lease_ttl().seconds(), 86400);
  // No period is needed, and none is sent.
  EXPECT_FALSE(config.has_period());
  EXPECT_EQ(config.rate(), 0);
}

// What does not belong to the kind is sent all the same, for the server to name, never dropped.
TEST(InlineConfigTest, FieldsOfAnotherKindAreSentNotDropped) {
  InlineConfigFlags f;
  f.kind = "concurrency";
  f.capacity = 4;
  f.rate = 3;
  f.period = "1s";
  absl::StatusOr<std::optional<v1::LimitConfig>> c = InlineConfigOf(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->rate(), 3);
  EXPECT_EQ((*c)->period().seconds(), 1);
  f = InlineConfigFlags();
  f.kind = "fixed_window";
  f.rate = 3;
  f.period = "1s";
  f.lease_ttl = "30s";
  c = InlineConfigOf(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->lease_ttl().seconds(), 30);
}

TEST(InlineConfigTest, WhatCannotBeSentNamesItsFlag) {
  InlineConfigFlags f;
  f.kind = "leaky_bucket";
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()), HasSubstr("--kind"));
  f.kind = "token_bucket";
  f.rate = 1;
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()),
              HasSubstr("--period: required with --kind=token_bucket"));
  f.period = "soon";
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()), HasSubstr("--period"));
  f = InlineConfigFlags();
  f.kind = "concurrency";
  f.lease_ttl = "30";
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()), HasSubstr("--lease_ttl"));
  f.lease_ttl = "";
  f.max_lease_ttl = "an hour";
  EXPECT_THAT(std::string(InlineConfigOf(f).status().message()), HasSubstr("--max_lease_ttl"));
}

}  // namespace
}  // namespace ratelimit
