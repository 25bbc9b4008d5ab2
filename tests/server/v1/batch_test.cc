// The Batch RPC over real gRPC on port 0: entries decided in order and each on its own, per-entry
// errors and whole-call errors, equality with the same calls one by one, durability on RocksDB
// (reopen and kill -9), the failure policy per entry, and its metrics.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/cpp/client.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/selective_store.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::ratelimit::testing::CheckedBalance;
using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::HttpGet;
using ::ratelimit::testing::kLimits;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::SelectiveFailingStore;
using ::ratelimit::testing::ServerAndClient;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

constexpr int kInvalidArgument = 3;
constexpr int kNotFound = 5;
constexpr int kUnavailable = 14;

v1::BatchRequest Batch(
    std::initializer_list<std::pair<v1::BatchEntry::Method, v1::RateLimitRequest>> entries) {
  v1::BatchRequest batch;
  for (const auto& [method, request] : entries) AddBatchEntry(&batch, method, request);
  return batch;
}

class BatchTest : public ::testing::Test {
 protected:
  // The server processes started here read the same limits file.
  void SetUp() override { WriteFileAtomically(dir_.File("limits.yaml"), kLimits); }

  // One in-process server on its own data directory (RocksDB unless a store is given).
  ServerAndClient StartInstance(const std::string& data, ServerOptions options = {},
                                std::unique_ptr<StateStore> store = nullptr) {
    auto started = StartServerAndClient(std::move(options), dir_, kLimits, clock_, std::move(store),
                                        ClientOptions{absl::Seconds(20), ""}, data);
    EXPECT_TRUE(started.ok()) << started.status();
    return started.ok() ? *std::move(started) : ServerAndClient{};
  }
  void StartServer(ServerOptions options = {}, std::unique_ptr<StateStore> store = nullptr) {
    ServerAndClient i = StartInstance("data", std::move(options), std::move(store));
    ASSERT_NE(i.server, nullptr);
    server_ = std::move(i.server);
    client_ = std::move(i.client);
  }

  // The current balance of `name`/`key` as Check reports it.
  double Value(const std::string& name, const std::string& key) {
    return ValueOn(*client_, name, key);
  }
  static double ValueOn(RateLimitClient& client, const std::string& name, const std::string& key) {
    return CheckedBalance(client, name, key, -1e300);
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(BatchTest, EntriesAreDecidedInOrderAndEachSeesTheEarlierOnes) {
  StartServer();
  v1::BatchRequest batch;
  for (int i = 0; i < 12; ++i)
    AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("api", "u1"));
  AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("api", "u2", 3));
  auto r = client_->Batch(batch);
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 13);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(r->results(i).has_response()) << i;
    const v1::RateLimitResponse& resp = r->results(i).response();
    EXPECT_TRUE(resp.allowed()) << i;
    EXPECT_DOUBLE_EQ(resp.results(0).value(), 9 - i) << i;
  }
  for (int i = 10; i < 12; ++i) {
    const v1::RateLimitResponse& resp = r->results(i).response();
    EXPECT_FALSE(resp.allowed()) << i;
    EXPECT_EQ(resp.reason(), v1::INSUFFICIENT_TOKENS);
    EXPECT_EQ(resp.denied_by(), 0);
    EXPECT_EQ(resp.retry_after().nanos(), 100000000);  // one token at 10/s
  }
  EXPECT_TRUE(r->results(12).response().allowed());
  EXPECT_DOUBLE_EQ(r->results(12).response().results(0).value(), 7);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 0);
  EXPECT_DOUBLE_EQ(Value("api", "u2"), 7);
}

TEST_F(BatchTest, AnOverLimitEntryIsDeniedAndTheNextOneAllowed) {
  StartServer();
  v1::RateLimitRequest both = MakeRequest("api", "u1", 2);
  *both.add_limits() = MakeRequest("daily", "u1", 4).limits(0);  // daily holds 3: never
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 11)},
                                 {v1::BatchEntry::CONSUME, both},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 10)}}));
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 3);
  EXPECT_FALSE(r->results(0).response().allowed());
  EXPECT_EQ(r->results(0).response().reason(), v1::COUNT_EXCEEDS_CAPACITY);
  EXPECT_FALSE(r->results(1).response().allowed());  // all-or-nothing: api untouched
  EXPECT_EQ(r->results(1).response().denied_by(), 1);
  EXPECT_DOUBLE_EQ(r->results(1).response().results(0).value(), 10);
  ASSERT_TRUE(r->results(2).response().allowed());
  EXPECT_DOUBLE_EQ(r->results(2).response().results(0).value(), 0);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 0);
  EXPECT_DOUBLE_EQ(Value("daily", "u1"), 3);
}

TEST_F(BatchTest, EachMethodAnswersAsItsRpcWithReceipts) {
  StartServer();
  v1::RateLimitRequest reserve = MakeRequest("llm", "org", 5);
  v1::LimitConfig* c = reserve.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(1);
  c->mutable_period()->set_seconds(1);
  c->set_capacity(3);
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 4)},
                                 {v1::BatchEntry::CHECK, MakeRequest("api", "u1", 7)},
                                 {v1::BatchEntry::RESERVE, reserve},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 7)}}));
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 4);
  const v1::RateLimitResponse& consumed = r->results(0).response();
  ASSERT_TRUE(consumed.allowed());
  EXPECT_FALSE(consumed.results(0).receipt().empty());
  const v1::RateLimitResponse& checked = r->results(1).response();
  EXPECT_FALSE(checked.allowed());  // 7 of 6
  EXPECT_DOUBLE_EQ(checked.results(0).value(), 6);
  EXPECT_TRUE(checked.results(0).receipt().empty());
  const v1::RateLimitResponse& reserved = r->results(2).response();
  ASSERT_TRUE(reserved.allowed());
  EXPECT_DOUBLE_EQ(reserved.results(0).value(), -2);
  EXPECT_EQ(reserved.retry_after().seconds(), 2);
  EXPECT_FALSE(reserved.results(0).receipt().empty());
  const v1::RateLimitResponse& denied = r->results(3).response();
  EXPECT_FALSE(denied.allowed());
  EXPECT_TRUE(denied.results(0).receipt().empty());

  // The receipts settle like those of Consume and Reserve.
  auto settled = client_->SettleAll(consumed, 1);
  ASSERT_OK(settled);
  EXPECT_DOUBLE_EQ(settled->results(0).returned(), 3);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 9);
  ASSERT_OK(client_->SettleAll(reserved, 0));  // cancels the reservation
  v1::RateLimitRequest check = reserve;
  check.mutable_limits(0)->set_count(1);
  auto after = client_->Check(check);
  ASSERT_OK(after);
  EXPECT_DOUBLE_EQ(after->results(0).value(), 3);
}

TEST_F(BatchTest, EntriesThatOmitReceiptsGetNoneAndTheOthersTheirs) {
  StartServer();
  v1::RateLimitRequest quiet = MakeRequest("api", "u1", 2);
  quiet.set_omit_receipts(true);
  v1::RateLimitRequest quiet_reserve = MakeRequest("api", "u2", 12);
  quiet_reserve.set_omit_receipts(true);
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, quiet},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 3)},
                                 {v1::BatchEntry::RESERVE, quiet_reserve},
                                 {v1::BatchEntry::CONSUME, quiet}}));
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r->results(i).response().allowed()) << i;
  EXPECT_TRUE(r->results(0).response().results(0).receipt().empty());
  EXPECT_FALSE(r->results(1).response().results(0).receipt().empty());
  EXPECT_TRUE(r->results(2).response().results(0).receipt().empty());
  EXPECT_TRUE(r->results(3).response().results(0).receipt().empty());
  // Each entry took what it asked, receipt or not.
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 3);
  EXPECT_DOUBLE_EQ(Value("api", "u2"), -2);
  auto settled = client_->SettleAll(r->results(1).response(), 0);
  ASSERT_OK(settled);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 6);
}

TEST_F(BatchTest, AnInvalidEntryGetsItsOwnErrorAndChangesNothing) {
  StartServer();
  v1::RateLimitRequest bad_count = MakeRequest("api", "u9", 1);
  *bad_count.add_limits() = MakeRequest("api", "u1", -1).limits(0);
  v1::RateLimitRequest with_id = MakeRequest("api", "u9");
  with_id.set_request_id("retry-1");
  v1::BatchRequest batch = Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 2)},
                                  {v1::BatchEntry::CONSUME, bad_count},
                                  {v1::BatchEntry::CONSUME, MakeRequest("nope", "u9")},
                                  {v1::BatchEntry::RESERVE, with_id},
                                  {v1::BatchEntry::CONSUME, v1::RateLimitRequest()},
                                  {v1::BatchEntry::CONSUME, MakeRequest("api", "u9")},
                                  {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 3)}});
  batch.mutable_entries(5)->set_method(static_cast<v1::BatchEntry::Method>(9));
  auto r = client_->Batch(batch);
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 7);
  auto expect_error = [&](int i, int code, const std::string& prefix) {
    ASSERT_TRUE(r->results(i).has_error()) << i;
    EXPECT_EQ(r->results(i).error().code(), code) << i;
    EXPECT_TRUE(absl::StartsWith(r->results(i).error().message(), prefix))
        << i << ": " << r->results(i).error().message();
  };
  expect_error(1, kInvalidArgument, "entries[1].limits[1].count: ");
  expect_error(2, kNotFound, "entries[2].limits[0].name: ");
  expect_error(3, kInvalidArgument, "entries[3].request_id: ");
  expect_error(4, kInvalidArgument, "entries[4].limits: ");
  expect_error(5, kInvalidArgument, "entries[5].method: ");
  // The others were decided, in order, around them.
  ASSERT_TRUE(r->results(0).response().allowed());
  EXPECT_DOUBLE_EQ(r->results(0).response().results(0).value(), 8);
  ASSERT_TRUE(r->results(6).response().allowed());
  EXPECT_DOUBLE_EQ(r->results(6).response().results(0).value(), 5);
  EXPECT_DOUBLE_EQ(Value("api", "u9"), 10);  // no invalid entry took anything
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 5);
}

TEST_F(BatchTest, EmptyOrOversizedBatchIsRefusedAsAWhole) {
  StartServer();
  auto empty = client_->Batch(v1::BatchRequest());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(empty.status().message(), "entries: ")) << empty.status();

  v1::BatchRequest too_many;
  for (int i = 0; i < 1001; ++i) {
    AddBatchEntry(&too_many, v1::BatchEntry::CONSUME, MakeRequest("api", "u1"));
  }
  auto many = client_->Batch(too_many);
  EXPECT_EQ(many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(many.status().message(), "entries: at most 1000 entries per batch, got 1001");

  // 257 entries of 16 limits: 4112 limits, over the 4096 of a batch (small limits, so that the
  // message stays under the 64 KiB of a request).
  v1::RateLimitRequest sixteen;
  for (int j = 0; j < 16; ++j) {
    v1::LimitRequest* l = sixteen.add_limits();
    l->set_name("api");
    l->set_key("u1");
  }
  v1::BatchRequest too_wide;
  for (int i = 0; i < 257; ++i) AddBatchEntry(&too_wide, v1::BatchEntry::CONSUME, sixteen);
  auto wide = client_->Batch(too_wide);
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wide.status().message(), "entries: at most 4096 limits over all entries, got 4112");
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 10);  // nothing was decided

  // At the bounds, the batch is decided.
  too_many.mutable_entries()->RemoveLast();
  auto thousand = client_->Batch(too_many);
  ASSERT_OK(thousand);
  EXPECT_EQ(thousand->results_size(), 1000);
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 0);
}

TEST_F(BatchTest, NotAValidBatchRequestIsInvalidArgument) {
  StartServer();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  const std::string garbage = "\xff\xff\xff";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/ratelimit.v1.RateLimitService/Batch", grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "not a valid ratelimit.v1.BatchRequest"))
      << status.error_message();
}

// Random batches against one server, the same requests as single calls against another: every
// answer is the same (receipts aside, which carry random ids), and so are the final balances.
TEST_F(BatchTest, BatchEqualsTheSameCallsOneByOne) {
  ServerAndClient batched = StartInstance("batched");
  ServerAndClient single = StartInstance("single");
  ASSERT_NE(batched.server, nullptr);
  ASSERT_NE(single.server, nullptr);
  std::mt19937 rng(20261123);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::vector<std::string> names = {"api", "daily", "api", "undefined"};
  const std::vector<std::string> keys = {"a", "b", "c"};
  const std::vector<v1::BatchEntry::Method> methods = {
      v1::BatchEntry::CONSUME, v1::BatchEntry::CONSUME, v1::BatchEntry::CHECK,
      v1::BatchEntry::RESERVE};
  int compared = 0;
  for (int round = 0; round < 40; ++round) {
    v1::BatchRequest batch;
    const int n = 1 + pick(25);
    for (int i = 0; i < n; ++i) {
      v1::RateLimitRequest req;
      const int limits = 1 + pick(3);
      for (int j = 0; j < limits; ++j) {
        v1::LimitRequest* l = req.add_limits();
        l->set_name(pick(20) == 0 ? names[3] : names[pick(3)]);
        l->set_key(keys[pick(3)]);
        // Mostly small counts; now and then an invalid one.
        l->set_count(pick(30) == 0 ? -1.0 : 1 + pick(4));
      }
      AddBatchEntry(&batch, methods[pick(4)], req);
    }
    auto got = batched.client->Batch(batch);
    ASSERT_OK(got);
    ASSERT_EQ(got->results_size(), n);
    for (int i = 0; i < n; ++i) {
      const v1::BatchEntry& e = batch.entries(i);
      absl::StatusOr<v1::RateLimitResponse> want =
          e.method() == v1::BatchEntry::CONSUME ? single.client->Consume(e.request())
          : e.method() == v1::BatchEntry::CHECK ? single.client->Check(e.request())
                                                : single.client->Reserve(e.request());
      const v1::BatchResult& result = got->results(i);
      if (!want.ok()) {
        ASSERT_TRUE(result.has_error()) << round << "/" << i;
        EXPECT_EQ(result.error().code(), static_cast<int>(want.status().code()));
        EXPECT_EQ(result.error().message(),
                  absl::StrCat("entries[", i, "].", want.status().message()));
        continue;
      }
      ASSERT_TRUE(result.has_response()) << round << "/" << i << ": " << result.error().message();
      v1::RateLimitResponse a = result.response();
      v1::RateLimitResponse b = *want;
      EXPECT_EQ(a.results_size() > 0 && !a.results(0).receipt().empty(),
                b.results_size() > 0 && !b.results(0).receipt().empty());
      for (auto* resp : {&a, &b}) {
        for (v1::LimitResult& l : *resp->mutable_results()) l.clear_receipt();
      }
      EXPECT_TRUE(MessageDifferencer::Equals(a, b))
          << round << "/" << i << "\nbatch:  " << a.ShortDebugString()
          << "\nsingle: " << b.ShortDebugString();
      ++compared;
    }
    clock_.Advance(pick(300) * kSecond / 1000);  // 0..0.3 s between batches
  }
  EXPECT_GT(compared, 300);
  for (const char* name : {"api", "daily"}) {
    for (const std::string& key : keys) {
      EXPECT_DOUBLE_EQ(ValueOn(*batched.client, name, key), ValueOn(*single.client, name, key))
          << name << "/" << key;
    }
  }
}

TEST_F(BatchTest, AcknowledgedBatchSurvivesReopeningTheStore) {
  StartServer();
  v1::BatchRequest batch;
  for (int i = 0; i < 50; ++i) {
    AddBatchEntry(&batch, v1::BatchEntry::CONSUME,
                  MakeRequest("ledger", absl::StrCat("k", i % 7), 1 + i % 3));
  }
  auto r = client_->Batch(batch);
  ASSERT_OK(r);
  std::map<std::string, double> taken;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(r->results(i).response().allowed());
    taken[batch.entries(i).request().limits(0).key()] +=
        batch.entries(i).request().limits(0).count();
  }
  client_.reset();
  server_.reset();
  StartServer();
  for (const auto& [key, count] : taken)
    EXPECT_DOUBLE_EQ(Value("ledger", key), 1000000 - count) << key;
}

TEST_F(BatchTest, KillNineLosesNoAcknowledgedBatchEntry) {
  WriteFileAtomically(dir_.File("token"), "t0ken-for-tests\n");
  const std::vector<std::string> args = {"--data_dir=" + dir_.File("proc"),
                                         "--limits_file=" + dir_.File("limits.yaml"),
                                         "--admin_token_file=" + dir_.File("token")};
  auto server = ServerProcess::Start(args, dir_.path());
  ASSERT_OK(server);
  const std::string target = (*server)->target();
  std::atomic<int64_t> acked{0}, attempted{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(10), ""});
      v1::BatchRequest batch;
      for (int i = 0; i < 20; ++i) {
        AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("ledger", "acct"));
      }
      while (!stop.load()) {
        attempted += 20;
        auto r = client->Batch(batch);
        if (!r.ok()) return;  // the server is gone
        for (const v1::BatchResult& result : r->results()) {
          if (result.has_response() && result.response().allowed()) ++acked;
        }
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return acked.load() >= 3000; }));
  ::kill((*server)->pid(), SIGKILL);  // mid-load, no warning
  stop = true;
  for (auto& t : clients) t.join();
  (*server)->StopWith(SIGKILL);  // reap
  const int64_t acknowledged = acked.load();

  auto restarted = ServerProcess::Start(args, dir_.path());
  ASSERT_OK(restarted);
  auto client =
      RateLimitClient::Connect((*restarted)->target(), ClientOptions{absl::Seconds(10), ""});
  const double consumed = 1000000 - ValueOn(*client, "ledger", "acct");
  // Refill over the test is a few seconds at 1 token/day: well under one token.
  EXPECT_GE(consumed + 0.01, static_cast<double>(acknowledged)) << "an acknowledged entry was lost";
  EXPECT_LE(consumed, static_cast<double>(attempted.load()) + 0.01);
}

TEST_F(BatchTest, StoreFailureFollowsThePolicyForEachEntryOnItsOwn) {
  // A store that fails the transactions of key "broken" only: those entries fail (closed), the
  // others are decided.
  StartServer(
      {}, std::make_unique<SelectiveFailingStore>(std::make_unique<MemoryStateStore>(), "broken"));
  v1::RateLimitRequest broken = MakeRequest("api", "u1", 1);
  *broken.add_limits() = MakeRequest("api", "broken").limits(0);
  v1::RateLimitRequest bad = MakeRequest("api", "u1", 0);
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 2)},
                                 {v1::BatchEntry::CONSUME, broken},
                                 {v1::BatchEntry::CONSUME, bad},
                                 {v1::BatchEntry::RESERVE, MakeRequest("api", "u1", 3)}}));
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 4);
  EXPECT_TRUE(r->results(0).response().allowed());
  ASSERT_TRUE(r->results(1).has_error());
  EXPECT_EQ(r->results(1).error().code(), kUnavailable);
  EXPECT_EQ(r->results(1).error().message(), "rate-limit store unavailable: disk on fire");
  ASSERT_TRUE(r->results(2).has_error());
  EXPECT_EQ(r->results(2).error().code(), kInvalidArgument);
  ASSERT_TRUE(r->results(3).response().allowed());
  EXPECT_DOUBLE_EQ(r->results(3).response().results(0).value(),
                   5);  // the failed entry took nothing
}

TEST_F(BatchTest, OneStoreBatchPerCallAndNoneWhenEveryEntryIsInvalid) {
  auto store =
      std::make_unique<SelectiveFailingStore>(std::make_unique<MemoryStateStore>(), "broken");
  SelectiveFailingStore* counting = store.get();
  StartServer({}, std::move(store));
  v1::BatchRequest batch;
  for (int i = 0; i < 30; ++i) {
    AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("api", absl::StrCat("k", i % 4)));
  }
  AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("api", "k", -1));  // invalid
  auto r = client_->Batch(batch);
  ASSERT_OK(r);
  EXPECT_EQ(counting->batches(), 1);
  EXPECT_EQ(counting->operations(), 30);  // the invalid entry never reaches the store

  auto invalid = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "k", -1)},
                                       {v1::BatchEntry::CHECK, MakeRequest("nope", "k")}}));
  ASSERT_OK(invalid);
  ASSERT_EQ(invalid->results_size(), 2);
  EXPECT_EQ(invalid->results(0).error().code(), kInvalidArgument);
  EXPECT_EQ(invalid->results(1).error().code(), kNotFound);
  EXPECT_EQ(counting->batches(), 1);
}

TEST_F(BatchTest, FailedStoreClosedAnswersUnavailablePerEntry) {
  auto store = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* failing = store.get();
  StartServer({}, std::move(store));
  failing->FailWith(absl::UnavailableError("disk full"));
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1")},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", -2)},
                                 {v1::BatchEntry::CHECK, MakeRequest("api", "u2")}}));
  ASSERT_OK(r);  // the call itself succeeds; its entries carry the errors
  ASSERT_EQ(r->results_size(), 3);
  for (int i : {0, 2}) {
    ASSERT_TRUE(r->results(i).has_error()) << i;
    EXPECT_EQ(r->results(i).error().code(), kUnavailable);
    EXPECT_TRUE(absl::StrContains(r->results(i).error().message(), "disk full"));
  }
  EXPECT_EQ(r->results(1).error().code(), kInvalidArgument);
  failing->Heal();
  EXPECT_DOUBLE_EQ(Value("api", "u1"), 10);
}

TEST_F(BatchTest, FailedStoreOpenAllowsEachEntryFailedOpen) {
  auto store = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* failing = store.get();
  ServerOptions options;
  options.store.failure_policy = FailurePolicy::kOpen;
  StartServer(options, std::move(store));
  failing->FailWith(absl::UnavailableError("disk full"));
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 20)},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", -2)},
                                 {v1::BatchEntry::RESERVE, MakeRequest("api", "u2")}}));
  ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 3);
  for (int i : {0, 2}) {
    ASSERT_TRUE(r->results(i).has_response()) << i;
    EXPECT_TRUE(r->results(i).response().allowed());
    EXPECT_TRUE(r->results(i).response().failed_open());
  }
  EXPECT_EQ(r->results(1).error().code(), kInvalidArgument);  // bad input is never let through
  const auto [status, text] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(absl::StrContains(
      text, "ratelimit_decisions_total{limit=\"api\",outcome=\"failed_open\"} 2\n"))
      << text;
}

TEST_F(BatchTest, DecisionsAreCountedPerEntryAndTheCallOnce) {
  StartServer();
  auto r = client_->Batch(Batch({{v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 6)},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u1", 6)},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u2", 6)},
                                 {v1::BatchEntry::CONSUME, MakeRequest("api", "u4", 1)},
                                 {v1::BatchEntry::RESERVE, MakeRequest("api", "u3", 1)},
                                 {v1::BatchEntry::CHECK, MakeRequest("api", "u3", 1)}}));
  ASSERT_OK(r);
  const auto [status, text] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  // Runs of one outcome (u2 and u4 allowed in a row) are counted whole.
  for (const char* line : {
           "ratelimit_decisions_total{limit=\"api\",outcome=\"allowed\"} 3\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"denied\"} 1\n",
           "ratelimit_decisions_total{limit=\"api\",outcome=\"reserved\"} 1\n",
           "ratelimit_rpcs_total{method=\"Batch\",code=\"OK\"} 1\n",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace ratelimit
