// The serving loop (server/serving_loop.h): Consume calls that arrived together are decided with
// one store call, each as if decided alone; its threads' name and scheduling; and the health
// service served on the loop (server/health_service.h): Check, Watch, and a shutdown that ends
// the Watch streams.
#include "server/serving/serving_loop.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/admin/admin_auth.h"
#include "server/admin/health_service.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/envoy/envoy_service.h"
#include "server/observability/telemetry.h"
#include "server/v1/limit_registry.h"
#include "server/v1/rate_limit_service.h"
#include "storage/limiter.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/forwarding_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

namespace hv1 = grpc::health::v1;
namespace rls = ::envoy::service::ratelimit::v3;

// The in-memory store, counting how the service reaches it.
class CountingStore final : public testing::ForwardingStore {
 public:
  int batches() const { return batches_; }
  int batched_operations() const { return batched_operations_; }
  int single_operations() const { return single_operations_; }

  absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock) override {
    ++single_operations_;
    return ForwardingStore::Apply(op, clock);
  }
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override {
    ++single_operations_;
    ForwardingStore::ApplyAsync(op, clock, std::move(done));
  }
  std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                  const Clock& clock) override {
    ++batches_;
    batched_operations_ += static_cast<int>(ops.size());
    return ForwardingStore::ApplyBatch(ops, clock);
  }

 private:
  // Called from the test's thread only.
  int batches_ = 0;
  int batched_operations_ = 0;
  int single_operations_ = 0;
};

v1::RateLimitRequest ConsumeOne(const std::string& key) {
  v1::RateLimitRequest request;
  v1::LimitRequest* limit = request.add_limits();
  limit->set_name("burst");
  limit->set_key(key);
  limit->set_count(1);
  v1::LimitConfig* config = limit->mutable_config();
  config->set_kind(v1::TOKEN_BUCKET);
  config->set_capacity(5);
  config->set_rate(1);
  config->mutable_period()->set_seconds(60);
  return request;
}

// Installs in `registry` one Envoy domain, "edge", allowing each "user" `per_minute` requests.
void LimitUsersPerMinute(int per_minute, EnvoyConfigRegistry& registry) {
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfig({EnvoyConfigFile{
      "edge.yaml", absl::StrCat("domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n"
                                "      unit: minute\n      requests_per_unit: ",
                                per_minute, "\n")}});
  ASSERT_TRUE(config.ok()) << config.status();
  registry.Replace(std::make_shared<const EnvoyConfig>(*std::move(config)));
}

// The v1 service on a store of type `Store`, with a fake clock and no trace exporter.
template <typename Store>
struct V1ServiceOn {
  Store store;
  testing::FakeClock clock;
  Limiter limiter{store, clock};
  DecisionScheduler scheduler{limiter, nullptr};
  LimitRegistry registry;
  AdminAuthenticator admin{""};
  Telemetry telemetry{nullptr, nullptr, false, "memory"};
  RateLimitServiceImpl service{scheduler, registry, admin, FailurePolicy::kClosed, telemetry};
};

// The Envoy service on a store of type `Store`, likewise; its registry starts empty.
template <typename Store>
struct EnvoyServiceOn {
  Store store;
  testing::FakeClock clock;
  Limiter limiter{store, clock};
  DecisionScheduler scheduler{limiter, nullptr};
  EnvoyConfigRegistry registry;
  Telemetry telemetry{nullptr, nullptr, false, "memory"};
  EnvoyRateLimitServiceImpl service{scheduler, clock, registry, EnvoyServiceOptions{}, telemetry};
};

// A service's half of the loop, driven by hand: the test takes exactly the calls it sent into one
// burst, so what the burst decides does not depend on timing.
class BurstHarness {
 public:
  BurstHarness(grpc::Service& service, ServingLoop::Handler& handler) : handler_(handler) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service);
    loop_ = std::make_unique<ServingLoop>(1, builder);  // never started: takes finished calls
    cq_ = builder.AddCompletionQueue();
    server_ = builder.BuildAndStart();
  }
  ~BurstHarness() {
    server_->Shutdown();
    cq_->Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) static_cast<LoopEvent*>(tag)->OnEvent(ok, *loop_, cq_.get());
    loop_->Stop();
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

  // Requests `n` calls of `method`, for TakeBurst.
  void Request(int method, int n) {
    for (int i = 0; i < n; ++i) handler_.RequestCall(new LoopCall(0, method), cq_.get());
  }
  // Hands the next `n` calls to the handler as one burst and ends it: nothing is decided before
  // the end, then all `n` with one store call.
  void DecideOneBurst(int n, const CountingStore& store) {
    std::unique_ptr<ServingLoop::Burst> burst = handler_.NewBurst();
    ASSERT_NE(burst, nullptr);
    Take(n, *burst);
    EXPECT_EQ(store.batches(), 0) << "decided before the burst ended";
    handler_.EndBurst(*burst);
    EXPECT_EQ(store.batches(), 1);
    EXPECT_EQ(store.batched_operations(), n);
    EXPECT_EQ(store.single_operations(), 0);
  }

 private:
  // Hands the next `n` calls to the handler as one burst, without ending it.
  void Take(int n, ServingLoop::Burst& burst) {
    for (int arrived = 0; arrived < n; ++arrived) {
      void* tag = nullptr;
      bool ok = false;
      ASSERT_TRUE(cq_->Next(&tag, &ok));
      ASSERT_TRUE(ok);
      handler_.OnCall(static_cast<LoopCall*>(static_cast<LoopEvent*>(tag)), &burst);
    }
  }

  ServingLoop::Handler& handler_;
  int port_ = 0;
  std::unique_ptr<ServingLoop> loop_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
};

// Unary calls started on `cq`, for the replies of a burst.
template <typename Response>
struct ClientCall {
  grpc::ClientContext context;
  Response response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> rpc;
};
template <typename Response>
void AwaitReplies(grpc::CompletionQueue& cq, int n) {
  for (int i = 0; i < n; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    auto* call = static_cast<ClientCall<Response>*>(tag);
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
  }
  cq.Shutdown();
}

TEST(ServingBurstTest, ConsumesOfOneBurstAreDecidedWithOneStoreCallEachAsIfAlone) {
  V1ServiceOn<CountingStore> fixture;
  CountingStore& store = fixture.store;
  RateLimitServiceImpl& service = fixture.service;
  BurstHarness harness(service, service);

  constexpr int kCalls = 8;  // capacity 5: five allowed, three denied
  harness.Request(RateLimitServiceImpl::kConsumeMethod, kCalls);
  auto stub = v1::RateLimitService::NewStub(
      grpc::CreateChannel(harness.target(), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue client_cq;
  std::vector<ClientCall<v1::RateLimitResponse>> calls(kCalls);
  for (auto& call : calls) {
    call.rpc = stub->AsyncConsume(&call.context, ConsumeOne("k"), &client_cq);
    call.rpc->Finish(&call.response, &call.status, &call);
  }

  harness.DecideOneBurst(kCalls, store);

  AwaitReplies<v1::RateLimitResponse>(client_cq, kCalls);
  int allowed = 0;
  for (const auto& call : calls) allowed += call.response.allowed() ? 1 : 0;
  EXPECT_EQ(allowed, 5);
  absl::StatusOr<std::optional<State>> state =
      store.Get(StateKey{"burst", "k", LimitSource::kInline});
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(state->has_value());
  EXPECT_DOUBLE_EQ((*state)->value, 0);
}

TEST(ServingBurstTest, ShouldRateLimitsOfOneBurstAreDecidedWithOneStoreCallEachAsIfAlone) {
  EnvoyServiceOn<CountingStore> fixture;
  ASSERT_NO_FATAL_FAILURE(LimitUsersPerMinute(5, fixture.registry));
  CountingStore& store = fixture.store;
  EnvoyRateLimitServiceImpl& service = fixture.service;
  BurstHarness harness(service, service);

  constexpr int kCalls = 8;  // five allowed, three over the limit
  harness.Request(EnvoyRateLimitServiceImpl::kShouldRateLimitMethod, kCalls);
  auto stub = rls::RateLimitService::NewStub(
      grpc::CreateChannel(harness.target(), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue client_cq;
  std::vector<ClientCall<rls::RateLimitResponse>> calls(kCalls);
  for (auto& call : calls) {
    call.rpc = stub->AsyncShouldRateLimit(
        &call.context, testing::EnvoyRequest("edge", {{{{"user", "u"}}}}), &client_cq);
    call.rpc->Finish(&call.response, &call.status, &call);
  }

  harness.DecideOneBurst(kCalls, store);

  AwaitReplies<rls::RateLimitResponse>(client_cq, kCalls);
  int ok = 0;
  for (const auto& call : calls) ok += call.response.overall_code() == rls::RateLimitResponse::OK;
  EXPECT_EQ(ok, 5);
}

// Serves health checks, noting the scheduling policy and the name of the thread that handled the
// last call.
class ThreadNotingHandler final : public ServingLoop::Handler {
 public:
  explicit ThreadNotingHandler(LoopHealthService& health) : health_(health) {}
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override {
    health_.RequestCall(call, cq);
  }
  void OnCall(LoopCall* call, ServingLoop::Burst* burst) override {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    {
      absl::MutexLock l(&mu_);
      policy_ = sched_getscheduler(0);
      name_ = name;
    }
    health_.OnCall(call, burst);
  }
  int policy() const {
    absl::MutexLock l(&mu_);
    return policy_;
  }
  std::string name() const {
    absl::MutexLock l(&mu_);
    return name_;
  }

 private:
  LoopHealthService& health_;
  mutable absl::Mutex mu_;
  int policy_ ABSL_GUARDED_BY(mu_) = -1;
  std::string name_ ABSL_GUARDED_BY(mu_);
};

// A server on port 0 whose loop (one thread, scheduled as `scheduling`) serves `handler`'s
// `methods` of `service`, and `streams` when given.
class StartedLoop {
 public:
  StartedLoop(grpc::Service& service, ServingLoop::Handler& handler, std::vector<int> methods,
              WorkerScheduling scheduling = WorkerScheduling::kDefault,
              ServingLoop::StreamService* streams = nullptr) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service);
    loop_ = std::make_unique<ServingLoop>(1, builder, scheduling);
    loop_->AddUnary(handler, std::move(methods), 2);
    if (streams != nullptr) loop_->AddStreams(*streams);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    loop_->Start();
  }
  ~StartedLoop() { Stop(); }
  // Shuts the server down, then the loop (its threads joined).
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
    loop_->Stop();
  }
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                               grpc::InsecureChannelCredentials());
  }
  ServingLoop& loop() { return *loop_; }

 private:
  int port_ = 0;
  std::unique_ptr<ServingLoop> loop_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
};

// Serves one health Check on a loop scheduled as `scheduling`; returns the handler's notes.
void ServeOneCheck(WorkerScheduling scheduling, int* policy, std::string* name) {
  LoopHealthService health;
  ThreadNotingHandler handler(health);
  StartedLoop started(health, handler, {LoopHealthService::kCheckMethod}, scheduling);
  auto stub = hv1::Health::NewStub(started.Channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  hv1::HealthCheckResponse response;
  EXPECT_TRUE(stub->Check(&context, hv1::HealthCheckRequest(), &response).ok());
  started.Stop();
  *policy = handler.policy();
  *name = handler.name();
}

TEST(ServingLoopThreadsTest, BatchSchedulingRunsTheHandlersUnderSchedBatch) {
  int policy = -1;
  std::string name;
  ServeOneCheck(WorkerScheduling::kBatch, &policy, &name);
  EXPECT_EQ(policy, SCHED_BATCH);
  EXPECT_EQ(name, "rl-serving");
}

TEST(ServingLoopThreadsTest, DefaultSchedulingKeepsTheProcessPolicy) {
  int policy = -1;
  std::string name;
  ServeOneCheck(WorkerScheduling::kDefault, &policy, &name);
  EXPECT_EQ(policy, sched_getscheduler(0));
  EXPECT_NE(policy, SCHED_BATCH);
  EXPECT_EQ(name, "rl-serving");
}

// The in-memory store answering ApplyAsync from a thread of its own, as a store that decides in a
// peer does (the Redis client answers on its I/O thread).
class StoreThreadStore final : public testing::ForwardingStore {
 public:
  ~StoreThreadStore() override {
    for (std::thread& t : threads_) t.join();
  }
  bool BatchesDecideLocally() const override { return false; }
  bool ApplyAsyncMayWait() const override { return false; }
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override {
    absl::StatusOr<Outcome> outcome = ForwardingStore::Apply(op, clock);
    absl::MutexLock l(&mu_);
    threads_.emplace_back([outcome = std::move(outcome), done = std::move(done)]() mutable {
      std::move(done)(std::move(outcome));
    });
  }

 private:
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

TEST(LoopInboxTest, ConsumesAnsweredOnAStoreThreadAreFinishedOnTheLoopThread) {
  V1ServiceOn<StoreThreadStore> fixture;
  RateLimitServiceImpl& service = fixture.service;
  StartedLoop started(service, service, RateLimitServiceImpl::TrafficMethods());
  auto stub = v1::RateLimitService::NewStub(started.Channel());

  for (int i = 0; i < 6; ++i) {  // capacity 5
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::RateLimitResponse response;
    ASSERT_TRUE(stub->Consume(&context, ConsumeOne("k"), &response).ok());
    EXPECT_EQ(response.allowed(), i < 5) << i;
  }
  // Each answer came from the store's thread and was handed back to the loop to be finished.
  EXPECT_EQ(started.loop().handoffs(), 6u);
}

TEST(LoopInboxTest, ShouldRateLimitsAnsweredOnAStoreThreadAreFinishedOnTheLoopThread) {
  EnvoyServiceOn<StoreThreadStore> fixture;
  ASSERT_NO_FATAL_FAILURE(LimitUsersPerMinute(2, fixture.registry));
  EnvoyRateLimitServiceImpl& service = fixture.service;
  StartedLoop started(service, service, {EnvoyRateLimitServiceImpl::kShouldRateLimitMethod});
  auto stub = rls::RateLimitService::NewStub(started.Channel());

  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    rls::RateLimitResponse response;
    ASSERT_TRUE(stub->ShouldRateLimit(&context, testing::EnvoyRequest("edge", {{{{"user", "u"}}}}),
                                      &response)
                    .ok());
    EXPECT_EQ(response.overall_code() == rls::RateLimitResponse::OK, i < 2) << i;
  }
  EXPECT_EQ(started.loop().handoffs(), 3u);
}

// Keeps the inbox of the loop thread that handled the last call (then serves it as the health
// service does).
class InboxNotingHandler final : public ServingLoop::Handler {
 public:
  explicit InboxNotingHandler(LoopHealthService& health) : health_(health) {}
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override {
    health_.RequestCall(call, cq);
  }
  void OnCall(LoopCall* call, ServingLoop::Burst* burst) override {
    inbox_.store(ServingLoop::ThreadInbox());
    health_.OnCall(call, burst);
  }
  LoopInbox* inbox() const { return inbox_.load(); }

 private:
  LoopHealthService& health_;
  std::atomic<LoopInbox*> inbox_{nullptr};
};

TEST(LoopInboxTest, PostsRunOnTheLoopThreadInOrderAndInlineOnceItStops) {
  LoopHealthService health;
  InboxNotingHandler handler(health);
  auto started = std::make_unique<StartedLoop>(health, handler,
                                               std::vector<int>{LoopHealthService::kCheckMethod});
  {
    auto stub = hv1::Health::NewStub(started->Channel());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    hv1::HealthCheckResponse response;
    ASSERT_TRUE(stub->Check(&context, hv1::HealthCheckRequest(), &response).ok());
  }
  LoopInbox* inbox = handler.inbox();
  ASSERT_NE(inbox, nullptr);
  EXPECT_EQ(ServingLoop::ThreadInbox(), nullptr);  // not a loop thread

  absl::Mutex mu;
  std::vector<int> order;
  std::vector<bool> on_loop;
  absl::Notification all_ran;
  constexpr int kPosts = 50;
  for (int i = 0; i < kPosts; ++i) {
    inbox->Post([&, i] {
      absl::MutexLock l(&mu);
      order.push_back(i);
      on_loop.push_back(ServingLoop::ThreadInbox() == inbox);
      if (i == kPosts - 1) all_ran.Notify();
    });
  }
  ASSERT_TRUE(all_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  {
    absl::MutexLock l(&mu);
    ASSERT_EQ(order.size(), static_cast<size_t>(kPosts));
    for (int i = 0; i < kPosts; ++i) {
      EXPECT_EQ(order[i], i);
      EXPECT_TRUE(on_loop[i]) << i;
    }
  }
  EXPECT_EQ(started->loop().handoffs(), static_cast<uint64_t>(kPosts));

  // Once the loop has stopped, a post runs on the posting thread, at once.
  started->Stop();
  bool ran_here = false;
  inbox->Post([&] { ran_here = ServingLoop::ThreadInbox() == nullptr; });
  EXPECT_TRUE(ran_here);
}

class LoopHealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    started_ = std::make_unique<StartedLoop>(health_, health_,
                                             std::vector<int>{LoopHealthService::kCheckMethod},
                                             WorkerScheduling::kDefault, &health_);
    stub_ = hv1::Health::NewStub(started_->Channel());
  }
  void TearDown() override { started_.reset(); }

  grpc::Status Check(const std::string& service, hv1::HealthCheckResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    hv1::HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, response);
  }

  struct Watch {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<hv1::HealthCheckResponse>> reader;
    // The next status sent, or UNKNOWN once the stream ended.
    hv1::HealthCheckResponse::ServingStatus Next() {
      hv1::HealthCheckResponse response;
      return reader->Read(&response) ? response.status() : hv1::HealthCheckResponse::UNKNOWN;
    }
  };
  std::unique_ptr<Watch> StartWatch(const std::string& service) {
    auto watch = std::make_unique<Watch>();
    watch->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    hv1::HealthCheckRequest request;
    request.set_service(service);
    watch->reader = stub_->Watch(&watch->context, request);
    return watch;
  }

  LoopHealthService health_;
  std::unique_ptr<StartedLoop> started_;
  std::unique_ptr<hv1::Health::Stub> stub_;
};

TEST_F(LoopHealthServiceTest, CheckAnswersKnownServicesAndNotFoundForOthers) {
  health_.SetServingStatus("svc", true);
  hv1::HealthCheckResponse response;
  ASSERT_TRUE(Check("svc", &response).ok());
  EXPECT_EQ(response.status(), hv1::HealthCheckResponse::SERVING);
  ASSERT_TRUE(Check("", &response).ok());  // the server as a whole
  EXPECT_EQ(response.status(), hv1::HealthCheckResponse::SERVING);

  health_.SetServingStatus(false);  // every service, the server as a whole included
  ASSERT_TRUE(Check("svc", &response).ok());
  EXPECT_EQ(response.status(), hv1::HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), hv1::HealthCheckResponse::NOT_SERVING);

  grpc::Status unknown = Check("nope", &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), ::testing::HasSubstr("nope"));
}

TEST_F(LoopHealthServiceTest, WatchSendsTheStatusThenEachChange) {
  health_.SetServingStatus("svc", true);
  std::unique_ptr<Watch> svc = StartWatch("svc");
  EXPECT_EQ(svc->Next(), hv1::HealthCheckResponse::SERVING);
  health_.SetServingStatus("svc", false);
  EXPECT_EQ(svc->Next(), hv1::HealthCheckResponse::NOT_SERVING);
  health_.SetServingStatus("svc", true);
  EXPECT_EQ(svc->Next(), hv1::HealthCheckResponse::SERVING);

  std::unique_ptr<Watch> later = StartWatch("later");
  EXPECT_EQ(later->Next(), hv1::HealthCheckResponse::SERVICE_UNKNOWN);
  health_.SetServingStatus("later", true);
  EXPECT_EQ(later->Next(), hv1::HealthCheckResponse::SERVING);

  svc->context.TryCancel();
  later->context.TryCancel();
}

TEST_F(LoopHealthServiceTest, ShutdownSendsNotServingAndEndsEveryWatch) {
  health_.SetServingStatus("svc", true);
  std::unique_ptr<Watch> watch = StartWatch("svc");
  EXPECT_EQ(watch->Next(), hv1::HealthCheckResponse::SERVING);
  health_.Shutdown();
  EXPECT_EQ(watch->Next(), hv1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(watch->Next(), hv1::HealthCheckResponse::UNKNOWN);  // the stream ended
  EXPECT_TRUE(watch->reader->Finish().ok());
  // Later updates are ignored: the service stays NOT_SERVING.
  health_.SetServingStatus("svc", true);
  hv1::HealthCheckResponse response;
  ASSERT_TRUE(Check("svc", &response).ok());
  EXPECT_EQ(response.status(), hv1::HealthCheckResponse::NOT_SERVING);
}

TEST_F(LoopHealthServiceTest, WatchesHaveEndedOnlyOnceTheServerHasShutDown) {
  std::unique_ptr<Watch> watch = StartWatch("");
  EXPECT_EQ(watch->Next(), hv1::HealthCheckResponse::SERVING);
  health_.Shutdown();
  EXPECT_EQ(watch->Next(), hv1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(watch->Next(), hv1::HealthCheckResponse::UNKNOWN);  // the stream ended
  // The next Watch is still requested, waiting for a client.
  EXPECT_FALSE(health_.AwaitWatchesEnded(absl::Now()));
  started_->Stop();
  EXPECT_TRUE(health_.AwaitWatchesEnded(absl::Now()));
}

}  // namespace
}  // namespace ratelimit
