// Idempotent retries and receipts across a kill -9 and restart of the real ratelimit-server
// binary (child process on port 0, own data directory).
#include <signal.h>

#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kLedgerOf1000Limits;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

class SettleProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteFileAtomically(dir_.File("limits.yaml"), kLedgerOf1000Limits); }
  std::unique_ptr<ServerProcess> Start() {
    auto p = ServerProcess::Start(
        {"--data_dir=" + dir_.File("data"), "--limits_file=" + dir_.File("limits.yaml")},
        dir_.path());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  static std::unique_ptr<RateLimitClient> Client(const ServerProcess& server) {
    return RateLimitClient::Connect(server.target(), ClientOptions{absl::Seconds(10), ""});
  }
  static double Value(RateLimitClient& client) {
    auto r = client.Check(MakeRequest("ledger", "acct"));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->results(0).value() : -1;
  }
  TempDir dir_;
};

TEST_F(SettleProcessTest, RetryAfterKillNineReturnsTheFirstAnswerAndConsumesNothingMore) {
  v1::RateLimitRequest req = MakeRequest("ledger", "acct", 7);
  req.set_request_id("payment-1234");
  v1::RateLimitResponse first;
  {
    auto server = Start();
    ASSERT_NE(server, nullptr);
    auto client = Client(*server);
    auto r = client->Consume(req);
    ASSERT_OK(r);
    ASSERT_TRUE(r->allowed());
    ASSERT_FALSE(r->replayed());
    first = *r;
    ASSERT_NEAR(Value(*client), 993, 0.01);
    const int status = server->StopWith(SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(status));
  }
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto client = Client(*server);
  auto retry = client->Consume(req);
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->replayed());
  EXPECT_EQ(retry->allowed(), first.allowed());
  ASSERT_EQ(retry->results_size(), 1);
  EXPECT_DOUBLE_EQ(retry->results(0).value(), first.results(0).value());
  EXPECT_EQ(retry->results(0).receipt(), first.results(0).receipt());
  EXPECT_NEAR(Value(*client), 993, 0.01);  // nothing more consumed

  // The receipt, signed before the crash with the key kept in the data directory, still
  // settles once.
  v1::SettleRequest settle;
  v1::Settlement* s = settle.add_settlements();
  s->set_receipt(first.results(0).receipt());
  s->set_used(2);
  auto settled = client->Settle(settle);
  ASSERT_OK(settled);
  EXPECT_NEAR(settled->results(0).returned(), 5, 1e-6);
  EXPECT_NEAR(Value(*client), 998, 0.01);
  EXPECT_EQ(client->Settle(settle).status().code(), absl::StatusCode::kAlreadyExists);
  server->StopWith(SIGTERM);
}

TEST_F(SettleProcessTest, InvalidReceiptKeyFileFailsStartUp) {
  WriteFileAtomically(dir_.File("keys"), "too-short\n");
  auto p = ServerProcess::Start(
      {"--data_dir=" + dir_.File("data"), "--limits_file=" + dir_.File("limits.yaml"),
       "--receipt_key_file=" + dir_.File("keys")},
      dir_.path());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("receipt key file line 1"), std::string::npos) << p.status();
  auto missing = ServerProcess::Start(
      {"--data_dir=" + dir_.File("data"), "--receipt_key_file=" + dir_.File("nope")}, dir_.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos) << missing.status();
}

std::pair<int, std::string> RunCli(const std::string& args) {
  return ::ratelimit::testing::RunCommand(::ratelimit::testing::BinaryPath("ratelimit") + " " +
                                          args);
}

TEST_F(SettleProcessTest, CliPrintsReceiptsSettlesThemAndRetriesByRequestId) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const std::string t = "--target=" + server->target();
  auto [code, out] =
      RunCli("reserve " + t + " --name=ledger --key=cli --count=10 --request_id=job-1");
  ASSERT_EQ(code, 0) << out;
  const size_t at = out.find("receipt=");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string receipt = out.substr(at + 8, out.find('\n', at) - at - 8);

  std::tie(code, out) =
      RunCli("reserve " + t + " --name=ledger --key=cli --count=10 --request_id=job-1");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("replayed"), std::string::npos) << out;
  EXPECT_NE(out.find("receipt=" + receipt), std::string::npos) << out;

  std::tie(code, out) = RunCli("settle " + t + " --receipt=" + receipt + " --used=4");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ledger/cli  returned=6 charged=0 uncharged=0 value=996"), std::string::npos)
      << out;
  std::tie(code, out) = RunCli("settle " + t + " --receipt=" + receipt + " --used=4 --json");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("ALREADY_EXISTS"), std::string::npos) << out;

  std::tie(code, out) = RunCli("consume " + t + " --name=ledger --key=cli --json");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"receipt\":\""), std::string::npos) << out;
  std::tie(code, out) = RunCli("settle " + t + " --receipt=" + receipt);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--used"), std::string::npos) << out;
  server->StopWith(SIGTERM);
}

}  // namespace
}  // namespace ratelimit
