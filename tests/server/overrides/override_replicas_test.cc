// Two servers on one Redis Cluster (each with its own RedisStateStore, as two replicas) and one
// limits file: an override set or deleted through one server's OverrideService reaches the other
// server's decisions once its refresher has read the new version, while that server is under a
// load of Consume calls.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;

constexpr char kToken[] = "override-replicas-token";

// 5 tokens, refilled one per hour (the fake clock does not move): a key is drained after five.
constexpr char kLimitsYaml[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 5
)";

// What one caller of the load saw, in order.
struct LoadLog {
  int errors = 0;
  int allowed_without_override = 0;
  // Decisions after the first one under the override that were not under it (a replica going
  // back to an older set of overrides).
  int fell_back = 0;
  // Read by the test's thread while the caller runs.
  std::atomic<bool> seen_override{false};
};

class OverrideReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = testing::StartRedisTestTarget(testing::RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    ServerOptions options;
    options.admin.token = kToken;
    for (int i = 0; i < 2; ++i) {
      // The servers' fake clock decides in Redis too (the function library takes it in place of
      // the primary's TIME): one clock for the servers and the store.
      auto store = testing::OpenRedisTestStore(target_, &clock_);
      ASSERT_OK(store);
      auto started =
          testing::StartServerAndClient(options, dir_, kLimitsYaml, clock_, *std::move(store),
                                        ClientOptions{absl::Seconds(10), kToken});
      ASSERT_OK(started);
      servers_[i] = std::move(started->server);
      clients_[i] = std::move(started->client);
    }
  }
  void TearDown() override {
    for (auto& server : servers_) {
      if (server) server->Shutdown();
    }
  }

  // Consumes one token of api/`key` on server `i` until its decision names `override` (empty:
  // none). B's refresher reads the version every 250 ms: this waits for it, bounded only so that
  // a broken refresher fails instead of hanging.
  void AwaitOverrideOn(int i, const std::string& key, const std::string& override) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (true) {
      auto r = clients_[i]->Consume(MakeRequest("api", key));
      ASSERT_OK(r);
      if (r->results(0).override() == override) return;
      ASSERT_LT(absl::Now(), give_up) << "server " << i << " never applied '" << override << "'";
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  TempDir dir_;
  // In 2100: the states' expiry (PXAT at full_at, by Redis's own clock) is never reached.
  FakeClock clock_{int64_t{4102444800} * testing::kSecond};
  testing::RedisTestTarget target_;
  std::unique_ptr<RateLimitServer> servers_[2];
  std::unique_ptr<RateLimitClient> clients_[2];
};

TEST_F(OverrideReplicasTest, AnOverrideSetOnOneServerDecidesOnTheOtherUnderLoad) {
  // The load: callers on server B, each on its own client, consuming customer-42's tokens.
  constexpr int kCallers = 4;
  std::atomic<bool> stop{false};
  std::vector<LoadLog> logs(kCallers);
  std::vector<std::thread> callers;
  std::atomic<int> decisions{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      auto client = RateLimitClient::Connect("127.0.0.1:" + std::to_string(servers_[1]->port()),
                                             ClientOptions{absl::Seconds(10), kToken});
      LoadLog& log = logs[c];
      while (!stop.load()) {
        auto r = client->Consume(MakeRequest("api", "customer-42"));
        decisions.fetch_add(1);
        if (!r.ok()) {
          ++log.errors;
          continue;
        }
        const bool under = r->results(0).override() == "customer-42";
        if (under) {
          log.seen_override = true;
          if (!r->allowed()) ++log.fell_back;  // unlimited allows everything
        } else if (log.seen_override) {
          ++log.fell_back;
        } else if (r->allowed()) {
          ++log.allowed_without_override;
        }
      }
    });
  }
  // Let the load drain the key under the configured limit first.
  while (decisions.load() < 50) absl::SleepFor(absl::Milliseconds(1));

  v1::SetOverrideRequest set;
  set.mutable_override()->mutable_target()->set_name("api");
  set.mutable_override()->mutable_target()->set_key("customer-42");
  set.mutable_override()->set_unlimited(true);
  set.mutable_override()->set_reason("incident 811");
  set.set_actor("alice");
  ASSERT_OK(clients_[0]->SetOverride(set));
  // Server A reloads at once: its next decision is under the override.
  auto on_a = clients_[0]->Consume(MakeRequest("api", "customer-42", 100));
  ASSERT_OK(on_a);
  EXPECT_TRUE(on_a->allowed());
  EXPECT_EQ(on_a->results(0).override(), "customer-42");

  // Server B, once its refresher ran: unlimited, named in the decision.
  AwaitOverrideOn(1, "customer-42", "customer-42");
  auto on_b = clients_[1]->Consume(MakeRequest("api", "customer-42", 100));
  ASSERT_OK(on_b);
  EXPECT_TRUE(on_b->allowed());
  EXPECT_EQ(on_b->results(0).override(), "customer-42");
  EXPECT_EQ(on_b->results(0).reason(), v1::DENY_REASON_UNSPECIFIED);
  // Another key of the limit is not overridden.
  auto other = clients_[1]->Consume(MakeRequest("api", "customer-7"));
  ASSERT_OK(other);
  EXPECT_EQ(other->results(0).override(), "");

  // Every caller of the load reaches the override too (B applies it to every decision).
  const auto all_seen = [&] {
    for (const LoadLog& log : logs) {
      if (!log.seen_override.load()) return false;
    }
    return true;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!all_seen() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  stop.store(true);
  for (std::thread& t : callers) t.join();
  int allowed_without_override = 0;
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(logs[c].errors, 0) << "caller " << c;
    EXPECT_TRUE(logs[c].seen_override.load()) << "caller " << c;
    EXPECT_EQ(logs[c].fell_back, 0) << "caller " << c;
    allowed_without_override += logs[c].allowed_without_override;
  }
  // Both servers decide on the one state in Redis: the configured 5 tokens were granted once.
  EXPECT_LE(allowed_without_override, 5);

  // Deleted through A: B goes back to the configured limit (the key is drained: denied).
  v1::DeleteOverrideRequest del;
  del.mutable_target()->set_name("api");
  del.mutable_target()->set_key("customer-42");
  del.set_reason("incident over");
  ASSERT_OK(clients_[0]->DeleteOverride(del));
  AwaitOverrideOn(1, "customer-42", "");
  auto after = clients_[1]->Consume(MakeRequest("api", "customer-42"));
  ASSERT_OK(after);
  EXPECT_FALSE(after->allowed());
  EXPECT_EQ(after->results(0).override(), "");

  // Both servers read one audit history.
  auto audit = clients_[1]->ListOverrideAudit(v1::ListOverrideAuditRequest());
  ASSERT_OK(audit);
  ASSERT_EQ(audit->entries_size(), 2);
  EXPECT_EQ(audit->entries(0).action(), "delete");
  EXPECT_EQ(audit->entries(1).action(), "set");
}

}  // namespace
}  // namespace ratelimit
