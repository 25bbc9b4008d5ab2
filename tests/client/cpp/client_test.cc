// The C++ client library (client/client.cc) against an in-process server on port 0, and the
// command-line tool's rendering of a reply (client/output.cc).
#include "client/cpp/client.h"

#include <memory>
#include <string>

#include "client/cpp/output.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kApiLimits;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RefusingPort;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::ValueOrDie;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.admin.token = "tok";
    auto started =
        StartServerAndClient(o, dir_, kApiLimits, clock_, std::make_unique<MemoryStateStore>());
    ASSERT_OK(started);
    server_ = std::move(started->server);  // each test connects the clients it needs
  }

  std::unique_ptr<RateLimitClient> Connect(ClientOptions options = {}) {
    return RateLimitClient::Connect(target(), std::move(options));
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
};

TEST_F(ClientTest, ConsumeCheckAndReserveReturnTheServersReply) {
  auto client = Connect();
  auto first = client->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(first);
  EXPECT_TRUE(first->allowed());
  EXPECT_EQ(first->results(0).value(), 1);
  auto check = client->Check(MakeRequest("api", "u1"));
  ASSERT_OK(check);
  EXPECT_TRUE(check->allowed());
  EXPECT_EQ(check->results(0).value(), 1);  // a check takes nothing
  ASSERT_OK(client->Consume(MakeRequest("api", "u1")));
  auto denied = client->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(denied);  // a denial is a reply, not an error
  EXPECT_FALSE(denied->allowed());
  EXPECT_EQ(denied->reason(), v1::INSUFFICIENT_TOKENS);
  EXPECT_EQ(RetryAt(*denied), absl::FromUnixMicros(clock_.NowMicros() + kSecond / 2));
  auto reserved = client->Reserve(MakeRequest("api", "u1", 2));
  ASSERT_OK(reserved);
  EXPECT_TRUE(reserved->allowed());
  EXPECT_EQ(RetryAt(*reserved), absl::FromUnixMicros(clock_.NowMicros() + kSecond));
}

TEST_F(ClientTest, ReserveAndWaitWaitsForTheReservationOnly) {
  auto client = Connect();
  absl::Time waited_until = absl::InfinitePast();
  int waits = 0;
  auto sleep = [&](absl::Time t) {
    waited_until = t;
    ++waits;
  };
  auto r = client->ReserveAndWait(MakeRequest("api", "u1", 3), sleep);
  ASSERT_OK(r);
  ASSERT_TRUE(r->allowed());
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(waited_until, RetryAt(*r));
  EXPECT_EQ(waited_until, absl::FromUnixMicros(clock_.NowMicros() + kSecond / 2));
  // A denied reservation returns at once, without waiting: an inline bucket of 1 that allows no
  // debt, already empty.
  v1::RateLimitRequest tight = MakeRequest("tight", "u1");
  v1::LimitConfig* config = tight.mutable_limits(0)->mutable_config();
  config->set_kind(v1::TOKEN_BUCKET);
  config->set_rate(1);
  config->mutable_period()->set_seconds(1);
  config->set_max_reserved(0);
  ASSERT_OK(client->Consume(tight));
  auto denied = client->ReserveAndWait(tight, sleep);
  ASSERT_OK(denied);
  EXPECT_FALSE(denied->allowed());
  EXPECT_EQ(denied->reason(), v1::MAX_RESERVED_EXCEEDED);
  EXPECT_EQ(waits, 1);
}

TEST_F(ClientTest, ErrorsKeepTheServersCodeAndMessage) {
  auto client = Connect();
  auto unknown = client->Consume(MakeRequest("nope", "u1"));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("limits[0].name"), std::string::npos);
  auto bad = client->Check(MakeRequest("api", ""));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("limits[0].key"), std::string::npos);
  auto zero = client->Reserve(MakeRequest("api", "u1", 0));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, AServerThatIsDownIsUnavailable) {
  RefusingPort down;
  auto client = RateLimitClient::Connect(down.target(), ClientOptions{absl::Seconds(10), ""});
  EXPECT_EQ(client->Consume(MakeRequest("api", "u1")).status().code(),
            absl::StatusCode::kUnavailable);
}

// The RLQS admin view sends the admin token too: with it, this server (without --rlqs) says so;
// without it, the call is refused before that.
TEST_F(ClientTest, GetRlqsAssignmentsSendsTheAdminToken) {
  v1::GetRlqsAssignmentsRequest request;
  request.set_domain("edge");
  EXPECT_EQ(
      Connect(ClientOptions{absl::Seconds(10), "tok"})->GetRlqsAssignments(request).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Connect()->GetRlqsAssignments(request).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(ClientTest, ResetSendsTheAdminToken) {
  auto client = Connect(ClientOptions{absl::Seconds(10), "tok"});
  ASSERT_OK(client->Consume(MakeRequest("api", "u1", 2)));
  ASSERT_OK(client->Consume(MakeRequest("api", "u2", 2)));
  EXPECT_EQ(ValueOrDie(client->Reset("api", "u1")), 1u);
  EXPECT_EQ(client->Check(MakeRequest("api", "u1"))->results(0).value(), 2);  // full again
  EXPECT_EQ(client->Check(MakeRequest("api", "u2"))->results(0).value(), 0);
  EXPECT_EQ(ValueOrDie(client->ResetAll("api")), 1u);  // u2's state; u1 has none
  EXPECT_EQ(client->Check(MakeRequest("api", "u2"))->results(0).value(), 2);
  v1::ResetRequest inline_reset;
  inline_reset.set_source(v1::INLINE);
  inline_reset.set_name("mine");
  inline_reset.set_all_keys(true);
  EXPECT_EQ(ValueOrDie(client->Reset(inline_reset)), 0u);  // nothing to delete: visible as 0

  EXPECT_EQ(Connect()->Reset("api", "u1").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Connect(ClientOptions{absl::Seconds(10), "wrong"})->ResetAll("api").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// Health() and `ratelimit health` (the container image's HEALTHCHECK) follow grpc.health.v1:
// SERVING, NOT_SERVING while the store fails, and an error when nothing answers.
TEST(ClientHealthTest, HealthFollowsTheServersStoreAndTheCliExitStatusSaysSo) {
  FakeClock clock;
  auto failing = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* store = failing.get();
  ServerOptions o;
  o.listen.address = "127.0.0.1:0";
  o.store.health_probe_interval = absl::Milliseconds(20);
  auto server = RateLimitServer::Start(o, clock, std::move(failing));
  ASSERT_OK(server);
  const std::string target = "127.0.0.1:" + std::to_string((*server)->port());
  auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(10), ""});
  const std::string cli = BinaryPath("ratelimit") + " health --timeout=10s --target=" + target;

  EXPECT_OK(client->Health());
  auto [serving_exit, serving_out] = RunCommand(cli);
  EXPECT_EQ(serving_exit, 0) << serving_out;
  EXPECT_EQ(serving_out, "SERVING\n");

  store->FailWith(absl::UnavailableError("disk gone"));
  ASSERT_TRUE((*server)->health().AwaitState(ServingState::kStoreFailing, absl::Seconds(30)));
  absl::Status failing_status = client->Health();
  EXPECT_EQ(failing_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failing_status.message(), "NOT_SERVING");
  auto [failing_exit, failing_out] = RunCommand(cli);
  EXPECT_EQ(failing_exit, 1) << failing_out;
  EXPECT_NE(failing_out.find("NOT_SERVING"), std::string::npos) << failing_out;

  store->Heal();
  ASSERT_TRUE((*server)->health().AwaitState(ServingState::kServing, absl::Seconds(30)));
  EXPECT_OK(client->Health());

  RefusingPort down;
  auto [down_exit, down_out] =
      RunCommand(BinaryPath("ratelimit") + " health --timeout=10s --target=" + down.target());
  EXPECT_EQ(down_exit, 1) << down_out;
  EXPECT_NE(down_out.find("UNAVAILABLE"), std::string::npos) << down_out;
}

TEST_F(ClientTest, TheCliConsumesWithOmitReceiptsWithoutPrintingAReceipt) {
  const std::string cli = absl::StrCat(
      BinaryPath("ratelimit"), " consume --timeout=10s --target=", target(),
      " --name=inline --key=k --kind=token_bucket --rate=1", " --period=1h --capacity=5");
  auto [with_exit, with_out] = RunCommand(cli);
  EXPECT_EQ(with_exit, 0) << with_out;
  EXPECT_NE(with_out.find("receipt="), std::string::npos) << with_out;
  auto [without_exit, without_out] = RunCommand(cli + " --omit_receipts");
  EXPECT_EQ(without_exit, 0) << without_out;
  EXPECT_EQ(without_out.find("receipt="), std::string::npos) << without_out;
  EXPECT_NE(without_out.find("value=3"), std::string::npos) << without_out;  // took all the same
}

// A flag's value written after it is the flag's, whatever it starts with: `--key -1` is the key
// "-1" (the command had refused a flag "--1" that it does not take).
TEST_F(ClientTest, TheCliTakesAValueAfterItsFlagThatStartsWithADash) {
  auto [exit_code, out] = RunCommand(absl::StrCat(
      BinaryPath("ratelimit"), " consume --timeout=10s --target=", target(),
      " --name inline --key -1 --count 2 --kind=token_bucket --rate=1 --period=1h --capacity=5"));
  EXPECT_EQ(exit_code, 0) << out;
  EXPECT_NE(out.find("value=3"), std::string::npos) << out;
}

TEST(ClientHelpersTest, MakeRequestAndRetryAt) {
  const v1::RateLimitRequest r = MakeRequest("api", "u1", 2.5);
  ASSERT_EQ(r.limits_size(), 1);
  EXPECT_EQ(r.limits(0).name(), "api");
  EXPECT_EQ(r.limits(0).key(), "u1");
  EXPECT_TRUE(r.limits(0).has_count());
  EXPECT_EQ(r.limits(0).count(), 2.5);
  EXPECT_EQ(MakeRequest("api", "u1").limits(0).count(), 1);

  v1::RateLimitResponse response;
  EXPECT_EQ(RetryAt(response), absl::InfinitePast());
  response.mutable_retry_at()->set_seconds(1700000000);
  response.mutable_retry_at()->set_nanos(250000000);
  EXPECT_EQ(RetryAt(response), absl::FromUnixMillis(1700000000250));
}

// ---- The command-line tool's output -------------------------------------------------------

v1::LimitResult* AddResult(v1::RateLimitResponse& r, const char* name, const char* key,
                           bool allowed, double value, double capacity) {
  v1::LimitResult* l = r.add_results();
  l->set_name(name);
  l->set_key(key);
  l->set_allowed(allowed);
  l->set_value(value);
  l->set_capacity(capacity);
  return l;
}

TEST(OutputTest, AllowedListsEveryLimit) {
  v1::RateLimitResponse r;
  r.set_allowed(true);
  r.set_denied_by(-1);
  AddResult(r, "api", "u1", true, 9, 10);
  AddResult(r, "db", "u1", true, 0.5, 4);
  EXPECT_EQ(FormatResponse(r, absl::Now()),
            "ALLOWED\n"
            "  api/u1  allowed  value=9 of 10\n"
            "  db/u1  allowed  value=0.5 of 4\n");
}

TEST(OutputTest, AReservationSaysWhenToRun) {
  v1::RateLimitResponse r;
  r.set_allowed(true);
  r.set_denied_by(-1);
  r.mutable_retry_at()->set_seconds(1795255200);  // 2026-11-21T10:00:00Z
  r.mutable_retry_at()->set_nanos(500000000);
  r.mutable_retry_after()->set_seconds(1);
  r.mutable_retry_after()->set_nanos(500000000);
  AddResult(r, "api", "u1", true, -2, 10);
  EXPECT_EQ(FormatResponse(r, absl::Now()),
            "ALLOWED, run in 1.5s (at 2026-11-21T10:00:00.500Z)\n"
            "  api/u1  allowed  value=-2 of 10\n");
}

TEST(OutputTest, ADenialNamesTheDecidingLimitAndTheRetry) {
  v1::RateLimitResponse r;
  r.set_allowed(false);
  r.set_denied_by(1);
  r.set_reason(v1::INSUFFICIENT_TOKENS);
  r.mutable_retry_at()->set_seconds(1795255201);
  r.mutable_retry_after()->set_seconds(2);
  AddResult(r, "api", "u1", true, 9, 10);
  AddResult(r, "db", "user-1", false, 0.25, 10);
  EXPECT_EQ(FormatResponse(r, absl::Now()),
            "DENIED by db/user-1: INSUFFICIENT_TOKENS, retry in 2s (at 2026-11-21T10:00:01.000Z)\n"
            "  api/u1  allowed  value=9 of 10\n"
            "  db/user-1  denied   value=0.25 of 10\n");

  v1::RateLimitResponse never;
  never.set_allowed(false);
  never.set_denied_by(0);
  never.set_reason(v1::COUNT_EXCEEDS_CAPACITY);
  AddResult(never, "api", "u1", false, 10, 10);
  EXPECT_EQ(FormatResponse(never, absl::Now()),
            "DENIED by api/u1: COUNT_EXCEEDS_CAPACITY, no retry can succeed\n"
            "  api/u1  denied   value=10 of 10\n");

  v1::RateLimitResponse unnamed;  // denied_by out of range: no limit is named
  unnamed.set_allowed(false);
  unnamed.set_denied_by(3);
  unnamed.set_reason(v1::MAX_RESERVED_EXCEEDED);
  EXPECT_EQ(FormatResponse(unnamed, absl::Now()), "DENIED: MAX_RESERVED_EXCEEDED\n");
}

TEST(OutputTest, FailedOpenSaysSoAndShowsNoValues) {
  v1::RateLimitResponse r;
  r.set_allowed(true);
  r.set_failed_open(true);
  r.set_denied_by(-1);
  AddResult(r, "api", "u1", true, 0, 10);
  EXPECT_EQ(FormatResponse(r, absl::Now()),
            "ALLOWED (store failed; the server is configured to fail open)\n"
            "  api/u1  allowed\n");
}

TEST(OutputTest, JsonUsesProtoFieldNamesAndKeepsDefaults) {
  v1::RateLimitResponse r;
  r.set_allowed(true);
  AddResult(r, "api", "u1", true, 0, 10);
  absl::StatusOr<std::string> json = FormatJson(r);
  ASSERT_OK(json);
  EXPECT_NE(json->find("\"denied_by\":0"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"failed_open\":false"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"value\":0"), std::string::npos) << *json;
  EXPECT_EQ(json->find('\n'), std::string::npos) << *json;
}

}  // namespace
}  // namespace ratelimit
