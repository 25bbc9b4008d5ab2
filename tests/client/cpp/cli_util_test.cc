// What the ratelimit CLI does with --timeout, with transport errors, and how it writes an error
// as JSON (client/cpp/cli_util.h, client/cpp/output.h).
#include "client/cpp/cli_util.h"

#include <map>
#include <string>
#include <vector>

#include "client/cpp/output.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

// A flag a command would drop unseen is refused (it was accepted and ignored: `consume
// --lease_id`, `acquire --wait`, `extend --count=1`).
TEST(FlagNotTakenTest, EachCommandTakesItsOwnFlagsAndTheConnections) {
  EXPECT_EQ(FlagNotTaken("consume", {"target", "json", "name", "key", "count", "request_id"}), "");
  EXPECT_EQ(FlagNotTaken("consume", {"name", "lease_id"}), "lease_id");
  EXPECT_EQ(FlagNotTaken("consume", {"ttl"}), "ttl");
  EXPECT_EQ(FlagNotTaken("check", {"request_id"}), "request_id");
  EXPECT_EQ(FlagNotTaken("reserve", {"wait", "omit_receipts"}), "");
  EXPECT_EQ(FlagNotTaken("acquire", {"name", "key", "count", "ttl", "holder"}), "");
  for (const char* flag :
       {"wait",       "rate",       "period",         "max_reserved", "omit_receipts",
        "used",       "receipt",    "all_keys",       "actor",        "reason",
        "expires_in", "blocked",    "unlimited",      "key_pattern",  "domain",
        "bucket",     "envoy_path", "envoy_override", "lease_id",     "page_size"}) {
    EXPECT_EQ(FlagNotTaken("acquire", {flag}), flag);
  }
  EXPECT_EQ(FlagNotTaken("extend", {"lease_id", "ttl", "count"}), "count");
  // A lease call's config flags make it inline: --source was taken and ignored (an acquire with
  // --source=inline took the limits file's limit).
  for (const char* command : {"acquire", "release", "extend"}) {
    EXPECT_EQ(FlagNotTaken(command, {"name", "source"}), "source") << command;
  }
  EXPECT_EQ(FlagNotTaken("leases", {"name", "source"}), "");
  EXPECT_EQ(FlagNotTaken("release", {"lease_id", "ttl"}), "ttl");
  EXPECT_EQ(FlagNotTaken("leases", {"page_size", "admin_token_file", "count"}), "count");
  EXPECT_EQ(FlagNotTaken("settle", {"receipt", "used", "name"}), "name");
  EXPECT_EQ(FlagNotTaken("reset", {"all_keys", "count"}), "count");
  EXPECT_EQ(FlagNotTaken("health", {"name"}), "name");
  EXPECT_EQ(FlagNotTaken("rlqs assignments", {"domain", "bucket", "name"}), "name");
  EXPECT_EQ(FlagNotTaken("override set", {"name", "key", "rate", "period", "expires_in"}), "");
  EXPECT_EQ(FlagNotTaken("override get", {"name", "rate"}), "rate");
  EXPECT_EQ(FlagNotTaken("not a command", {"anything"}), "");
}

TEST(ParseTimeoutTest, TakesADurationOrPlainSeconds) {
  EXPECT_EQ(*ParseTimeout("5"), absl::Seconds(5));
  EXPECT_EQ(*ParseTimeout("0.5"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseTimeout("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseTimeout("2m"), absl::Minutes(2));
  for (const char* bad : {"5x", "", "0", "-1", "0s", "inf", "nan"}) {
    absl::StatusOr<absl::Duration> d = ParseTimeout(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(d.status().message().rfind("--timeout: ", 0), 0u) << d.status();
  }
}

// A duration flag is written as the limits file writes one: days too, and never a bare number.
TEST(ParseDurationFlagTest, TakesTheLimitsFilesDurationsAndNamesTheFlag) {
  EXPECT_EQ(*ParseDurationFlag("--max_lease_ttl", "1d"), absl::Hours(24));
  EXPECT_EQ(*ParseDurationFlag("--ttl", "1d12h"), absl::Hours(36));
  EXPECT_EQ(*ParseDurationFlag("--period", "250ms"), absl::Milliseconds(250));
  for (const char* bad : {"30", "", "1x", "d"}) {
    absl::StatusOr<absl::Duration> d = ParseDurationFlag("--ttl", bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(d.status().message().rfind("--ttl: not a duration", 0), 0u) << d.status();
  }
}

TEST(TransportHintTest, PlaintextToATlsPortAndTheReverseGetAHint) {
  const absl::Status closed = absl::UnavailableError("Socket closed");
  EXPECT_NE(WithTransportHint(closed, /*tls=*/false).message().find("add --tls"),
            std::string::npos);
  EXPECT_EQ(WithTransportHint(closed, /*tls=*/true), closed);
  const absl::Status handshake = absl::UnavailableError("Ssl handshake failed: SSL_ERROR_SSL");
  EXPECT_NE(WithTransportHint(handshake, /*tls=*/true).message().find("drop --tls"),
            std::string::npos);
  EXPECT_EQ(WithTransportHint(handshake, /*tls=*/false), handshake);
  const absl::Status other = absl::NotFoundError("Socket closed");  // not a transport failure
  EXPECT_EQ(WithTransportHint(other, false), other);
}

TEST(AdminHintTest, AnAdminCallRefusedForWantOfATokenSaysWhereTheCliReadsIt) {
  const absl::Status unauthenticated =
      absl::UnauthenticatedError("admin call requires metadata authorization: Bearer <token>");
  EXPECT_EQ(WithAdminHint(unauthenticated, /*token_sent=*/false).message(),
            "admin call requires metadata authorization: Bearer <token> (the CLI sends the token "
            "of --admin_token_file, else of $RATELIMIT_ADMIN_TOKEN; neither is set)");
  EXPECT_EQ(WithAdminHint(unauthenticated, /*token_sent=*/true), unauthenticated);
  const absl::Status denied = absl::PermissionDeniedError("Reset is disabled");
  EXPECT_EQ(WithAdminHint(denied, false), denied);
}

TEST(FormatJsonErrorTest, WritesCodeThenMessageAsValidJson) {
  const absl::Status error = absl::NotFoundError("name: no limit \"x\"\n\tin the limits file");
  const std::string json = FormatJsonError(error);
  EXPECT_EQ(json.rfind("{\"error\":{\"code\":\"NOT_FOUND\",\"message\":", 0), 0u) << json;
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& e = parsed.fields().at("error").struct_value().fields();
  EXPECT_EQ(e.at("code").string_value(), "NOT_FOUND");
  EXPECT_EQ(e.at("message").string_value(), error.message());
}

TEST(FormatResetResponseTest, NamesStatesAndLeasesApart) {
  auto reply = [](uint64_t deleted, uint64_t leases) {
    v1::ResetResponse r;
    r.set_deleted(deleted);
    r.set_leases(leases);
    return r;
  };
  EXPECT_EQ(FormatResetResponse("api/u1", false, reply(1, 0)), "reset api/u1: 1 state deleted\n");
  EXPECT_EQ(FormatResetResponse("api (all keys)", true, reply(3, 0)),
            "reset api (all keys): 3 states deleted\n");
  EXPECT_EQ(FormatResetResponse("jobs/t", false, reply(2, 2)), "reset jobs/t: 2 leases ended\n");
  EXPECT_EQ(FormatResetResponse("jobs/t", false, reply(1, 1)), "reset jobs/t: 1 lease ended\n");
  EXPECT_EQ(FormatResetResponse("jobs (all keys)", true, reply(3, 3)),
            "reset jobs (all keys): leases ended on 3 keys\n");
  EXPECT_EQ(FormatResetResponse("pool/k", false, reply(3, 1)),
            "reset pool/k: 2 states deleted, 1 lease ended\n");
  EXPECT_EQ(FormatResetResponse("api/u1", false, reply(0, 0)),
            "reset api/u1: nothing to reset (no state or lease held)\n");
}

TEST(ParseBucketPairsTest, TakesKeyValueItemsAndNamesTheFlag) {
  absl::StatusOr<std::map<std::string, std::string>> pairs =
      ParseBucketPairs("tenant=a,route=/x=y,empty=");
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(*pairs, (std::map<std::string, std::string>{
                        {"tenant", "a"}, {"route", "/x=y"}, {"empty", ""}}));
  EXPECT_TRUE(ParseBucketPairs("")->empty());
  EXPECT_EQ(ParseBucketPairs("tenant").status().message(),
            "--bucket: \"tenant\" is not key=value (e.g. --bucket=tenant=a,route=b)");
  EXPECT_EQ(ParseBucketPairs("=a").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBucketPairs("t=a,t=b").status().message(),
            "--bucket: the key \"t\" is given twice");
  EXPECT_EQ(ParseBucketPairs("t=a\\").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBucketPairs("t=a\\b").status().code(), absl::StatusCode::kInvalidArgument);
}

// A BucketId whose keys or values hold ',', '=' or '\\' prints escaped, and reads back as itself
// (not as another bucket: "tenant=a,b=c" is two pairs).
TEST(ParseBucketPairsTest, ReadsBackWhatFormatBucketIdPrints) {
  const std::map<std::string, std::string> id = {{"tenant", "a,b=c"}, {"k\\=", "v\\"}};
  const std::string printed = FormatBucketId(id);
  EXPECT_EQ(printed, "k\\\\\\==v\\\\,tenant=a\\,b\\=c");
  absl::StatusOr<std::map<std::string, std::string>> read = ParseBucketPairs(printed);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, id);
  EXPECT_EQ(*ParseBucketPairs("tenant=a,b=c"),
            (std::map<std::string, std::string>{{"tenant", "a"}, {"b", "c"}}));
}

TEST(FormatRlqsAssignmentsTest, OneLinePerBucketAndPerStream) {
  v1::GetRlqsAssignmentsResponse r;
  v1::RlqsBucketAssignments* b = r.add_buckets();
  (*b->mutable_bucket())["tenant"] = "a";
  (*b->mutable_bucket())["route"] = "r";
  b->mutable_rule()->set_name("per_tenant");
  b->mutable_rule()->set_rate_per_second(100);
  b->mutable_rule()->set_burst(50);
  b->mutable_replica_part()->set_rate_per_second(40);
  b->mutable_replica_part()->set_burst(20);
  v1::RlqsSubscriber* s = b->add_subscribers();
  s->set_stream_id(7);
  s->set_peer("ipv4:10.0.0.7:51234");
  s->set_demand_known(true);
  s->set_demand(30);
  s->set_assigned_rate(30);
  s->set_assigned_burst(15);
  s->set_tokens_per_fill(30);
  s->mutable_fill_interval()->set_seconds(1);
  s->set_max_tokens(15);
  s->mutable_time_to_live()->set_seconds(15);
  s->mutable_sent_at()->set_seconds(1795255201);
  v1::RlqsSubscriber* denied = b->add_subscribers();
  denied->set_stream_id(8);
  denied->set_action(v1::RLQS_DENY_ALL);
  r.set_next_page_token("abc");
  EXPECT_EQ(
      FormatRlqsAssignments(r),
      "route=r,tenant=a  rule per_tenant: token bucket 100/s burst 50; this replica's part 40/s "
      "burst 20\n"
      "  stream 7  ipv4:10.0.0.7:51234  demand 30/s  assigned 30/s burst 15 (30 per 1s, "
      "max 15)  ttl 15s  sent 2026-11-21T10:00:01.000Z\n"
      "  stream 8    demand unknown  deny all  ttl 0s\n"
      "more: --page_token=abc\n");
  EXPECT_EQ(FormatRlqsAssignments(v1::GetRlqsAssignmentsResponse()),
            "no stream reports this bucket\n");
}

}  // namespace
}  // namespace ratelimit
