// The executor the RPC handlers run their store transactions on (server/store_executor.h), and
// that the server, given store threads, keeps more decisions in flight than it has serving
// threads: a store that waits for a peer (as Redis does) no longer limits the server to one
// decision per serving thread.
#include "server/serving/store_executor.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;

// Callers that arrive() return true once `n` of them are inside at the same time, false when
// that does not happen within a generous deadline (so a test fails rather than hangs).
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  bool Arrive() {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    return mu_.AwaitWithTimeout(absl::Condition(this, &Rendezvous::AllArrived), absl::Seconds(20));
  }

 private:
  bool AllArrived() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ >= n_; }
  const int n_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(StoreExecutorTest, RunsAsManyTasksAtOnceAsItHasThreads) {
  constexpr int kThreads = 16;
  Rendezvous rendezvous(kThreads);
  std::atomic<int> met{0};
  {
    StoreExecutor executor(kThreads);
    for (int i = 0; i < kThreads; ++i) {
      executor.Run([&] {
        if (rendezvous.Arrive()) met.fetch_add(1);
      });
    }
  }  // the destructor waits for the tasks
  EXPECT_EQ(met.load(), kThreads);
}

TEST(StoreExecutorTest, DestructionRunsEveryQueuedTask) {
  std::atomic<int> ran{0};
  {
    StoreExecutor executor(1);
    for (int i = 0; i < 1000; ++i) executor.Run([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(StoreExecutorTest, WithoutThreadsRunsInlineOnTheCaller) {
  StoreExecutor executor(0);
  std::thread::id ran_on;
  executor.Run([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(executor.threads(), 0);
}

// The parts of a test store that the in-memory store does as usual.
class MemoryBackedStore : public StateStore {
 public:
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override { return inner_.Get(key); }
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override { return inner_.Delete(key); }
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override {
    return inner_.DeleteAll(source, name);
  }
  absl::StatusOr<std::string> Secret(absl::string_view name,
                                     absl::FunctionRef<std::string()> generate) override {
    return inner_.Secret(name, generate);
  }

 protected:
  MemoryStateStore inner_;
};

// A store whose transactions each wait until `n` of them are in flight at once: what a store
// that waits on a peer looks like to the server when n callers are waiting for it.
class RendezvousStore final : public MemoryBackedStore {
 public:
  explicit RendezvousStore(int n) : rendezvous_(n) {}
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override {
    if (!rendezvous_.Arrive()) return absl::UnavailableError("the transactions never overlapped");
    return inner_.Update(keys, decide);
  }
  absl::string_view backend_name() const override { return "rendezvous"; }

 private:
  Rendezvous rendezvous_;
};

// "api" at 1000 per second: never what limits how many decisions are in flight.
constexpr char kFastApiLimits[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 1000
    period: 1s
)";

TEST(StoreThreadsTest, TheServerKeepsMoreDecisionsInFlightThanGrpcHasCallbackThreads) {
  // gRPC runs callback handlers on a couple of threads here; 24 decisions that can only complete
  // together need the handlers to leave those threads while they wait for the store.
  constexpr int kCallers = 24;
  TempDir dir;
  FakeClock clock;
  ServerOptions options;
  options.store.threads = kCallers;
  auto started = StartServerAndClient(options, dir, kFastApiLimits, clock,
                                      std::make_unique<RendezvousStore>(kCallers),
                                      ClientOptions{absl::Seconds(60), ""});
  ASSERT_OK(started);
  const std::string target = "127.0.0.1:" + std::to_string(started->server->port());
  std::atomic<int> allowed{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(60), ""});
      auto r = client->Consume(MakeRequest("api", absl::StrCat("k", i)));
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok() && r->allowed()) allowed.fetch_add(1);
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(allowed.load(), kCallers);
}

// A store whose synchronous transactions (a Consume with a request_id; an Envoy plan with a
// shadow rule) wait until the test opens its gate, while its asynchronous path answers at once
// and says it never waits: a Redis store with one transaction stuck on a slow peer.
class GatedSyncStore final : public MemoryBackedStore {
 public:
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override {
    if (absl::Status s = AwaitGate(); !s.ok()) return s;
    return inner_.Update(keys, decide);
  }
  absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                 absl::Span<const RecordSpec> records, const Clock& clock,
                                 RecordDecideFn decide) override {
    if (absl::Status s = AwaitGate(); !s.ok()) return s;
    return inner_.UpdateWithRecords(keys, records, clock, decide);
  }
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override {
    std::move(done)(inner_.Apply(op, clock));
  }
  bool ApplyAsyncMayWait() const override { return false; }
  absl::string_view backend_name() const override { return "gated"; }

  absl::Notification waiting_;  // a synchronous transaction reached the gate
  absl::Notification gate_;

 private:
  absl::Status AwaitGate() {
    if (!waiting_.HasBeenNotified()) waiting_.Notify();
    if (!gate_.WaitForNotificationWithTimeout(absl::Seconds(60))) {
      return absl::UnavailableError("the gate never opened");
    }
    return absl::OkStatus();
  }
};

TEST(StoreThreadsTest, ACallThatNeverWaitsIsNotQueuedBehindOneThatDoes) {
  TempDir dir;
  FakeClock clock;
  ServerOptions options;
  options.store.threads = 1;  // one thread, taken by the stuck transaction
  auto owned = std::make_unique<GatedSyncStore>();
  GatedSyncStore& store = *owned;
  auto started = StartServerAndClient(options, dir, kFastApiLimits, clock, std::move(owned),
                                      ClientOptions{absl::Seconds(60), ""});
  ASSERT_OK(started);
  const std::string target = "127.0.0.1:" + std::to_string(started->server->port());
  std::thread stuck([&] {
    auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(60), ""});
    v1::RateLimitRequest request = MakeRequest("api", "a");
    request.set_request_id("stuck-1");
    auto r = client->Consume(request);
    EXPECT_TRUE(r.ok()) << r.status();
  });
  ASSERT_TRUE(store.waiting_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // The executor's only thread waits at the gate: a Consume without a request_id still answers,
  // on the thread that received it.
  auto quick = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(10), ""});
  auto r = quick->Consume(MakeRequest("api", "b"));
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    EXPECT_TRUE(r->allowed());
  }
  store.gate_.Notify();
  stuck.join();
}

TEST(StoreThreadsTest, AnEnvoyCallThatNeverWaitsIsNotQueuedBehindOneThatDoes) {
  TempDir dir;
  FakeClock clock;
  std::filesystem::create_directories(dir.File("envoy"));
  testing::WriteFileAtomically(dir.File("envoy/config.yaml"), R"(domain: web
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
)");
  ServerOptions options;
  options.store.threads = 1;  // one thread, taken by the stuck transaction
  options.limits.envoy_config_dir = dir.File("envoy");
  auto owned = std::make_unique<GatedSyncStore>();
  GatedSyncStore& store = *owned;
  auto started = StartServerAndClient(options, dir, kFastApiLimits, clock, std::move(owned));
  ASSERT_OK(started);
  const std::string target = "127.0.0.1:" + std::to_string(started->server->port());
  std::thread stuck([&] {
    // A shadow rule is decided by synchronous transactions: on the store thread.
    testing::EnvoyClient client(target);
    auto r = client.ShouldRateLimit(testing::EnvoyRequest("web", {{{{"trial", "t1"}}}}));
    EXPECT_TRUE(r.ok()) << r.status();
  });
  ASSERT_TRUE(store.waiting_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  testing::EnvoyClient quick(target);
  auto r = quick.ShouldRateLimit(testing::EnvoyRequest("web", {{{{"user", "u1"}}}}));
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    EXPECT_EQ(r->overall_code(), testing::rls::RateLimitResponse::OK);
  }
  store.gate_.Notify();
  stuck.join();
}

}  // namespace
}  // namespace ratelimit
