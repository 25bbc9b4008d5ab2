// The requests `ratelimit override` makes from its flags, and how it prints overrides and the
// audit.
#include "client/cpp/override_command.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

TEST(OverrideCommandTest, SetSendsOnlyTheLimitFieldsGiven) {
  OverrideFlags f;
  f.name = "api";
  f.key_pattern = "trial-*";
  f.capacity = 200;
  f.period = "1m";
  f.expires_in = "2h";
  f.reason = "plan";
  f.actor = "alice";
  absl::StatusOr<v1::SetOverrideRequest> r = SetOverrideOf(f, kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::Override& o = r->override();
  EXPECT_EQ(o.target().name(), "api");
  EXPECT_EQ(o.target().key_pattern(), "trial-*");
  EXPECT_TRUE(o.target().key().empty());
  EXPECT_FALSE(o.limit().has_rate());
  EXPECT_EQ(o.limit().capacity(), 200);
  EXPECT_EQ(o.limit().period().seconds(), 60);
  EXPECT_EQ(o.expires_at().seconds(), 1700000000 + 7200);
  EXPECT_EQ(o.reason(), "plan");
  EXPECT_EQ(r->actor(), "alice");
}

TEST(OverrideCommandTest, SetRefusesContradictionsAndBadDurations) {
  OverrideFlags f;
  f.unlimited = true;
  f.rate = 5;
  EXPECT_TRUE(absl::StrContains(SetOverrideOf(f, kNow).status().message(), "exclude each other"));
  f = OverrideFlags();
  f.blocked = true;
  EXPECT_TRUE(SetOverrideOf(f, kNow)->override().blocked());
  f.expires_in = "soon";
  EXPECT_TRUE(absl::StartsWith(SetOverrideOf(f, kNow).status().message(), "--expires_in: "));
  f = OverrideFlags();
  f.period = "fast";
  EXPECT_TRUE(absl::StartsWith(SetOverrideOf(f, kNow).status().message(), "--period: "));
}

TEST(OverrideCommandTest, AnEnvoyTargetCarriesItsDomainAndPathAndPrintsThem) {
  OverrideFlags f;
  f.source = v1::ENVOY;
  f.name = "web";
  f.envoy_path = {"message_type=marketing", "to_number"};
  f.key = "marketing|555";
  f.blocked = true;
  absl::StatusOr<v1::SetOverrideRequest> r = SetOverrideOf(f, kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::OverrideTarget& t = r->override().target();
  EXPECT_EQ(t.source(), v1::ENVOY);
  EXPECT_EQ(t.name(), "web");
  ASSERT_EQ(t.envoy_path_size(), 2);
  EXPECT_EQ(t.envoy_path(0).key(), "message_type");
  EXPECT_EQ(t.envoy_path(0).value(), "marketing");
  EXPECT_EQ(t.envoy_path(1).key(), "to_number");
  EXPECT_TRUE(t.envoy_path(1).value().empty());
  EXPECT_TRUE(absl::StartsWith(FormatOverride(r->override()),
                               "envoy web/message_type=marketing/to_number key marketing|555: "
                               "blocked"))
      << FormatOverride(r->override());
}

TEST(OverrideCommandTest, FormatsAnOverrideAndAnAuditEntry) {
  v1::Override o;
  o.mutable_target()->set_name("api");
  o.mutable_target()->set_key("customer-42");
  o.mutable_limit()->set_rate(100);
  o.mutable_limit()->set_capacity(200);
  o.mutable_expires_at()->set_seconds(1700000000);
  o.set_set_by("alice (token)");
  o.set_reason("incident 811");
  EXPECT_EQ(FormatOverride(o),
            "api key customer-42: rate=100 capacity=200 until 2023-11-14T22:13:20Z, by alice "
            "(token): incident 811\n");
  o.set_inert(true);
  EXPECT_TRUE(absl::StrContains(FormatOverride(o), "(inert: no such limit in the limits file)"));

  v1::OverrideAuditEntry e;
  e.set_sequence(7);
  e.mutable_at()->set_seconds(1700000000);
  e.set_action("delete");
  e.set_authorized_by("token");
  e.set_actor("bob");
  e.set_reason("over");
  *e.mutable_before() = o;
  EXPECT_EQ(FormatAuditEntry(e),
            "#7 2023-11-14T22:13:20Z delete api key customer-42 by token (bob): over\n");
}

}  // namespace
}  // namespace ratelimit
