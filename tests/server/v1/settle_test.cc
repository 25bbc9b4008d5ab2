// Receipts, Settle and request_id over real gRPC on port 0, in process, with a fake clock and the
// RocksDB store: settling, every way a receipt is refused (and that nothing changes then), key
// rotation, idempotent retries, bad input, and the C++ client's cancellation.
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/reload_recorder.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::CheckedBalance;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::ReloadRecorder;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

// Two token buckets of 10 per 10 s (one token a second: a take stays visible), "other" for the
// receipts of another name and of a limit later removed.
constexpr char kApiAndOtherPer10sLimits[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 10
    period: 10s
  - name: other
    kind: token_bucket
    rate: 10
    period: 10s
)";

const std::string kKey1(64, 'a');  // hex: 32 bytes
const std::string kKey2(64, 'b');

class SettleServiceTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}) {
    options.limits.reload_interval = absl::Milliseconds(10);
    options.limits.on_config_reload = reloads_.Callback();
    auto started = StartServerAndClient(std::move(options), dir_, kApiAndOtherPer10sLimits, clock_);
    ASSERT_OK(started);
    server_ = std::move(started->server);
    client_ = std::move(started->client);
  }

  double Value(const std::string& name, const std::string& key) {
    return CheckedBalance(*client_, name, key);
  }

  std::string Take(const std::string& name, const std::string& key, double count) {
    auto r = client_->Consume(MakeRequest(name, key, count));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_TRUE(r->allowed());
    EXPECT_FALSE(r->results(0).receipt().empty());
    return r->results(0).receipt();
  }

  absl::StatusOr<v1::SettleResponse> SettleOne(const std::string& receipt, double used) {
    v1::SettleRequest req;
    v1::Settlement* s = req.add_settlements();
    s->set_receipt(receipt);
    s->set_used(used);
    return client_->Settle(req);
  }

  static void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& field) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  }

  TempDir dir_;
  FakeClock clock_;
  ReloadRecorder reloads_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(SettleServiceTest, RefundGivesBackTheUnusedTokens) {
  StartServer();
  const std::string receipt = Take("api", "u1", 6);
  ASSERT_DOUBLE_EQ(Value("api", "u1"), 4);
  auto settled = SettleOne(receipt, 2);
  ASSERT_OK(settled);
  ASSERT_EQ(settled->results_size(), 1);
  EXPECT_EQ(settled->results(0).name(), "api");
  EXPECT_EQ(settled->results(0).key(), "u1");
  EXPECT_DOUBLE_EQ(settled->results(0).returned(), 4);
  EXPECT_DOUBLE_EQ(settled->results(0).value(), 8);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 8);
}

// The receipt carries the balance the take left, so a cancellation after another caller's take
// leaves what the bucket would hold had the take never happened (storage/algebra Settle).
TEST_F(SettleServiceTest, CancelAfterAnotherTakeLeavesWhatTheBucketWithoutItWouldHold) {
  StartServer();
  const std::string a = Take("api", "k", 5);  // 10 -> 5
  clock_.Advance(3 * kSecond);                // refilled to 8 (1/s)
  Take("api", "k", 6);                        // 8 -> 2
  auto settled = SettleOne(a, 0);
  ASSERT_OK(settled);
  EXPECT_DOUBLE_EQ(settled->results(0).returned(), 2);
  EXPECT_DOUBLE_EQ(Value("api", "k"), 4);  // without A: 10 (capped), then 6 taken
}

TEST_F(SettleServiceTest, ChargeReportsWhenTheDebtIsPaid) {
  StartServer();
  auto r = client_->Reserve(MakeRequest("api", "u1", 10));
  ASSERT_OK(r);
  ASSERT_FALSE(r->results(0).receipt().empty());
  auto settled = SettleOne(r->results(0).receipt(), 13);
  ASSERT_OK(settled);
  EXPECT_DOUBLE_EQ(settled->results(0).charged(), 3);
  EXPECT_DOUBLE_EQ(settled->results(0).value(), -3);
  ASSERT_TRUE(settled->results(0).has_paid_at());
  EXPECT_EQ(settled->results(0).paid_after().seconds(), 3);
}

TEST_F(SettleServiceTest, SecondSettleOfAReceiptIsRefusedAndChangesNothing) {
  StartServer();
  const std::string receipt = Take("api", "u1", 6);
  ASSERT_OK(SettleOne(receipt, 0));
  ASSERT_DOUBLE_EQ(Value("api", "u1"), 10);
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 5)));
  auto again = SettleOne(receipt, 0);
  ExpectError(again.status(), absl::StatusCode::kAlreadyExists, "settlements[0].receipt");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 5);
}

TEST_F(SettleServiceTest, ForgedReceiptIsRefused) {
  StartServer();
  Take("api", "u1", 6);
  auto forged = SettleOne(std::string(120, 'x'), 0);
  ExpectError(forged.status(), absl::StatusCode::kInvalidArgument, "settlements[0].receipt");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 4);
}

TEST_F(SettleServiceTest, AlteredReceiptIsRefused) {
  StartServer();
  std::string receipt = Take("api", "u1", 6);
  // Every single-byte change is caught (count, time, id, name, key, signature...).
  for (size_t i = 0; i < receipt.size(); ++i) {
    std::string altered = receipt;
    altered[i] = static_cast<char>(altered[i] ^ 0x01);
    auto s = SettleOne(altered, 0);
    ExpectError(s.status(), absl::StatusCode::kInvalidArgument, "settlements[0].receipt");
  }
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 4);
  ASSERT_OK(SettleOne(receipt, 0));  // the original still settles
}

TEST_F(SettleServiceTest, ReceiptOfOneNameAndKeyCannotSettleAnother) {
  StartServer();
  Take("api", "u2", 6);
  Take("other", "u1", 6);
  const std::string receipt = Take("api", "u1", 6);
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"u1", "u2"}, {"api", "oth"}}) {
    std::string moved = receipt;
    const size_t at = moved.find(from);
    ASSERT_NE(at, std::string::npos);
    moved.replace(at, from.size(), to);
    auto s = SettleOne(moved, 0);
    ExpectError(s.status(), absl::StatusCode::kInvalidArgument, "settlements[0].receipt");
  }
  EXPECT_DOUBLE_EQ(Value("api", "u2"), 4);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 4);
}

TEST_F(SettleServiceTest, ExpiredReceiptIsRefused) {
  ServerOptions o;
  o.receipts.ttl = absl::Minutes(5);
  StartServer(o);
  const std::string receipt = Take("api", "u1", 6);
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 4)));
  clock_.Advance(5 * 60 * kSecond);
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 10)));
  auto s = SettleOne(receipt, 0);
  ExpectError(s.status(), absl::StatusCode::kFailedPrecondition, "settlements[0].receipt");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 0);
}

TEST_F(SettleServiceTest, ReceiptOfARemovedKeyIsRefusedAndRotationKeepsThePreviousKey) {
  WriteFileAtomically(dir_.File("keys"), kKey1 + "\n");
  ServerOptions o;
  o.receipts.key_file = dir_.File("keys");
  StartServer(o);
  const std::string first = Take("api", "u1", 2);
  const std::string second = Take("api", "u1", 2);

  // Rotate: key 2 signs, key 1 still verifies.
  WriteFileAtomically(dir_.File("keys"), kKey2 + "\n" + kKey1 + "\n");
  ASSERT_TRUE(reloads_.WaitFor("receipt_keys", true, 1));
  const std::string third = Take("api", "u1", 2);
  EXPECT_NE(third.substr(1, 8), first.substr(1, 8));  // another key id
  auto s = SettleOne(first, 0);
  ASSERT_OK(s);
  EXPECT_DOUBLE_EQ(s->results(0).returned(), 2);

  // Drop key 1: its receipts are refused, key 2's still settle.
  WriteFileAtomically(dir_.File("keys"), kKey2 + "\n");
  ASSERT_TRUE(reloads_.WaitFor("receipt_keys", true, 2));
  auto refused = SettleOne(second, 0);
  ExpectError(refused.status(), absl::StatusCode::kInvalidArgument, "unknown key");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 6);
  ASSERT_OK(SettleOne(third, 0));
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 8);
}

TEST_F(SettleServiceTest, GeneratedKeySurvivesRestart) {
  StartServer();
  const std::string receipt = Take("api", "u1", 6);
  server_->Shutdown();
  server_.reset();
  StartServer();
  ASSERT_OK(SettleOne(receipt, 0));
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 10);
}

TEST_F(SettleServiceTest, SettleIsAllOrNothing) {
  StartServer();
  const std::string a = Take("api", "u1", 6);
  const std::string b = Take("api", "u2", 6);
  v1::SettleRequest req;
  req.add_settlements()->set_receipt(a);
  req.add_settlements()->set_receipt(b);
  req.add_settlements()->set_receipt(a);  // named twice
  auto dup = client_->Settle(req);
  ExpectError(dup.status(), absl::StatusCode::kInvalidArgument, "settlements[2].receipt");
  req.mutable_settlements(2)->set_receipt("forged");
  auto forged = client_->Settle(req);
  ExpectError(forged.status(), absl::StatusCode::kInvalidArgument, "settlements[2].receipt");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 4);
  EXPECT_DOUBLE_EQ(Value("api", "u2"), 4);
  req.mutable_settlements()->RemoveLast();
  auto ok = client_->Settle(req);
  ASSERT_OK(ok);
  EXPECT_EQ(ok->results_size(), 2);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 10);
  EXPECT_DOUBLE_EQ(Value("api", "u2"), 10);
}

TEST_F(SettleServiceTest, BadInputIsRefusedNamingTheFieldAndChangesNothing) {
  StartServer();
  const std::string receipt = Take("api", "u1", 6);
  ExpectError(client_->Settle(v1::SettleRequest()).status(), absl::StatusCode::kInvalidArgument,
              "settlements");
  for (double used : {-1.0, std::nan(""), 2e15, std::numeric_limits<double>::infinity()}) {
    ExpectError(SettleOne(receipt, used).status(), absl::StatusCode::kInvalidArgument,
                "settlements[0].used");
  }
  ExpectError(SettleOne("", 0).status(), absl::StatusCode::kInvalidArgument,
              "settlements[0].receipt");
  v1::SettleRequest many;
  for (int i = 0; i < 17; ++i) many.add_settlements()->set_receipt(receipt);
  ExpectError(client_->Settle(many).status(), absl::StatusCode::kInvalidArgument, "settlements");
  v1::RateLimitRequest long_id = MakeRequest("api", "u1", 1);
  long_id.set_request_id(std::string(129, 'r'));
  ExpectError(client_->Consume(long_id).status(), absl::StatusCode::kInvalidArgument, "request_id");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 4);
  ASSERT_OK(SettleOne(receipt, 6));  // still unspent
}

TEST_F(SettleServiceTest, InlineLimitSettlesWithTheConfigOfItsReceipt) {
  StartServer();
  v1::RateLimitRequest req = MakeRequest("inline-llm", "t1", 70);
  v1::LimitConfig* c = req.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(100);
  c->mutable_period()->set_seconds(60);
  auto r = client_->Consume(req);
  ASSERT_OK(r);
  auto s = SettleOne(r->results(0).receipt(), 20);
  ASSERT_OK(s);
  EXPECT_DOUBLE_EQ(s->results(0).returned(), 50);
  EXPECT_DOUBLE_EQ(s->results(0).value(), 80);
}

TEST_F(SettleServiceTest, ReceiptOfALimitNoLongerDefinedIsRefused) {
  StartServer();
  const std::string receipt = Take("other", "u1", 6);
  WriteFileAtomically(dir_.File("limits.yaml"), R"(limits:
  - name: api
    kind: token_bucket
    rate: 10
    period: 10s
)");
  ASSERT_TRUE(reloads_.WaitFor("limits", true, 1));
  auto s = SettleOne(receipt, 0);
  ExpectError(s.status(), absl::StatusCode::kFailedPrecondition, "no longer defined");
}

TEST_F(SettleServiceTest, RetriedRequestIdGetsTheFirstAnswer) {
  StartServer();
  v1::RateLimitRequest req = MakeRequest("api", "u1", 3);
  req.set_request_id("order-42");
  auto first = client_->Consume(req);
  ASSERT_OK(first);
  EXPECT_FALSE(first->replayed());
  auto retry = client_->Consume(req);
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->replayed());
  EXPECT_DOUBLE_EQ(retry->results(0).value(), 7);
  EXPECT_EQ(retry->results(0).receipt(), first->results(0).receipt());
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 7);
  // The replayed receipt is the one receipt of the take: it settles once.
  ASSERT_OK(SettleOne(retry->results(0).receipt(), 0));
  ExpectError(SettleOne(first->results(0).receipt(), 0).status(), absl::StatusCode::kAlreadyExists,
              "settlements[0].receipt");

  // The same id with another request, or another method, is refused.
  v1::RateLimitRequest other = MakeRequest("api", "u1", 4);
  other.set_request_id("order-42");
  ExpectError(client_->Consume(other).status(), absl::StatusCode::kInvalidArgument, "request_id");
  ExpectError(client_->Reserve(req).status(), absl::StatusCode::kInvalidArgument, "request_id");
  // Check ignores it.
  auto check = client_->Check(req);
  ASSERT_OK(check);
  EXPECT_FALSE(check->replayed());
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 10);

  // Once the id's time is over, it decides again.
  clock_.Advance(10 * 60 * kSecond);
  auto later = client_->Consume(req);
  ASSERT_OK(later);
  EXPECT_FALSE(later->replayed());
}

TEST_F(SettleServiceTest, OmittedReceiptsLeaveTheDecisionAsItWouldBe) {
  StartServer();
  v1::RateLimitRequest consume = MakeRequest("api", "u1", 3);
  consume.set_omit_receipts(true);
  auto taken = client_->Consume(consume);
  ASSERT_OK(taken);
  ASSERT_TRUE(taken->allowed());
  EXPECT_TRUE(taken->results(0).receipt().empty());
  EXPECT_DOUBLE_EQ(taken->results(0).value(), 7);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 7);

  v1::RateLimitRequest reserve = MakeRequest("api", "u1", 9);
  reserve.set_omit_receipts(true);
  auto reserved = client_->Reserve(reserve);
  ASSERT_OK(reserved);
  ASSERT_TRUE(reserved->allowed());
  EXPECT_TRUE(reserved->results(0).receipt().empty());
  EXPECT_DOUBLE_EQ(Value("api", "u1"), -2);

  // The same request without the option carries its receipt, which settles as usual.
  clock_.Advance(12 * kSecond);  // 1/s: back to 10
  const std::string receipt = Take("api", "u1", 3);
  ASSERT_OK(SettleOne(receipt, 1));
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 9);
}

TEST_F(SettleServiceTest, ARetryIsAnsweredAsTheFirstRequestWhetherItOmittedReceiptsOrNot) {
  StartServer();
  v1::RateLimitRequest req = MakeRequest("api", "u1", 3);
  req.set_request_id("order-43");
  req.set_omit_receipts(true);
  auto first = client_->Consume(req);
  ASSERT_OK(first);
  EXPECT_TRUE(first->results(0).receipt().empty());
  req.set_omit_receipts(false);
  auto retry = client_->Consume(req);
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->replayed());
  EXPECT_TRUE(retry->results(0).receipt().empty());
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 7);
}

TEST_F(SettleServiceTest, MetricsCountSettlementsAndReplays) {
  StartServer();
  const std::string receipt = Take("api", "u1", 6);
  ASSERT_OK(SettleOne(receipt, 1));
  ASSERT_FALSE(SettleOne(receipt, 1).ok());
  v1::RateLimitRequest req = MakeRequest("api", "u2", 1);
  req.set_request_id("r");
  ASSERT_OK(client_->Consume(req));
  ASSERT_OK(client_->Consume(req));
  const auto [code, body] = testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(code, 200);
  EXPECT_NE(body.find("ratelimit_settlements_total{outcome=\"returned\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("ratelimit_settlements_total{outcome=\"rejected\"} 1"), std::string::npos);
  EXPECT_NE(body.find("ratelimit_idempotent_replays_total{method=\"Consume\"} 1"),
            std::string::npos);
}

TEST_F(SettleServiceTest, ReserveAndWaitCancelsWhenTheCallerWouldGiveUp) {
  StartServer();
  ASSERT_OK(client_->Reserve(MakeRequest("api", "u1", 10)));
  const absl::Time now = absl::FromUnixMicros(clock_.NowMicros());
  bool slept = false;
  auto r = client_->ReserveAndWait(
      MakeRequest("api", "u1", 5), [&](absl::Time) { slept = true; }, now + absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_FALSE(slept);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 0);  // the 5 owed were given back
  // Within the caller's patience it waits as before.
  auto ok = client_->ReserveAndWait(
      MakeRequest("api", "u1", 5), [&](absl::Time) { slept = true; }, now + absl::Seconds(10));
  ASSERT_OK(ok);
  EXPECT_TRUE(slept);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), -5);
}

}  // namespace
}  // namespace ratelimit
