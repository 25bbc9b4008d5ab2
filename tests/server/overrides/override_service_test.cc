// ratelimit.v1.OverrideService on a real server (gRPC on port 0, RocksDB in a temporary
// directory, a fake clock): set, get, list, delete and the audit; authorisation; bad input named
// and changing nothing; decisions under overrides with the exact token arithmetic; expiry;
// restarts.
#include "server/overrides/override_service.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;

constexpr char kToken[] = "override-test-token";

// api: 10 per second, capacity 20. window: a fixed window of 100 per minute, aligned to the epoch.
constexpr char kLimitsYaml[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 10
    period: 1s
    capacity: 20
  - name: window
    kind: fixed_window
    rate: 100
    period: 1m
    start: 0s
)";

v1::SetOverrideRequest SetKey(const std::string& name, const std::string& key) {
  v1::SetOverrideRequest r;
  r.mutable_override()->mutable_target()->set_name(name);
  r.mutable_override()->mutable_target()->set_key(key);
  r.mutable_override()->set_reason("test");
  r.set_actor("alice");
  return r;
}

v1::SetOverrideRequest SetPattern(const std::string& name, const std::string& pattern,
                                  double capacity) {
  v1::SetOverrideRequest r;
  r.mutable_override()->mutable_target()->set_name(name);
  r.mutable_override()->mutable_target()->set_key_pattern(pattern);
  r.mutable_override()->mutable_limit()->set_capacity(capacity);
  return r;
}

v1::OverrideTarget KeyTarget(const std::string& name, const std::string& key) {
  v1::OverrideTarget t;
  t.set_name(name);
  t.set_key(key);
  return t;
}

class OverrideServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& token = kToken) {
    ServerOptions options;
    options.admin.token = token;
    auto started = StartServerAndClient(options, dir_, kLimitsYaml, clock_, nullptr,
                                        ClientOptions{absl::Seconds(10), kToken});
    ASSERT_OK(started);
    server_ = std::move(started->server);
    client_ = std::move(started->client);
  }
  void Restart() {
    client_.reset();
    server_.reset();
    Start();
  }
  v1::RateLimitResponse Consume(const std::string& name, const std::string& key, double count) {
    auto r = client_->Consume(MakeRequest(name, key, count));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::RateLimitResponse();
  }
  // Every audit entry, newest first.
  std::vector<v1::OverrideAuditEntry> AuditEntries() {
    auto r = client_->ListOverrideAudit(v1::ListOverrideAuditRequest());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::vector<v1::OverrideAuditEntry>(r->entries().begin(), r->entries().end())
                  : std::vector<v1::OverrideAuditEntry>();
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(OverrideServiceTest, SetGetListDelete) {
  Start();
  v1::SetOverrideRequest set = SetKey("api", "customer-42");
  set.mutable_override()->mutable_limit()->set_capacity(200);
  auto first = client_->SetOverride(set);
  ASSERT_OK(first);
  EXPECT_EQ(first->override().limit().capacity(), 200);
  EXPECT_EQ(first->override().set_by(), "alice (token)");
  EXPECT_FALSE(first->has_replaced());
  set.mutable_override()->mutable_limit()->set_capacity(300);
  auto second = client_->SetOverride(set);
  ASSERT_OK(second);
  EXPECT_EQ(second->replaced().limit().capacity(), 200);
  ASSERT_OK(client_->SetOverride(SetPattern("api", "trial-*", 5)));
  ASSERT_OK(client_->SetOverride(SetPattern("window", "*", 50)));

  v1::GetOverrideRequest get;
  *get.mutable_target() = KeyTarget("api", "customer-42");
  auto got = client_->GetOverride(get);
  ASSERT_OK(got);
  EXPECT_EQ(got->override().limit().capacity(), 300);
  EXPECT_FALSE(got->override().inert());

  // Two pages of the three overrides; then one limit's only.
  v1::ListOverridesRequest list;
  list.set_page_size(2);
  auto page = client_->ListOverrides(list);
  ASSERT_OK(page);
  ASSERT_EQ(page->overrides_size(), 2);
  EXPECT_EQ(page->overrides(0).target().key(), "customer-42");
  EXPECT_EQ(page->overrides(1).target().key_pattern(), "trial-*");
  ASSERT_FALSE(page->next_page_token().empty());
  list.set_page_token(page->next_page_token());
  page = client_->ListOverrides(list);
  ASSERT_OK(page);
  ASSERT_EQ(page->overrides_size(), 1);
  EXPECT_EQ(page->overrides(0).target().name(), "window");
  EXPECT_TRUE(page->next_page_token().empty());
  v1::ListOverridesRequest of_window;
  of_window.set_name("window");
  EXPECT_EQ(client_->ListOverrides(of_window)->overrides_size(), 1);

  v1::DeleteOverrideRequest del;
  *del.mutable_target() = KeyTarget("api", "customer-42");
  del.set_reason("incident over");
  auto deleted = client_->DeleteOverride(del);
  ASSERT_OK(deleted);
  EXPECT_EQ(deleted->deleted().limit().capacity(), 300);
  EXPECT_EQ(client_->GetOverride(get).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->DeleteOverride(del).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ListOverrides(v1::ListOverridesRequest())->overrides_size(), 2);

  const std::vector<v1::OverrideAuditEntry> audit = AuditEntries();
  ASSERT_EQ(audit.size(), 5u);
  EXPECT_EQ(audit[0].action(), "delete");
  EXPECT_EQ(audit[0].reason(), "incident over");
  EXPECT_EQ(audit[0].authorized_by(), "token");
  EXPECT_EQ(audit[0].before().limit().capacity(), 300);
  EXPECT_FALSE(audit[0].has_after());
  EXPECT_EQ(audit[3].before().limit().capacity(), 200);
  EXPECT_EQ(audit[3].after().limit().capacity(), 300);
  EXPECT_EQ(audit[3].actor(), "alice");
}

TEST_F(OverrideServiceTest, RaiseAndCutCarryTheTokensExactly) {
  Start();
  // 15 of 20 taken: 5 left.
  ASSERT_DOUBLE_EQ(Consume("api", "k", 15).results(0).value(), 5);
  clock_.Advance(kSecond / 10);  // + 1 token at 10/s: 6
  v1::SetOverrideRequest raise = SetKey("api", "k");
  raise.mutable_override()->mutable_limit()->set_rate(100);
  raise.mutable_override()->mutable_limit()->set_capacity(200);
  ASSERT_OK(client_->SetOverride(raise));
  clock_.Advance(kSecond / 10);  // + 10 tokens at 100/s: 16
  v1::RateLimitResponse r = Consume("api", "k", 1);
  EXPECT_TRUE(r.allowed());
  EXPECT_DOUBLE_EQ(r.results(0).value(), 15) << "6 at the raise, never refilled by it";
  EXPECT_EQ(r.results(0).override(), "k");
  EXPECT_EQ(r.results(0).capacity(), 200);
  // Other keys keep the configured limit.
  EXPECT_EQ(Consume("api", "other", 1).results(0).override(), "");

  clock_.Advance(10 * kSecond);  // full: 200
  v1::SetOverrideRequest cut = SetKey("api", "k");
  cut.mutable_override()->mutable_limit()->set_rate(1);
  cut.mutable_override()->mutable_limit()->set_capacity(3);
  ASSERT_OK(client_->SetOverride(cut));
  r = Consume("api", "k", 1);
  EXPECT_DOUBLE_EQ(r.results(0).value(), 2) << "clamped to 3 at the cut";
  r = Consume("api", "k", 3);
  EXPECT_FALSE(r.allowed());
  EXPECT_EQ(r.results(0).reason(), v1::INSUFFICIENT_TOKENS);

  // Deleted: back to the configured 10/s from the 2 left, not refilled by the deletion.
  v1::DeleteOverrideRequest del;
  *del.mutable_target() = KeyTarget("api", "k");
  ASSERT_OK(client_->DeleteOverride(del));
  clock_.Advance(kSecond / 10);
  r = Consume("api", "k", 1);
  EXPECT_DOUBLE_EQ(r.results(0).value(), 2) << "2 + 0.1 s at 10/s - 1";
  EXPECT_EQ(r.results(0).override(), "");

  const auto [status, metrics] = ::ratelimit::testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(absl::StrContains(metrics, "ratelimit_override_decisions_total{limit=\"api\"} 3"))
      << metrics;
}

TEST_F(OverrideServiceTest, BlockedUnlimitedAndAFixedWindowKeepingItsCount) {
  Start();
  v1::SetOverrideRequest block = SetKey("api", "leaked");
  block.mutable_override()->set_blocked(true);
  ASSERT_OK(client_->SetOverride(block));
  v1::RateLimitResponse r = Consume("api", "leaked", 1);
  EXPECT_FALSE(r.allowed());
  EXPECT_EQ(r.reason(), v1::BLOCKED);
  EXPECT_FALSE(r.has_retry_at());

  v1::SetOverrideRequest lift = SetKey("api", "vip");
  lift.mutable_override()->set_unlimited(true);
  ASSERT_OK(client_->SetOverride(lift));
  EXPECT_TRUE(Consume("api", "vip", 1000).allowed());
  EXPECT_TRUE(Consume("api", "vip", 1000).allowed());

  // 30 of the window's 100 counted, then raised to 200: 170 left in this window.
  clock_.Set((clock_.NowMicros() / (60 * kSecond)) * 60 * kSecond + kSecond);
  ASSERT_DOUBLE_EQ(Consume("window", "w", 30).results(0).value(), 70);
  ASSERT_OK(client_->SetOverride(SetPattern("window", "w*", 200)));
  EXPECT_DOUBLE_EQ(Consume("window", "w", 1).results(0).value(), 169);
}

// An unlimited take takes nothing, so it has no receipt: settling one gave back tokens never taken
// (a drained key, its override deleted, then cancelled its unlimited take of 5 and held 5).
TEST_F(OverrideServiceTest, AnUnlimitedTakeHasNoReceiptToSettle) {
  Start();
  EXPECT_FALSE(Consume("api", "vip", 1).results(0).receipt().empty());
  v1::SetOverrideRequest lift = SetKey("api", "vip");
  lift.mutable_override()->set_unlimited(true);
  ASSERT_OK(client_->SetOverride(lift));
  const v1::RateLimitResponse unlimited = Consume("api", "vip", 5);
  ASSERT_TRUE(unlimited.allowed());
  EXPECT_TRUE(unlimited.results(0).receipt().empty());
  auto reserved = client_->Reserve(MakeRequest("api", "vip", 5));
  ASSERT_OK(reserved);
  EXPECT_TRUE(reserved->results(0).receipt().empty());
}

TEST_F(OverrideServiceTest, ATemporaryOverrideExpiresByItself) {
  Start();
  v1::SetOverrideRequest set = SetKey("api", "k");
  set.mutable_override()->mutable_limit()->set_capacity(100);
  const int64_t expires = clock_.NowMicros() + 60 * kSecond;
  set.mutable_override()->mutable_expires_at()->set_seconds(expires / kSecond);
  ASSERT_OK(client_->SetOverride(set));
  EXPECT_DOUBLE_EQ(Consume("api", "k", 50).results(0).value(), 50);
  clock_.Advance(59 * kSecond);
  EXPECT_EQ(Consume("api", "k", 1).results(0).override(), "k");
  clock_.Advance(kSecond);
  v1::RateLimitResponse r = Consume("api", "k", 1);
  EXPECT_EQ(r.results(0).override(), "");
  EXPECT_EQ(r.results(0).capacity(), 20);
  EXPECT_DOUBLE_EQ(r.results(0).value(), 19) << "full at expiry, clamped to the configured 20";
  v1::GetOverrideRequest get;
  *get.mutable_target() = KeyTarget("api", "k");
  EXPECT_TRUE(client_->GetOverride(get)->override().expired());
}

TEST_F(OverrideServiceTest, PatternPrecedenceOverTheWireAndAcrossARestart) {
  Start();
  ASSERT_OK(client_->SetOverride(SetPattern("api", "*", 1)));
  ASSERT_OK(client_->SetOverride(SetPattern("api", "trial-*", 2)));
  ASSERT_OK(client_->SetOverride(SetPattern("api", "trial-*-eu", 3)));
  ASSERT_OK(client_->SetOverride(SetPattern("api", "trial-*-*", 4)));
  v1::SetOverrideRequest exact = SetKey("api", "trial-7-eu");
  exact.mutable_override()->mutable_limit()->set_capacity(5);
  ASSERT_OK(client_->SetOverride(exact));
  EXPECT_EQ(Consume("api", "trial-7-eu", 1).results(0).override(), "trial-7-eu");
  EXPECT_EQ(Consume("api", "trial-8-eu", 1).results(0).override(), "trial-*-eu");
  EXPECT_EQ(Consume("api", "trial-8-us", 1).results(0).override(), "trial-*");
  EXPECT_EQ(Consume("api", "free-1", 1).results(0).capacity(), 1);

  // Durable: the same after a restart.
  Restart();
  EXPECT_EQ(Consume("api", "trial-9-eu", 1).results(0).override(), "trial-*-eu");
  EXPECT_EQ(Consume("api", "trial-9-us", 1).results(0).capacity(), 2);
  EXPECT_EQ(AuditEntries().size(), 5u);
}

TEST_F(OverrideServiceTest, CallsWithoutTheAdminCredentialAreRefusedAndChangeNothing) {
  Start();
  auto anonymous = RateLimitClient::Connect("127.0.0.1:" + std::to_string(server_->port()),
                                            ClientOptions{absl::Seconds(10), ""});
  auto wrong = RateLimitClient::Connect("127.0.0.1:" + std::to_string(server_->port()),
                                        ClientOptions{absl::Seconds(10), "not-the-token"});
  v1::SetOverrideRequest set = SetPattern("api", "*", 1);
  EXPECT_EQ(anonymous->SetOverride(set).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong->SetOverride(set).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(wrong->ListOverrides(v1::ListOverridesRequest()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(wrong->ListOverrideAudit(v1::ListOverrideAuditRequest()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Consume("api", "k", 1).results(0).override(), "");
  EXPECT_TRUE(AuditEntries().empty());
}

TEST_F(OverrideServiceTest, AServerWithoutAdminCredentialsRefusesEveryCall) {
  Start(/*token=*/"");
  auto r = client_->SetOverride(SetPattern("api", "*", 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "disabled")) << r.status();
}

// One bad request and the field its error must name.
struct BadSet {
  std::string field;
  std::function<void(v1::SetOverrideRequest&)> spoil;
};

TEST_F(OverrideServiceTest, BadInputIsNamedAndChangesNothing) {
  Start();
  auto target = [](v1::SetOverrideRequest& r) { return r.mutable_override()->mutable_target(); };
  auto limit = [](v1::SetOverrideRequest& r) { return r.mutable_override()->mutable_limit(); };
  const std::vector<BadSet> cases = {
      {"override", [](auto& r) { r.clear_override(); }},
      {"override.target", [](auto& r) { r.mutable_override()->clear_target(); }},
      {"override.target.envoy_path", [&](auto& r) { target(r)->set_source(v1::ENVOY); }},
      {"override.target.envoy_path", [&](auto& r) { target(r)->add_envoy_path()->set_key("k"); }},
      {"override.target.source", [&](auto& r) { target(r)->set_source(v1::INLINE); }},
      {"override.target.source",
       [&](auto& r) { target(r)->set_source(static_cast<v1::LimitSource>(9)); }},
      {"override.target.name", [&](auto& r) { target(r)->set_name(""); }},
      {"override.target.name", [&](auto& r) { target(r)->set_name(std::string(257, 'n')); }},
      {"override.target.name", [&](auto& r) { target(r)->set_name("a\nb"); }},
      {"override.target.key", [&](auto& r) { target(r)->clear_key(); }},
      {"override.target.key", [&](auto& r) { target(r)->set_key(std::string(1025, 'k')); }},
      {"override.target.key_pattern", [&](auto& r) { target(r)->set_key_pattern("p*"); }},
      {"override.target.key_pattern",
       [&](auto& r) { target(r)->clear_key(), target(r)->set_key_pattern("no-star"); }},
      {"override.target.key_pattern",
       [&](auto& r) { target(r)->clear_key(), target(r)->set_key_pattern("*********"); }},
      {"override.target.key_pattern",
       [&](auto& r) {
         target(r)->clear_key(), target(r)->set_key_pattern(std::string(1025, '*'));
       }},
      {"override.effect", [](auto& r) { r.mutable_override()->clear_effect(); }},
      {"override.unlimited", [](auto& r) { r.mutable_override()->set_unlimited(false); }},
      {"override.blocked", [](auto& r) { r.mutable_override()->set_blocked(false); }},
      {"override.limit", [&](auto& r) { limit(r)->Clear(); }},
      {"override.limit.rate", [&](auto& r) { limit(r)->set_rate(0); }},
      {"override.limit.rate", [&](auto& r) { limit(r)->set_rate(-1); }},
      {"override.limit.rate", [&](auto& r) { limit(r)->set_rate(1e16); }},
      {"override.limit.rate",
       [&](auto& r) { limit(r)->set_rate(std::numeric_limits<double>::quiet_NaN()); }},
      {"override.limit.capacity", [&](auto& r) { limit(r)->set_capacity(-1); }},
      {"override.limit.capacity",
       [&](auto& r) { limit(r)->set_capacity(std::numeric_limits<double>::infinity()); }},
      {"override.limit.max_reserved", [&](auto& r) { limit(r)->set_max_reserved(-0.5); }},
      {"override.limit.period", [&](auto& r) { limit(r)->mutable_period()->set_seconds(0); }},
      {"override.limit.period", [&](auto& r) { limit(r)->mutable_period()->set_seconds(-1); }},
      {"override.limit.period", [&](auto& r) { limit(r)->mutable_period()->set_nanos(-5); }},
      {"override.limit.period",
       [&](auto& r) { limit(r)->mutable_period()->set_seconds(int64_t{200} * 366 * 86400); }},
      {"override.limit.period",
       [&](auto& r) {
         target(r)->set_name("window");
         limit(r)->mutable_period()->set_seconds(30);
       }},
      {"override.expires_at",
       [](auto& r) { r.mutable_override()->mutable_expires_at()->set_seconds(1); }},
      {"override.expires_at",
       [](auto& r) { r.mutable_override()->mutable_expires_at()->set_nanos(-1); }},
      {"override.expires_at",
       [](auto& r) {
         r.mutable_override()->mutable_expires_at()->set_seconds(int64_t{253402300799});
       }},
      {"override.reason",
       [](auto& r) { r.mutable_override()->set_reason(std::string(1025, 'r')); }},
      {"actor", [](auto& r) { r.set_actor(std::string(257, 'a')); }},
  };
  for (const BadSet& c : cases) {
    v1::SetOverrideRequest r = SetKey("api", "k");
    r.mutable_override()->mutable_limit()->set_capacity(100);
    c.spoil(r);
    auto answer = client_->SetOverride(r);
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument)
        << c.field << ": " << answer.status();
    EXPECT_TRUE(absl::StartsWith(answer.status().message(), c.field + ": "))
        << "expected " << c.field << ", got " << answer.status();
  }
  v1::SetOverrideRequest unknown = SetKey("nope", "k");
  unknown.mutable_override()->mutable_limit()->set_capacity(1);
  auto missing = client_->SetOverride(unknown);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StartsWith(missing.status().message(), "override.target.name: "));

  // The other calls' inputs.
  v1::ListOverridesRequest list;
  list.set_page_size(1001);
  EXPECT_TRUE(absl::StartsWith(client_->ListOverrides(list).status().message(), "page_size: "));
  list.set_page_size(0);
  list.set_page_token("!!");
  EXPECT_TRUE(absl::StartsWith(client_->ListOverrides(list).status().message(), "page_token: "));
  list.set_page_token("");
  list.set_source(v1::INLINE);
  EXPECT_TRUE(absl::StartsWith(client_->ListOverrides(list).status().message(), "source: "));
  v1::ListOverrideAuditRequest audit;
  audit.set_page_token("x");
  EXPECT_TRUE(
      absl::StartsWith(client_->ListOverrideAudit(audit).status().message(), "page_token: "));
  v1::DeleteOverrideRequest del;
  EXPECT_TRUE(absl::StartsWith(client_->DeleteOverride(del).status().message(), "target: "));
  *del.mutable_target() = KeyTarget("api", "k");
  del.set_reason(std::string(1025, 'r'));
  EXPECT_TRUE(absl::StartsWith(client_->DeleteOverride(del).status().message(), "reason: "));
  v1::GetOverrideRequest get;
  *get.mutable_target() = KeyTarget("api", "");
  EXPECT_TRUE(absl::StartsWith(client_->GetOverride(get).status().message(), "target.key: "));

  // Nothing was written, and decisions are as configured.
  EXPECT_TRUE(client_->ListOverrides(v1::ListOverridesRequest())->overrides().empty());
  EXPECT_TRUE(AuditEntries().empty());
  EXPECT_EQ(Consume("api", "k", 1).results(0).capacity(), 20);
}

}  // namespace
}  // namespace ratelimit
