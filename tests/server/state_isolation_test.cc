// Each source of limits (limits file, inline configs, Envoy rules) keeps its states in its own
// namespace: over real gRPC (port 0, fake clock), no request of one source reaches another's
// state; the admin Reset reaches each; --inline_limits=deny; two Envoy domains whose dotted names
// coincide keep separate counters.
#include <filesystem>
#include <string>

#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::EnvoyClient;
using ::ratelimit::testing::EnvoyRequest;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
using ::testing::HasSubstr;

constexpr char kWebRules[] =
    "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: "
    "5}\n";

// An inline fixed window of `capacity` per hour for name/key.
v1::RateLimitRequest Inline(const std::string& name, const std::string& key, double count,
                            double capacity) {
  v1::RateLimitRequest r = MakeRequest(name, key, count);
  v1::LimitConfig* c = r.mutable_limits(0)->mutable_config();
  c->set_kind(v1::FIXED_WINDOW);
  c->set_rate(capacity);
  c->mutable_period()->set_seconds(3600);
  c->mutable_start()->set_seconds(0);
  return r;
}

class StateIsolationTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_.File("envoy")); }

  void Start(ServerOptions options = {}, std::unique_ptr<StateStore> store = nullptr) {
    options.listen.address = "127.0.0.1:0";
    if (options.store.open.rocksdb.path == ServerOptions().store.open.rocksdb.path)
      options.store.open.rocksdb.path = dir_.File("data");
    if (options.limits.envoy_config_dir.empty())
      options.limits.envoy_config_dir = dir_.File("envoy");
    options.admin.token = "s3cret";
    auto server = RateLimitServer::Start(options, clock_, std::move(store));
    ASSERT_OK(server);
    server_ = *std::move(server);
    const std::string target = "127.0.0.1:" + std::to_string(server_->port());
    client_ = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(10), "s3cret"});
    envoy_ = std::make_unique<EnvoyClient>(target);
  }

  // limit_remaining of one descriptor, consuming one hit (`hits` 0: only checking).
  uint32_t EnvoyRemaining(const std::string& domain, const std::string& key,
                          const std::string& value, uint64_t hits = 1) {
    auto r = envoy_->ShouldRateLimit(EnvoyRequest(domain, {{{{key, value}}, hits}}));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->statuses(0).limit_remaining() : 0;
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<RateLimitClient> client_;
  std::unique_ptr<EnvoyClient> envoy_;
};

// The Envoy rule web/user keeps its counter under the readable name "web.user"; an inline v1
// limit of that name neither reads, refills nor blocks it.
TEST_F(StateIsolationTest, InlineLimitCannotReachAnEnvoyRulesState) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), kWebRules);
  Start({}, std::make_unique<MemoryStateStore>());
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1"), 4u);
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1"), 3u);

  // Read: an inline Check sees its own, full state, not Envoy's 3 of 5.
  auto check = client_->Check(Inline("web.user", "u1", 1, 5));
  ASSERT_OK(check);
  EXPECT_EQ(check->results(0).value(), 5);
  // Refill: a Consume with a huge capacity does not hand Envoy's rule new tokens.
  ASSERT_OK(client_->Consume(Inline("web.user", "u1", 1, 1e12)));
  // Block: a huge reservation does not put Envoy's rule into debt.
  auto reserve = client_->Reserve(Inline("web.user", "u1", 1e15, 5));
  ASSERT_OK(reserve);
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1"), 2u);
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1"), 1u);
}

// A limit of the limits file keeps its state when the name later becomes free for inline use
// (the file is changed, the server restarted on the same data directory).
TEST_F(StateIsolationTest, InlineLimitCannotReachALimitsFileState) {
  WriteFileAtomically(dir_.File("limits.yaml"),
                      "limits:\n  - name: api\n    kind: fixed_window\n    rate: 10\n"
                      "    period: 1h\n    start: 0s\n");
  ServerOptions options;
  options.limits.file = dir_.File("limits.yaml");
  Start(options);  // RocksDB in data_dir
  // An inline config for a defined name is still refused.
  auto refused = client_->Consume(Inline("api", "k", 1, 100));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("limits[0].config"));
  auto taken = client_->Consume(MakeRequest("api", "k", 7));
  ASSERT_OK(taken);
  ASSERT_TRUE(taken->allowed());
  server_->Shutdown();
  server_.reset();

  WriteFileAtomically(dir_.File("limits.yaml"), "limits: []\n");
  Start(options);
  auto inline_check = client_->Check(Inline("api", "k", 1, 10));
  ASSERT_OK(inline_check);
  EXPECT_EQ(inline_check->results(0).value(), 10);  // not the file limit's 3
  ASSERT_OK(client_->Consume(Inline("api", "k", 10, 10)));
  server_->Shutdown();
  server_.reset();

  WriteFileAtomically(dir_.File("limits.yaml"),
                      "limits:\n  - name: api\n    kind: fixed_window\n    rate: 10\n"
                      "    period: 1h\n    start: 0s\n");
  Start(options);
  auto file_check = client_->Check(MakeRequest("api", "k"));
  ASSERT_OK(file_check);
  EXPECT_EQ(file_check->results(0).value(), 3);  // untouched by the inline limit
}

TEST_F(StateIsolationTest, InlineLimitsDenyRefusesInlineConfigsOnly) {
  WriteFileAtomically(dir_.File("limits.yaml"),
                      "limits:\n  - name: api\n    kind: token_bucket\n    rate: 10\n"
                      "    period: 1s\n");
  ServerOptions options;
  options.limits.file = dir_.File("limits.yaml");
  options.limits.inline_limits = InlineLimits::kDeny;
  Start(options, std::make_unique<MemoryStateStore>());
  v1::RateLimitRequest both = MakeRequest("api", "k");
  *both.add_limits() = Inline("tmp", "k", 1, 5).limits(0);
  for (auto call :
       {&RateLimitClient::Consume, &RateLimitClient::Check, &RateLimitClient::Reserve}) {
    auto r = ((*client_).*call)(both);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(r.status().message(), HasSubstr("limits[1].config"));
  }
  auto defined = client_->Consume(MakeRequest("api", "k"));
  ASSERT_OK(defined);
  EXPECT_EQ(defined->results(0).value(), 9);  // nothing was taken by the refused requests
}

TEST_F(StateIsolationTest, ResetReachesEachSourceAndOnlyIt) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), kWebRules);
  WriteFileAtomically(dir_.File("limits.yaml"),
                      "limits:\n  - name: api\n    kind: fixed_window\n    rate: 10\n"
                      "    period: 1h\n    start: 0s\n");
  ServerOptions options;
  options.limits.file = dir_.File("limits.yaml");
  Start(options, std::make_unique<MemoryStateStore>());
  ASSERT_OK(client_->Consume(MakeRequest("api", "k", 4)));
  ASSERT_OK(client_->Consume(Inline("tmp", "k", 4, 10)));
  ASSERT_OK(client_->Consume(Inline("tmp", "k2", 4, 10)));
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1"), 4u);
  auto value = [&](const v1::RateLimitRequest& r) {
    auto c = client_->Check(r);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->results(0).value() : -1;
  };

  // The default source is the limits file: it does not reach the inline "tmp" (NOT_FOUND there).
  EXPECT_EQ(client_->Reset("tmp", "k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(value(Inline("tmp", "k", 1, 10)), 6);

  v1::ResetRequest inline_reset;
  inline_reset.set_source(v1::INLINE);
  inline_reset.set_name("tmp");
  inline_reset.set_key("k");
  ASSERT_OK(client_->Reset(inline_reset));
  EXPECT_EQ(value(Inline("tmp", "k", 1, 10)), 10);
  EXPECT_EQ(value(Inline("tmp", "k2", 1, 10)), 6);
  inline_reset.clear_key();
  inline_reset.set_all_keys(true);
  ASSERT_OK(client_->Reset(inline_reset));
  EXPECT_EQ(value(Inline("tmp", "k2", 1, 10)), 10);
  EXPECT_EQ(value(MakeRequest("api", "k")), 6);  // other sources untouched
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1", 0), 4u);

  v1::ResetRequest envoy_reset;
  envoy_reset.set_source(v1::ENVOY);
  envoy_reset.set_name("web");
  envoy_reset.add_envoy_path()->set_key("user");
  envoy_reset.set_key("u1");
  ASSERT_OK(client_->Reset(envoy_reset));
  EXPECT_EQ(EnvoyRemaining("web", "user", "u1", 0), 5u);
  EXPECT_EQ(value(MakeRequest("api", "k")), 6);

  ASSERT_OK(client_->ResetAll("api"));
  EXPECT_EQ(value(MakeRequest("api", "k")), 10);

  // Bad requests name the field and change nothing.
  envoy_reset.clear_envoy_path();
  absl::Status missing_path = client_->Reset(envoy_reset).status();
  EXPECT_EQ(missing_path.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing_path.message()), HasSubstr("envoy_path"));
  inline_reset.add_envoy_path()->set_key("user");
  absl::Status stray_path = client_->Reset(inline_reset).status();
  EXPECT_EQ(stray_path.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(stray_path.message()), HasSubstr("envoy_path"));
}

// Runs the CLI and returns (exit code, output).
std::pair<int, std::string> RunCli(const std::string& args) {
  return ::ratelimit::testing::RunCommand(::ratelimit::testing::BinaryPath("ratelimit") + " " +
                                          args);
}

TEST_F(StateIsolationTest, CliResetsEachSource) {
  WriteFileAtomically(dir_.File("envoy/web.yaml"), kWebRules);
  WriteFileAtomically(dir_.File("token"), "s3cret\n");
  Start({}, std::make_unique<MemoryStateStore>());
  const std::string flags = "--target=127.0.0.1:" + std::to_string(server_->port()) +
                            " --admin_token_file=" + dir_.File("token");
  ASSERT_OK(client_->Consume(Inline("tmp", "k", 4, 10)));
  EXPECT_EQ(EnvoyRemaining("web", "user", "a|b"), 4u);

  auto [code, out] = RunCli("reset " + flags + " --source=inline --name=tmp --key=k");
  EXPECT_EQ(code, 0) << out;
  auto check = client_->Check(Inline("tmp", "k", 1, 10));
  ASSERT_OK(check);
  EXPECT_EQ(check->results(0).value(), 10);

  std::tie(code, out) =
      RunCli("reset " + flags + " --source=envoy --name=web --envoy_path=user --key='a\\|b'");
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(EnvoyRemaining("web", "user", "a|b", 0), 5u);

  std::tie(code, out) = RunCli("reset " + flags + " --source=redis --name=tmp --key=k");
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, HasSubstr("--source must be limits_file, inline or envoy"));
  std::tie(code, out) = RunCli("reset " + flags + " --source=envoy --name=web --key=u1");
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, HasSubstr("INVALID_ARGUMENT: envoy_path"));
}

// Domain "a" with the rule key "b.c" and domain "a.b" with the rule key "c" have the same
// readable name "a.b.c", and the same state key for the same value; their counters stay apart.
TEST_F(StateIsolationTest, EnvoyDomainsWithTheSameDottedNameKeepSeparateCounters) {
  WriteFileAtomically(dir_.File("envoy/a.yaml"),
                      "domain: a\ndescriptors:\n  - key: b.c\n"
                      "    rate_limit: {unit: hour, requests_per_unit: 5}\n");
  WriteFileAtomically(dir_.File("envoy/ab.yaml"),
                      "domain: a.b\ndescriptors:\n  - key: c\n"
                      "    rate_limit: {unit: hour, requests_per_unit: 5}\n");
  Start({}, std::make_unique<MemoryStateStore>());
  EXPECT_EQ(EnvoyRemaining("a", "b.c", "v"), 4u);
  EXPECT_EQ(EnvoyRemaining("a", "b.c", "v"), 3u);
  EXPECT_EQ(EnvoyRemaining("a.b", "c", "v"), 4u);
  EXPECT_EQ(EnvoyRemaining("a", "b.c", "v"), 2u);
}

TEST(EnvoyStateNameTest, IsUnambiguous) {
  const std::vector<std::string> names = {
      EnvoyStateName("a", {{"b.c", ""}}, false),
      EnvoyStateName("a.b", {{"c", ""}}, false),
      EnvoyStateName("a", {{"b", ""}, {"c", ""}}, false),
      EnvoyStateName("a", {{"b", "c"}}, false),
      EnvoyStateName("a", {{"b_c", ""}}, false),
      EnvoyStateName("a", {{"b", ""}, {"c", ""}}, true),
      EnvoyStateName("a", {{"b", "1:c"}}, false),
      EnvoyStateName("a", {{"b", "1"}, {"c", ""}}, false),
  };
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]) << i << " " << j;
  }
  EXPECT_EQ(EnvoyStateName("a.b", {{"c", "x"}}, false), "R3:a.b1:c1:x");
}

}  // namespace
}  // namespace ratelimit
