// The stored form of overrides and audit entries.
#include "storage/overrides/override_codec.h"

#include "gtest/gtest.h"

namespace ratelimit {
namespace {

Override Full() {
  Override o;
  o.target = {LimitSource::kDefined, "api", "trial-*", true};
  o.action.rate = 2.5;
  o.action.period_us = 1000000;
  o.action.capacity = 7;
  o.action.max_reserved = 0;
  o.expires_at_us = 1700000000000000;
  o.reason = "trial plan";
  o.set_by = "alice (token)";
  o.set_at_us = 1690000000000000;
  o.replaced = OverrideAction();
  o.replaced->effect = OverrideAction::Effect::kBlocked;
  o.deleted_at_us = 1695000000000000;
  return o;
}

TEST(OverrideCodecTest, OverrideRoundTrips) {
  EXPECT_EQ(DecodeOverride(EncodeOverride(Full())), Full());
  Override minimal;
  minimal.target.name = "api";
  minimal.target.key = "k";
  EXPECT_EQ(DecodeOverride(EncodeOverride(minimal)), minimal);
}

TEST(OverrideCodecTest, AuditEntryRoundTrips) {
  OverrideAuditEntry e;
  e.sequence = 42;
  e.at_us = 5;
  e.action = "set";
  e.authorized_by = "token";
  e.actor = "alice";
  e.peer = "ipv4:127.0.0.1:5000";
  e.reason = "r";
  e.after = Full();
  EXPECT_EQ(DecodeAuditEntry(EncodeAuditEntry(e)), e);
  e.before = Full();
  e.after.reset();
  EXPECT_EQ(DecodeAuditEntry(EncodeAuditEntry(e)), e);
  e.target = OverrideTarget{LimitSource::kEnvoy, "web", "bot-*", true};
  EXPECT_EQ(DecodeAuditEntry(EncodeAuditEntry(e)), e);
}

TEST(OverrideCodecTest, AuditEntriesWrittenWithoutTheirTargetStillRead) {
  OverrideAuditEntry e;
  e.sequence = 7;
  e.action = "delete";
  e.before = Full();
  // The earlier format: the same fields, without the target (an absent optional's 0 byte) at the
  // end, under format 1.
  std::string bytes = EncodeAuditEntry(e);
  ASSERT_EQ(bytes.back(), '\0');
  bytes.pop_back();
  bytes[0] = 1;
  const std::optional<OverrideAuditEntry> read = DecodeAuditEntry(bytes);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, e);
  EXPECT_FALSE(read->target.has_value());
  // A format-1 entry with bytes after it, or a target of an unknown source, is malformed.
  EXPECT_FALSE(DecodeAuditEntry(bytes + std::string(1, '\0')).has_value());
  e.target = OverrideTarget{static_cast<LimitSource>(9), "web", "k", false};
  EXPECT_FALSE(DecodeAuditEntry(EncodeAuditEntry(e)).has_value());
}

TEST(OverrideCodecTest, MalformedBytesAreRejected) {
  const std::string good = EncodeOverride(Full());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeOverride(good.substr(0, n)).has_value()) << "truncated at " << n;
  }
  EXPECT_FALSE(DecodeOverride(good + "x").has_value());
  std::string other_format = good;
  other_format[0] = 9;
  EXPECT_FALSE(DecodeOverride(other_format).has_value());
}

TEST(OverrideCodecTest, KeysOfOneLimitShareAPrefixAndAuditKeysSortBySequence) {
  const std::string prefix = OverrideNamePrefix(LimitSource::kDefined, "api");
  EXPECT_EQ(EncodeOverrideKey({LimitSource::kDefined, "api", "k", false}).rfind(prefix, 0), 0u);
  EXPECT_NE(EncodeOverrideKey({LimitSource::kDefined, "api2", "k", false}).rfind(prefix, 0), 0u);
  EXPECT_LT(EncodeAuditKey(255), EncodeAuditKey(256));
}

}  // namespace
}  // namespace ratelimit
