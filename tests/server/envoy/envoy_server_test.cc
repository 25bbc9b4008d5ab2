// The Envoy API as part of the server: enabling it, start-up errors, hot reload, RocksDB state
// that survives a restart, and the admin Reset on Envoy limits.
#include <filesystem>

#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/reload_recorder.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Descriptor;
using ::ratelimit::testing::EnvoyClient;
using ::ratelimit::testing::EnvoyRequest;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::ReloadRecorder;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
using ::testing::HasSubstr;
using ::testing::Not;
using Response = rlsv3::RateLimitResponse;

std::string Limits(int requests_per_unit) {
  return "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, "
         "requests_per_unit: " +
         std::to_string(requests_per_unit) + "}\n";
}

class EnvoyServerTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_.File("envoy")); }

  ServerOptions Options() {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    o.store.open.rocksdb.path = dir_.File("data");
    o.limits.envoy_config_dir = dir_.File("envoy");
    o.admin.token = "s3cret";
    return o;
  }

  // A server (with metrics) on `store` (null: RocksDB) whose domain "web" has one concurrency
  // rule: key "user", 2 slots, leases of 10 s.
  absl::StatusOr<std::unique_ptr<RateLimitServer>> StartWithConcurrencyRule(
      std::unique_ptr<StateStore> store) {
    WriteFileAtomically(dir_.File("envoy/web.yaml"),
                        "domain: web\ndescriptors:\n  - key: user\n"
                        "    concurrency: {capacity: 2, lease_ttl: 10s}\n");
    ServerOptions o = Options();
    o.observability.metrics_listen = "127.0.0.1:0";
    o.store.lease_sweep_interval = absl::ZeroDuration();  // the tests sweep when they mean to
    return RateLimitServer::Start(o, clock_, std::move(store));
  }

  std::string Target(const RateLimitServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

  // The admin Reset of rule web.user's key `key` (empty: every key) on server `s`: what it
  // deleted (states or leases).
  absl::StatusOr<uint64_t> ResetUser(const RateLimitServer& s, const std::string& key) {
    auto admin = RateLimitClient::Connect(Target(s), ClientOptions{absl::Seconds(10), "s3cret"});
    v1::ResetRequest reset;
    reset.set_source(v1::ENVOY);
    reset.set_name("web");
    reset.add_envoy_path()->set_key("user");
    reset.set_key(key);
    reset.set_all_keys(key.empty());
    return admin->Reset(reset);
  }
  absl::StatusOr<uint64_t> ResetUserU1(const RateLimitServer& s) { return ResetUser(s, "u1"); }

  // limit_remaining of user=u1, consuming `hits` (0: only checking).
  uint32_t Remaining(EnvoyClient& c, uint64_t hits = 1) {
    absl::StatusOr<Response> r = c.ShouldRateLimit(EnvoyRequest("web", {{{{"user", "u1"}}, hits}}));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->statuses(0).limit_remaining() : 0;
  }

  TempDir dir_;
  FakeClock clock_;
};

TEST_F(EnvoyServerTest, OffWithoutAConfigDirectory) {
  ServerOptions o = Options();
  o.limits.envoy_config_dir.clear();
  auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  ASSERT_OK(server);
  EXPECT_EQ((*server)->envoy_service(), nullptr);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(client.ShouldRateLimit(EnvoyRequest("web", {{{{"user", "u1"}}}})).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(EnvoyServerTest, StartUpFailsOnABadConfigWithFileAndLine) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"),
                      "domain: web\ndescriptors:\n  - key: user\n    rate_limitz: {}\n");
  auto server = RateLimitServer::Start(Options(), clock_, std::make_unique<MemoryStateStore>());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      server.status().message(),
      HasSubstr(dir_.File("envoy/web.yaml") + ":4:5: descriptors[0]: unknown key \"rate_limitz\""));
}

TEST_F(EnvoyServerTest, HotReloadAppliesAGoodEdit) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(5));
  ServerOptions o = Options();
  o.limits.reload_interval = absl::Milliseconds(5);
  ReloadRecorder reloads;
  o.limits.on_config_reload = reloads.Callback();
  auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(Remaining(client, 0), 5u);
  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(7));
  // The watcher polls on its own thread: wait for it to apply the edit.
  ASSERT_TRUE(reloads.WaitFor("envoy", /*ok=*/true));
  EXPECT_EQ(Remaining(client, 0), 7u);
}

// A window keeps the count taken in it across a reload that changes its limit (docs/envoy.md:
// counters never overshoot): cut from 50 to 20 after 30 hits, the rest of the window is denied;
// raised to 60, 30 are left; cut to 5 after one more, none.
TEST_F(EnvoyServerTest, AReloadKeepsTheCountTakenInTheWindow) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(50));
  ServerOptions o = Options();
  o.limits.reload_interval = absl::Milliseconds(5);
  ReloadRecorder reloads;
  o.limits.on_config_reload = reloads.Callback();
  auto server = RateLimitServer::Start(o, clock_, nullptr);  // RocksDB
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(Remaining(client, 30), 20u);

  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(20));
  ASSERT_TRUE(reloads.WaitFor("envoy", /*ok=*/true, 1));
  EXPECT_EQ(Remaining(client, 0), 0u);
  absl::StatusOr<Response> hit = client.ShouldRateLimit(EnvoyRequest("web", {{{{"user", "u1"}}}}));
  ASSERT_OK(hit);
  EXPECT_EQ(hit->overall_code(), Response::OVER_LIMIT);

  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(60));
  ASSERT_TRUE(reloads.WaitFor("envoy", /*ok=*/true, 2));
  EXPECT_EQ(Remaining(client, 0), 30u);
  EXPECT_EQ(Remaining(client, 1), 29u);

  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(5));
  ASSERT_TRUE(reloads.WaitFor("envoy", /*ok=*/true, 3));
  EXPECT_EQ(Remaining(client, 0), 0u);
}

TEST_F(EnvoyServerTest, RocksDbStateSurvivesRestartAndAdminResetWorks) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(5));
  {
    auto server = RateLimitServer::Start(Options(), clock_);  // RocksDB in data_dir
    ASSERT_OK(server);
    EnvoyClient client(Target(**server));
    EXPECT_EQ(Remaining(client), 4u);
    EXPECT_EQ(Remaining(client), 3u);
    (*server)->Shutdown();
  }
  auto server = RateLimitServer::Start(Options(), clock_);
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(Remaining(client), 2u);  // nothing lost across the restart

  // An Envoy rule is named by its domain and descriptor path, the key by the entry values.
  auto admin =
      RateLimitClient::Connect(Target(**server), ClientOptions{absl::Seconds(10), "s3cret"});
  v1::ResetRequest reset;
  reset.set_source(v1::ENVOY);
  reset.set_name("web");
  reset.add_envoy_path()->set_key("user");
  reset.set_key("u1");
  ASSERT_OK(admin->Reset(reset));
  EXPECT_EQ(Remaining(client), 4u);
  reset.clear_key();
  reset.set_all_keys(true);
  ASSERT_OK(admin->Reset(reset));
  EXPECT_EQ(Remaining(client), 4u);
}

// A rule with several limits keeps one state per limit; a Reset of one key resets them all.
TEST_F(EnvoyServerTest, ResetOfARuleWithSeveralLimitsResetsEveryLimit) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"),
                      "domain: web\ndescriptors:\n  - key: user\n    rate_limits:\n"
                      "      - {unit: hour, requests_per_unit: 5}\n"
                      "      - {unit: day, requests_per_unit: 3}\n");
  auto server = RateLimitServer::Start(Options(), clock_);
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(Remaining(client), 2u);  // the day's limit is the tightest
  EXPECT_EQ(Remaining(client), 1u);
  absl::StatusOr<uint64_t> deleted = ResetUserU1(**server);
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 2u);  // both limits' states
  EXPECT_EQ(Remaining(client), 2u);
}

// A concurrency rule's leases are in RocksDB: a restart keeps them held, and the admin Reset of
// the rule's key ends them.
TEST_F(EnvoyServerTest, ConcurrencyLeasesSurviveARestartAndAResetEndsThem) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"),
                      "domain: web\ndescriptors:\n  - key: user\n"
                      "    concurrency: {capacity: 1, lease_ttl: 1h}\n");
  auto take = [](EnvoyClient& c) {
    absl::StatusOr<Response> r = c.ShouldRateLimit(EnvoyRequest("web", {{{{"user", "u1"}}}}));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->overall_code() : Response::UNKNOWN;
  };
  {
    auto server = RateLimitServer::Start(Options(), clock_);
    ASSERT_OK(server);
    EnvoyClient client(Target(**server));
    EXPECT_EQ(take(client), Response::OK);
    (*server)->Shutdown();
  }
  auto server = RateLimitServer::Start(Options(), clock_);
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(take(client), Response::OVER_LIMIT);  // the lease is still held
  absl::StatusOr<uint64_t> ended = ResetUserU1(**server);
  ASSERT_OK(ended);
  EXPECT_EQ(*ended, 1u);  // the one lease
  EXPECT_EQ(take(client), Response::OK);
}

// Envoy's leases are counted as Acquire's are, under the rule's name, and their slots held are in
// the gauge; a lease never released is counted as a leak when a later decision drops it.
TEST_F(EnvoyServerTest, ConcurrencyLeasesAreCountedAndTheirSlotsGauged) {
  auto server = StartWithConcurrencyRule(std::make_unique<MemoryStateStore>());
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  auto call = [&client](const std::string& key, const std::string& value) {
    absl::StatusOr<Response> r = client.ShouldRateLimit(EnvoyRequest("web", {{{{key, value}}}}));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Response();
  };
  const Response first = call("user", "u1");
  const std::string token = first.dynamic_metadata().fields().at("ratelimit.lease").string_value();
  EXPECT_EQ(call("user", "u1").overall_code(), Response::OK);
  EXPECT_EQ(call("user", "u1").overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(call("ratelimit.lease", token).overall_code(), Response::OK);
  clock_.Advance(10 * testing::kSecond);  // the second lease expires unreleased
  EXPECT_EQ(call("user", "u1").overall_code(), Response::OK);
  const auto [status, body] = testing::HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_acquires_total{limit=\"web.user\","
                              "outcome=\"acquired\"} 3"));
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_acquires_total{limit=\"web.user\","
                              "outcome=\"refused\"} 1"));
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_releases_total{limit=\"web.user\","
                              "state=\"released\"} 1"));
  EXPECT_THAT(body, HasSubstr("ratelimit_leases_expired_total{limit=\"web.user\"} 1"));
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"} 1"));
}

// The leak sweep counts an Envoy lease that expired unreleased, on a key no request matches again,
// under the rule's name, and takes its slot off the rule's gauge.
TEST_F(EnvoyServerTest, TheLeakSweepCountsAnEnvoyLeaseUnderItsRulesName) {
  auto server = StartWithConcurrencyRule(nullptr);  // RocksDB
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  absl::StatusOr<Response> taken =
      client.ShouldRateLimit(EnvoyRequest("web", {{{{"user", "u1"}}}}));
  ASSERT_OK(taken);
  ASSERT_EQ(taken->overall_code(), Response::OK);
  const auto held = testing::HttpGet((*server)->metrics_port(), "/metrics");
  EXPECT_THAT(held.second, HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"} 1"));
  clock_.Advance(11 * testing::kSecond);  // expired, never released, and no request follows
  absl::StatusOr<int64_t> swept = (*server)->SweepLeakedLeases();
  ASSERT_OK(swept);
  EXPECT_EQ(*swept, 1);
  const auto [status, body] = testing::HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("ratelimit_leases_expired_total{limit=\"web.user\"} 1"));
  EXPECT_THAT(body, Not(HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"}")));  // none
}

// An admin Reset of a concurrency rule's key, or of all its keys, is seen under the rule's name
// as its calls are: the leaks it drops are counted as web.user's and the slots it ends leave
// web.user's gauge (the reset names the rule's state, whose name is not the rule's).
TEST_F(EnvoyServerTest, AResetOfAConcurrencyRuleIsCountedAndGaugedUnderTheRulesName) {
  auto server = StartWithConcurrencyRule(nullptr);  // RocksDB
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  auto take = [&client](const std::string& user) {
    absl::StatusOr<Response> r = client.ShouldRateLimit(EnvoyRequest("web", {{{{"user", user}}}}));
    ASSERT_OK(r);
    EXPECT_EQ(r->overall_code(), Response::OK);
  };
  auto metrics = [&server] {
    return testing::HttpGet((*server)->metrics_port(), "/metrics").second;
  };
  take("u1");
  take("u1");
  clock_.Advance(11 * testing::kSecond);  // both expire unreleased; nothing decides u1 again
  EXPECT_THAT(metrics(), HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"} 2"));
  absl::StatusOr<uint64_t> ended = ResetUserU1(**server);
  ASSERT_OK(ended);
  EXPECT_EQ(*ended, 0u);  // none was held any more
  std::string body = metrics();
  EXPECT_THAT(body, HasSubstr("ratelimit_leases_expired_total{limit=\"web.user\"} 2"));
  EXPECT_THAT(body, Not(HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"}")));

  take("u2");
  EXPECT_THAT(metrics(), HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"} 1"));
  ASSERT_OK(ResetUser(**server, ""));  // every key
  body = metrics();
  EXPECT_THAT(body, Not(HasSubstr("ratelimit_lease_slots_held{limit=\"web.user\"}")));
  EXPECT_THAT(body, Not(HasSubstr("ratelimit_leases_expired_total{limit=\"R")));  // no state name
}

// A Reset of an Envoy domain or rule path that is not configured is NOT_FOUND naming the field;
// of a key no descriptor of the rule can make (another number of values, a broken escape, an
// empty value), INVALID_ARGUMENT naming `key`. Either deletes nothing.
TEST_F(EnvoyServerTest, ResetOfAnUnconfiguredTargetOrAnImpossibleKeyChangesNothing) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(5));
  auto server = RateLimitServer::Start(Options(), clock_, std::make_unique<MemoryStateStore>());
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  EXPECT_EQ(Remaining(client), 4u);
  auto admin =
      RateLimitClient::Connect(Target(**server), ClientOptions{absl::Seconds(10), "s3cret"});
  v1::ResetRequest reset;
  reset.set_source(v1::ENVOY);
  reset.set_name("mobile");
  reset.add_envoy_path()->set_key("user");
  reset.set_all_keys(true);
  absl::StatusOr<uint64_t> no_domain = admin->Reset(reset);
  EXPECT_EQ(no_domain.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_domain.status().message()),
              HasSubstr("name: no Envoy domain \"mobile\""));
  reset.set_name("web");
  reset.mutable_envoy_path(0)->set_key("account");
  absl::StatusOr<uint64_t> no_rule = admin->Reset(reset);
  EXPECT_EQ(no_rule.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_rule.status().message()),
              HasSubstr("envoy_path: no rule of domain \"web\""));
  reset.mutable_envoy_path(0)->set_value("u1");  // the rule is key-only: a value is another path
  reset.mutable_envoy_path(0)->set_key("user");
  EXPECT_EQ(admin->Reset(reset).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Remaining(client, 0), 4u);  // nothing was reset
  reset.mutable_envoy_path(0)->clear_value();
  reset.set_all_keys(false);
  for (const char* key : {"u1|x", "u1\\", "u\\1", "|"}) {
    reset.set_key(key);
    const absl::Status s = admin->Reset(reset).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("key: ")) << key;
  }
  EXPECT_EQ(Remaining(client, 0), 4u);  // nothing was reset
  reset.set_key("u1");
  EXPECT_EQ(*admin->Reset(reset), 1u);  // the configured rule: u1's state
  EXPECT_EQ(Remaining(client, 0), 5u);
  // An override (a limit Envoy sends) needs only its domain to be configured.
  reset.set_envoy_override(true);
  EXPECT_EQ(*admin->Reset(reset), 0u);
}

// Two limits Envoy sends for one descriptor path with different units (two rate-limit actions:
// 3 a minute and 5 a day) each hold: the minute's three pass, then the day's five bound the
// day across minutes. A Reset of the path's override ends both counters.
TEST_F(EnvoyServerTest, LimitsEnvoySendsWithDifferentUnitsKeepCountersOfTheirOwn) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), Limits(5));
  auto server = RateLimitServer::Start(Options(), clock_, std::make_unique<MemoryStateStore>());
  ASSERT_OK(server);
  EnvoyClient client(Target(**server));
  const Descriptor::Entries path = {{"account", "a1"}};
  const rlsv3::RateLimitRequest both = EnvoyRequest(
      "web", {Descriptor(path, std::nullopt, Descriptor::Override{3, ::envoy::type::v3::MINUTE}),
              Descriptor(path, std::nullopt, Descriptor::Override{5, ::envoy::type::v3::DAY})});
  auto codes = [&client, &both] {
    absl::StatusOr<Response> r = client.ShouldRateLimit(both);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->overall_code() : Response::UNKNOWN;
  };
  clock_.Set(int64_t{86400} * 20000 * testing::kSecond);  // the start of a day (and a minute)
  for (int i = 0; i < 3; ++i) EXPECT_EQ(codes(), Response::OK) << i;
  EXPECT_EQ(codes(), Response::OVER_LIMIT);  // the minute's 3
  clock_.Advance(60 * testing::kSecond);
  EXPECT_EQ(codes(), Response::OK);
  EXPECT_EQ(codes(), Response::OK);
  EXPECT_EQ(codes(), Response::OVER_LIMIT);  // the day's 5
  clock_.Advance(60 * testing::kSecond);
  EXPECT_EQ(codes(), Response::OVER_LIMIT);  // still the day's 5, in a new minute

  auto admin =
      RateLimitClient::Connect(Target(**server), ClientOptions{absl::Seconds(10), "s3cret"});
  v1::ResetRequest reset;
  reset.set_source(v1::ENVOY);
  reset.set_name("web");
  reset.add_envoy_path()->set_key("account");
  reset.set_key("a1");
  reset.set_envoy_override(true);
  EXPECT_EQ(*admin->Reset(reset), 2u);  // the minute's counter and the day's
  EXPECT_EQ(codes(), Response::OK);
}

}  // namespace
}  // namespace ratelimit
