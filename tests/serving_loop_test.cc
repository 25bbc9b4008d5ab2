// The serving loop (server/serving_loop.h): Consume calls that arrived together are decided with
// one store call, each as if decided alone; and the health service served on the loop
// (server/health_service.h): Check, Watch, and a shutdown that ends the Watch streams.
#include "server/serving_loop.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/admin_auth.h"
#include "server/health_service.h"
#include "server/limit_registry.h"
#include "server/observability/telemetry.h"
#include "server/rate_limit_service.h"
#include "storage/limiter.h"
#include "tests/support/forwarding_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

namespace hv1 = grpc::health::v1;

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

// The service's half of the loop, driven by hand: the test takes exactly the calls it sent into
// one burst, so what the burst decides does not depend on timing.
TEST(ServingBurstTest, ConsumesOfOneBurstAreDecidedWithOneStoreCallEachAsIfAlone) {
  CountingStore store;
  testing::FakeClock clock;
  Limiter limiter(store, clock);
  LimitRegistry registry;
  AdminAuthenticator admin("");
  Telemetry telemetry(nullptr, nullptr, false, "memory");
  RateLimitServiceImpl service(limiter, registry, admin, FailurePolicy::kClosed, telemetry);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  ServingLoop loop(1, builder);  // never started: only to hand finished calls back
  std::unique_ptr<grpc::ServerCompletionQueue> cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  constexpr int kCalls = 8;  // capacity 5: five allowed, three denied
  for (int i = 0; i < kCalls; ++i) {
    service.RequestCall(new LoopCall(0, RateLimitServiceImpl::kConsumeMethod), cq.get());
  }
  auto stub = v1::RateLimitService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue client_cq;
  struct ClientCall {
    grpc::ClientContext context;
    v1::RateLimitResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RateLimitResponse>> rpc;
  };
  std::vector<ClientCall> calls(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    calls[i].rpc = stub->AsyncConsume(&calls[i].context, ConsumeOne("k"), &client_cq);
    calls[i].rpc->Finish(&calls[i].response, &calls[i].status, &calls[i]);
  }

  std::unique_ptr<ServingLoop::Burst> burst = service.NewBurst();
  for (int arrived = 0; arrived < kCalls; ++arrived) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq->Next(&tag, &ok));
    ASSERT_TRUE(ok);
    service.OnCall(static_cast<LoopCall*>(static_cast<LoopEvent*>(tag)), burst.get());
  }
  EXPECT_EQ(store.batches(), 0) << "decided before the burst ended";
  service.EndBurst(*burst);
  EXPECT_EQ(store.batches(), 1);
  EXPECT_EQ(store.batched_operations(), kCalls);
  EXPECT_EQ(store.single_operations(), 0);

  int allowed = 0;
  for (int i = 0; i < kCalls; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(client_cq.Next(&tag, &ok));
    auto* call = static_cast<ClientCall*>(tag);
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    if (call->response.allowed()) ++allowed;
  }
  EXPECT_EQ(allowed, 5);
  absl::StatusOr<std::optional<State>> state =
      store.Get(StateKey{"burst", "k", LimitSource::kInline});
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(state->has_value());
  EXPECT_DOUBLE_EQ((*state)->value, 0);

  server->Shutdown();
  cq->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) static_cast<LoopEvent*>(tag)->OnEvent(ok, loop, cq.get());
  loop.Stop();
  client_cq.Shutdown();
  while (client_cq.Next(&tag, &ok)) {
  }
}

class LoopHealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&health_);
    loop_ = std::make_unique<ServingLoop>(1, builder);
    loop_->AddUnary(health_, {LoopHealthService::kCheckMethod}, 2);
    loop_->AddStreams(health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    loop_->Start();
    stub_ = hv1::Health::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                     grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (loop_) loop_->Stop();
  }

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
  int port_ = 0;
  std::unique_ptr<ServingLoop> loop_;
  std::unique_ptr<grpc::Server> server_;
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

}  // namespace
}  // namespace ratelimit
