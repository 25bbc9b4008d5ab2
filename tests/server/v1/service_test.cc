// ratelimit.v1.RateLimitService over real gRPC on port 0, in process, with a fake clock.
#include <thread>

#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::CheckedBalance;
using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kLimits;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TickingClock;
using ::ratelimit::testing::WriteFileAtomically;

class ServiceTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}, std::unique_ptr<StateStore> store = nullptr,
                   const Clock* clock = nullptr) {
    if (options.admin.token.empty()) options.admin.token = "s3cret";
    auto started =
        StartServerAndClient(std::move(options), dir_, kLimits, clock ? *clock : clock_,
                             std::move(store), ClientOptions{absl::Seconds(10), "s3cret"});
    ASSERT_OK(started);
    server_ = std::move(started->server);
    client_ = std::move(started->client);
    target_ = "127.0.0.1:" + std::to_string(server_->port());
  }

  // The current balance of api/<key> as Check reports it.
  double ApiValue(const std::string& key) { return CheckedBalance(*client_, "api", key); }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::string target_;
  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(ServiceTest, ConsumeUntilDeniedThenRetryAt) {
  StartServer();
  for (int i = 0; i < 10; ++i) {
    auto r = client_->Consume(MakeRequest("api", "u1"));
    ASSERT_OK(r);
    ASSERT_TRUE(r->allowed()) << i;
    EXPECT_DOUBLE_EQ(r->results(0).value(), 9 - i);
    EXPECT_FALSE(r->has_retry_at());
  }
  auto denied = client_->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(denied);
  EXPECT_FALSE(denied->allowed());
  EXPECT_EQ(denied->denied_by(), 0);
  EXPECT_EQ(denied->reason(), v1::INSUFFICIENT_TOKENS);
  EXPECT_EQ(denied->results(0).reason(), v1::INSUFFICIENT_TOKENS);
  const int64_t now = clock_.NowMicros();
  EXPECT_EQ(denied->retry_at().seconds() * 1000000 + denied->retry_at().nanos() / 1000,
            now + kSecond / 10);
  EXPECT_EQ(denied->retry_after().nanos(), 100000000);
  EXPECT_DOUBLE_EQ(denied->results(0).capacity(), 10);
  clock_.Advance(kSecond / 10);
  auto again = client_->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(again);
  EXPECT_TRUE(again->allowed());
}

TEST_F(ServiceTest, CheckReportsWithoutConsuming) {
  StartServer();
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 4)));
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(ApiValue("u1"), 6);
}

// Reserve 5 from an inline bucket of 3 tokens refilling 1 per second.
v1::RateLimitRequest ReserveFiveOfThree() {
  v1::RateLimitRequest req = MakeRequest("llm", "org", 5);
  v1::LimitConfig* c = req.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(1);
  c->mutable_period()->set_seconds(1);
  c->set_capacity(3);
  return req;
}

TEST_F(ServiceTest, ReserveGoesIntoDebtAndTellsWhenToRun) {
  StartServer();
  v1::RateLimitRequest req = ReserveFiveOfThree();
  auto r = client_->Reserve(req);
  ASSERT_OK(r);
  EXPECT_TRUE(r->allowed());
  EXPECT_DOUBLE_EQ(r->results(0).value(), -2);
  EXPECT_EQ(r->retry_after().seconds(), 2);
  EXPECT_EQ(r->retry_at().seconds() * 1000000, clock_.NowMicros() + 2 * kSecond);
}

TEST_F(ServiceTest, ReserveAndWaitWaitsUntilRetryAt) {
  StartServer();
  v1::RateLimitRequest req = ReserveFiveOfThree();
  v1::LimitConfig* c = req.mutable_limits(0)->mutable_config();
  absl::Time waited_until = absl::InfinitePast();
  auto r = client_->ReserveAndWait(req, [&](absl::Time t) { waited_until = t; });
  ASSERT_OK(r);
  EXPECT_EQ(absl::ToUnixMicros(waited_until), clock_.NowMicros() + 2 * kSecond);
  // A denied reservation does not wait.
  c->set_max_reserved(0);
  waited_until = absl::InfinitePast();
  auto denied = client_->ReserveAndWait(req, [&](absl::Time t) { waited_until = t; });
  ASSERT_OK(denied);
  EXPECT_FALSE(denied->allowed());
  EXPECT_EQ(waited_until, absl::InfinitePast());
}

TEST_F(ServiceTest, SeveralLimitsAreAllOrNothing) {
  StartServer();
  v1::RateLimitRequest req = MakeRequest("api", "u1", 1);
  *req.add_limits() = MakeRequest("daily", "u1", 4).limits(0);  // daily holds 3: never
  auto r = client_->Consume(req);
  ASSERT_OK(r);
  EXPECT_FALSE(r->allowed());
  EXPECT_EQ(r->denied_by(), 1);
  EXPECT_EQ(r->reason(), v1::COUNT_EXCEEDS_CAPACITY);
  EXPECT_FALSE(r->has_retry_at());
  EXPECT_TRUE(r->results(0).allowed());
  EXPECT_DOUBLE_EQ(ApiValue("u1"), 10);  // untouched
}

TEST_F(ServiceTest, UnknownNameWithoutConfigIsNotFound) {
  StartServer();
  auto r = client_->Consume(MakeRequest("nope", "k"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("limits[0].name"), absl::string_view::npos);
}

// ---- Bad input: INVALID_ARGUMENT naming the field, and nothing written --------------------

struct BadCase {
  std::string label;
  std::function<void(v1::RateLimitRequest&)> mutate;
  std::string field;
};

v1::LimitConfig* Inline(v1::RateLimitRequest& r) {
  // Limit 1 is an inline limit; limit 0 ("api"/"victim") is valid and must stay untouched.
  return r.mutable_limits(1)->mutable_config();
}

std::vector<BadCase> BadCases() {
  const double nan = std::nan(""), inf = INFINITY;
  std::vector<BadCase> cases = {
      {"empty name", [](auto& r) { r.mutable_limits(1)->set_name(""); }, "limits[1].name"},
      {"oversized name", [](auto& r) { r.mutable_limits(1)->set_name(std::string(257, 'n')); },
       "limits[1].name"},
      {"control char in name", [](auto& r) { r.mutable_limits(1)->set_name("a\nb"); },
       "limits[1].name"},
      {"empty key", [](auto& r) { r.mutable_limits(1)->set_key(""); }, "limits[1].key"},
      {"oversized key", [](auto& r) { r.mutable_limits(1)->set_key(std::string(1025, 'k')); },
       "limits[1].key"},
      {"zero count", [](auto& r) { r.mutable_limits(1)->set_count(0); }, "limits[1].count"},
      {"negative count", [](auto& r) { r.mutable_limits(1)->set_count(-1); }, "limits[1].count"},
      {"nan count", [nan](auto& r) { r.mutable_limits(1)->set_count(nan); }, "limits[1].count"},
      {"infinite count", [inf](auto& r) { r.mutable_limits(1)->set_count(inf); },
       "limits[1].count"},
      {"huge count", [](auto& r) { r.mutable_limits(1)->set_count(2e15); }, "limits[1].count"},
      {"zero rate", [](auto& r) { Inline(r)->set_rate(0); }, "limits[1].config.rate"},
      {"negative rate", [](auto& r) { Inline(r)->set_rate(-5); }, "limits[1].config.rate"},
      {"nan rate", [nan](auto& r) { Inline(r)->set_rate(nan); }, "limits[1].config.rate"},
      {"infinite rate", [inf](auto& r) { Inline(r)->set_rate(inf); }, "limits[1].config.rate"},
      {"missing period", [](auto& r) { Inline(r)->clear_period(); }, "limits[1].config.period"},
      {"zero period", [](auto& r) { Inline(r)->mutable_period()->set_seconds(0); },
       "limits[1].config.period"},
      {"negative period", [](auto& r) { Inline(r)->mutable_period()->set_seconds(-1); },
       "limits[1].config.period"},
      {"sub-microsecond period",
       [](auto& r) {
         Inline(r)->mutable_period()->set_seconds(0);
         Inline(r)->mutable_period()->set_nanos(500);
       },
       "limits[1].config.period"},
      {"malformed period", [](auto& r) { Inline(r)->mutable_period()->set_nanos(-5); },
       "limits[1].config.period"},
      {"period over 100 years",
       [](auto& r) { Inline(r)->mutable_period()->set_seconds(200LL * 366 * 86400); },
       "limits[1].config.period"},
      {"negative capacity", [](auto& r) { Inline(r)->set_capacity(-1); },
       "limits[1].config.capacity"},
      {"nan capacity", [nan](auto& r) { Inline(r)->set_capacity(nan); },
       "limits[1].config.capacity"},
      {"negative max_reserved", [](auto& r) { Inline(r)->set_max_reserved(-1); },
       "limits[1].config.max_reserved"},
      {"unspecified kind", [](auto& r) { Inline(r)->set_kind(v1::KIND_UNSPECIFIED); },
       "limits[1].config.kind"},
      {"unknown kind", [](auto& r) { Inline(r)->set_kind(static_cast<v1::Kind>(7)); },
       "limits[1].config.kind"},
      {"jitter above 1", [](auto& r) { Inline(r)->set_jitter(2); }, "limits[1].config.jitter"},
      {"start on a token bucket", [](auto& r) { Inline(r)->mutable_start()->set_seconds(5); },
       "limits[1].config.start"},
      {"inline config for a defined name", [](auto& r) { r.mutable_limits(1)->set_name("daily"); },
       "limits[1].config"},
      {"same inline name and key twice with different configs",
       [](auto& r) {
         *r.add_limits() = r.limits(1);
         r.mutable_limits(2)->mutable_config()->set_capacity(1);
       },
       "limits[2].config"},
      {"no limits", [](auto& r) { r.clear_limits(); }, "limits"},
      {"too many limits",
       [](auto& r) {
         while (r.limits_size() < 17) *r.add_limits() = r.limits(0);
       },
       "limits"},
  };
  return cases;
}

TEST_F(ServiceTest, BadInputIsInvalidArgumentNamingTheFieldAndWritesNothing) {
  StartServer();
  for (const BadCase& bad : BadCases()) {
    for (int method = 0; method < 3; ++method) {
      v1::RateLimitRequest req = MakeRequest("api", "victim", 3);
      v1::LimitRequest* l = req.add_limits();
      l->set_name("inline");
      l->set_key("k");
      l->mutable_config()->set_kind(v1::TOKEN_BUCKET);
      l->mutable_config()->set_rate(5);
      l->mutable_config()->mutable_period()->set_seconds(1);
      bad.mutate(req);
      auto r = method == 0   ? client_->Consume(req)
               : method == 1 ? client_->Reserve(req)
                             : client_->Check(req);
      ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
          << bad.label << ": " << r.status();
      EXPECT_EQ(r.status().message().substr(0, bad.field.size() + 1), bad.field + ":")
          << bad.label << ": " << r.status();
    }
    EXPECT_DOUBLE_EQ(ApiValue("victim"), 10) << bad.label;
  }
  // And the inline limit was never created either.
  v1::RateLimitRequest check = MakeRequest("inline", "k");
  check.mutable_limits(0)->mutable_config()->set_kind(v1::TOKEN_BUCKET);
  check.mutable_limits(0)->mutable_config()->set_rate(5);
  check.mutable_limits(0)->mutable_config()->mutable_period()->set_seconds(1);
  auto r = client_->Check(check);
  ASSERT_OK(r);
  EXPECT_DOUBLE_EQ(r->results(0).value(), 5);
}

TEST_F(ServiceTest, OversizedMessageIsRejectedByTheTransport) {
  StartServer();
  v1::RateLimitRequest req = MakeRequest("api", "k");
  req.mutable_limits(0)->set_key(std::string(70 * 1024, 'k'));
  EXPECT_EQ(client_->Consume(req).status().code(), absl::StatusCode::kResourceExhausted);
}

// ---- Reset ------------------------------------------------------------------------------

TEST_F(ServiceTest, ResetRequiresTheAdminToken) {
  StartServer();
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 5)));
  auto no_token = RateLimitClient::Connect(target_, ClientOptions{absl::Seconds(10), ""});
  EXPECT_EQ(no_token->Reset("api", "u1").status().code(), absl::StatusCode::kUnauthenticated);
  auto wrong = RateLimitClient::Connect(target_, ClientOptions{absl::Seconds(10), "s3creT"});
  EXPECT_EQ(wrong->Reset("api", "u1").status().code(), absl::StatusCode::kPermissionDenied);
  auto longer = RateLimitClient::Connect(target_, ClientOptions{absl::Seconds(10), "s3cret!"});
  EXPECT_EQ(longer->Reset("api", "u1").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_DOUBLE_EQ(ApiValue("u1"), 5);  // refused resets changed nothing
  ASSERT_OK(client_->Reset("api", "u1"));
  EXPECT_DOUBLE_EQ(ApiValue("u1"), 10);
}

TEST_F(ServiceTest, ResetOneKeyLeavesTheOthers) {
  StartServer();
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 5)));
  ASSERT_OK(client_->Consume(MakeRequest("api", "u2", 5)));
  ASSERT_OK(client_->Reset("api", "u1"));
  EXPECT_DOUBLE_EQ(ApiValue("u1"), 10);
  EXPECT_DOUBLE_EQ(ApiValue("u2"), 5);
}

TEST_F(ServiceTest, ResetAllKeysOfOneName) {
  StartServer();
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 5)));
  ASSERT_OK(client_->Consume(MakeRequest("api", "u2", 5)));
  ASSERT_OK(client_->Consume(MakeRequest("daily", "u1", 2)));
  ASSERT_OK(client_->ResetAll("api"));
  EXPECT_DOUBLE_EQ(ApiValue("u1"), 10);
  EXPECT_DOUBLE_EQ(ApiValue("u2"), 10);
  auto daily = client_->Check(MakeRequest("daily", "u1"));
  ASSERT_OK(daily);
  EXPECT_DOUBLE_EQ(daily->results(0).value(), 1);
}

TEST_F(ServiceTest, ResetValidatesItsFields) {
  StartServer();
  EXPECT_EQ(client_->Reset("", "k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Reset("api", "").status().code(), absl::StatusCode::kInvalidArgument);
}

// A Reset of something that is not configured is NOT_FOUND naming the field, so that an
// operator who forgot --source is not told the counter was reset; the reply counts what was
// deleted, so a Reset of an inline limit with no state reads "0 deleted".
TEST_F(ServiceTest, ResetOfAnUnconfiguredNameIsNotFoundAndChangesNothing) {
  StartServer();
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1", 5)));
  v1::RateLimitRequest inline_take = MakeRequest("mine", "u1", 3);
  v1::LimitConfig* config = inline_take.mutable_limits(0)->mutable_config();
  config->set_kind(v1::TOKEN_BUCKET);
  config->set_rate(10);
  config->mutable_period()->set_seconds(3600);
  ASSERT_OK(client_->Consume(inline_take));

  // The inline limit's name without source=INLINE: not in the limits file.
  absl::StatusOr<uint64_t> missing = client_->Reset("mine", "u1");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "name: no limit \"mine\" in the limits file (inline limits: source=INLINE)");
  EXPECT_EQ(client_->ResetAll("nope").status().code(), absl::StatusCode::kNotFound);
  v1::ResetRequest envoy;
  envoy.set_source(v1::ENVOY);
  envoy.set_name("web");
  envoy.add_envoy_path()->set_key("user");
  envoy.set_all_keys(true);
  absl::StatusOr<uint64_t> no_envoy = client_->Reset(envoy);
  EXPECT_EQ(no_envoy.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_envoy.status().message()), ::testing::StartsWith("source: "));
  auto after = client_->Check(inline_take);
  ASSERT_OK(after);
  EXPECT_DOUBLE_EQ(after->results(0).value(), 7);  // nothing was reset

  v1::ResetRequest reset_inline;
  reset_inline.set_source(v1::INLINE);
  reset_inline.set_name("mine");
  reset_inline.set_key("u1");
  EXPECT_EQ(*client_->Reset(reset_inline), 1u);
  EXPECT_EQ(*client_->Reset(reset_inline), 0u);  // nothing left to delete
  EXPECT_EQ(*client_->Reset("api", "u1"), 1u);
  EXPECT_EQ(*client_->Reset("api", "never-used"), 0u);
}

TEST_F(ServiceTest, ResetAndListLeasesAreDisabledWithoutAConfiguredToken) {
  // A server started without a token refuses every reset, whatever the caller sends, and every
  // other administrative call, each told that it is the call disabled.
  ServerOptions options;
  options.admin.token = "";
  WriteFileAtomically(dir_.File("limits.yaml"), kLimits);
  options.listen.address = "127.0.0.1:0";
  options.store.open.rocksdb.path = dir_.File("data");
  auto server = RateLimitServer::Start(options, clock_);
  ASSERT_OK(server);
  auto client = RateLimitClient::Connect("127.0.0.1:" + std::to_string((*server)->port()),
                                         ClientOptions{absl::Seconds(10), "anything"});
  EXPECT_EQ(client->Reset("api", "u1").status().code(), absl::StatusCode::kPermissionDenied);
  // Nor does sending no credential make it UNAUTHENTICATED, as if a token would help.
  auto anonymous = RateLimitClient::Connect("127.0.0.1:" + std::to_string((*server)->port()),
                                            ClientOptions{absl::Seconds(10), ""});
  absl::Status refused = anonymous->Reset("api", "u1").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.message()), ::testing::StartsWith("Reset is disabled"));
  v1::ListLeasesRequest list;
  list.set_name("api");
  list.set_key("u1");
  absl::Status list_refused = anonymous->ListLeases(list).status();
  EXPECT_EQ(list_refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(list_refused.message()), ::testing::StartsWith("ListLeases is disabled"));
}

// ---- Failure policy ---------------------------------------------------------------------

TEST_F(ServiceTest, StoreFailureIsUnavailableWhenFailingClosed) {
  auto store = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* failing = store.get();
  StartServer({}, std::move(store));
  failing->FailWith(absl::UnavailableError("disk gone"));
  auto r = client_->Consume(MakeRequest("api", "u1"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client_->Reset("api", "u1").status().code(), absl::StatusCode::kUnavailable);
  failing->Heal();
  EXPECT_DOUBLE_EQ(ApiValue("u1"), 10);  // the failed consume counted nothing
}

TEST_F(ServiceTest, StoreFailureAllowsAndSaysSoWhenFailingOpen) {
  auto store = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* failing = store.get();
  ServerOptions options;
  options.store.failure_policy = FailurePolicy::kOpen;
  StartServer(options, std::move(store));
  failing->FailWith(absl::UnavailableError("disk gone"));
  auto r = client_->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(r);
  EXPECT_TRUE(r->allowed());
  EXPECT_TRUE(r->failed_open());
  // Validation still applies when failing open.
  EXPECT_EQ(client_->Consume(MakeRequest("api", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Concurrency over gRPC --------------------------------------------------------------

TEST_F(ServiceTest, OverGrantSixtyFourCallersOverGrpc) {
  // Seed 003's test end to end: 64 concurrent callers on one key, burst 10, rate 10/s, over
  // 3 s of virtual time (each clock read advances it by 600 us: about 2,500 decisions), on RocksDB.
  constexpr int64_t kStart = 1700000000LL * kSecond;
  TickingClock clock(kStart, 600);
  StartServer({}, nullptr, &clock);
  v1::RateLimitRequest req = MakeRequest("overgrant", "hot");
  v1::LimitConfig* c = req.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(10);
  c->mutable_period()->set_seconds(1);
  c->set_capacity(10);
  std::atomic<int> allowed{0}, denied{0}, errors{0};
  std::vector<std::unique_ptr<RateLimitClient>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(RateLimitClient::Connect(target_, ClientOptions{absl::Seconds(30), ""}));
  }
  std::vector<std::thread> callers;
  for (int i = 0; i < 64; ++i) {
    callers.emplace_back([&, i] {
      while (clock.Peek() < kStart + 3 * kSecond) {
        auto r = clients[i % 4]->Consume(req);
        if (!r.ok()) {
          ++errors;
        } else if (r->allowed()) {
          ++allowed;
        } else {
          ++denied;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  // Stopped here, not by the fixture: the server reads `clock` until it has shut down (its
  // store's close and background work included), and `clock` ends with this function.
  server_.reset();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(allowed.load(), 40);
  EXPECT_GE(allowed.load(), 38);
  EXPECT_GT(denied.load(), 1000);
}

}  // namespace
}  // namespace ratelimit
