// The C++ client's lease stream (client/cpp/lease_stream.h): against an in-process server, ops
// answer what their calls would, many threads share one stream without over-granting, an op's
// error is its call's; against fake servers, a stream that ends fails its waiting ops and the next
// op opens another, and a server without LeaseStream is sent unary calls.
#include "client/cpp/lease_stream.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;
using ::testing::HasSubstr;

constexpr int64_t kSecond = ::ratelimit::testing::kSecond;

constexpr char kLimits[] = R"(limits:
  - name: jobs
    kind: concurrency
    capacity: 4
    lease_ttl: 10s
)";

v1::AcquireRequest AcquireOf(const std::string& key) {
  v1::AcquireRequest r;
  v1::LimitRequest* l = r.add_limits();
  l->set_name("jobs");
  l->set_key(key);
  return r;
}

v1::ReleaseRequest ReleaseOf(const std::string& key, const std::string& id) {
  v1::ReleaseRequest r;
  r.set_name("jobs");
  r.set_key(key);
  r.set_lease_id(id);
  return r;
}

class LeaseStreamClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_.Set(1000 * kSecond);
    Start();
  }

  void Start() {
    ServerOptions options;
    options.store.lease_sweep_interval = absl::ZeroDuration();
    auto started = ::ratelimit::testing::StartServerAndClient(options, dir_, kLimits, clock_);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(LeaseStreamClientTest, OpsAnswerWhatTheirCallsWould) {
  LeaseStreamClient client(channel_, ClientOptions{absl::Seconds(10), ""});
  auto acquired = client.Acquire(AcquireOf("k"));
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  ASSERT_TRUE(acquired->allowed());
  v1::ExtendRequest extend;
  extend.set_name("jobs");
  extend.set_key("k");
  extend.set_lease_id(acquired->lease().id());
  auto extended = client.Extend(extend);
  ASSERT_TRUE(extended.ok()) << extended.status();
  EXPECT_EQ(extended->state(), v1::HELD);
  auto released = client.Release(ReleaseOf("k", acquired->lease().id()));
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->state(), v1::RELEASED);
  EXPECT_EQ(client.streams_opened(), 1);
  EXPECT_FALSE(client.unary_fallback());
}

TEST_F(LeaseStreamClientTest, ThreadsSharingTheStreamNeverHoldMoreThanTheCapacity) {
  LeaseStreamClient client(channel_, ClientOptions{absl::Seconds(10), ""});
  std::atomic<int> holding{0}, most{0}, acquired{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto a = client.Acquire(AcquireOf("k"));
        if (!a.ok()) {
          ++errors;
          return;
        }
        if (!a->allowed()) continue;
        ++acquired;
        const int now = ++holding;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        --holding;
        auto r = client.Release(ReleaseOf("k", a->lease().id()));
        if (!r.ok() || r->state() != v1::RELEASED) ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(most.load(), 4);
  EXPECT_GT(acquired.load(), 0);
  EXPECT_EQ(client.streams_opened(), 1);
}

TEST_F(LeaseStreamClientTest, AnOpsErrorIsItsCallsError) {
  LeaseStreamClient client(channel_, ClientOptions{absl::Seconds(10), ""});
  RateLimitClient unary(channel_, ClientOptions{absl::Seconds(10), ""});
  auto on_stream = client.Release(ReleaseOf("k", "zz"));
  auto as_call = unary.Release(ReleaseOf("k", "zz"));
  ASSERT_FALSE(on_stream.ok());
  EXPECT_EQ(on_stream.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(on_stream.status(), as_call.status());
  EXPECT_THAT(std::string(on_stream.status().message()), HasSubstr("lease_id"));
  // The stream went on.
  auto acquired = client.Acquire(AcquireOf("k"));
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  EXPECT_EQ(client.streams_opened(), 1);
}

// A server of the API from before LeaseStream: it serves Acquire only.
class AcquireOnlyService final : public v1::RateLimitService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Acquire(grpc::CallbackServerContext* context,
                                    const v1::AcquireRequest* request,
                                    v1::AcquireResponse* response) override {
    ++acquires;
    response->set_allowed(true);
    response->mutable_lease()->set_id("0123456789abcdef0123456789abcdef");
    response->mutable_lease()->set_key(request->limits(0).key());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  std::atomic<int> acquires{0};
};

// A server whose first LeaseStream ends with UNAVAILABLE at its first message, unanswered; later
// streams allow every acquire.
class EndsItsFirstStream final : public v1::RateLimitService::CallbackService {
 public:
  class Reactor final
      : public grpc::ServerBidiReactor<v1::LeaseStreamRequest, v1::LeaseStreamResponse> {
   public:
    explicit Reactor(bool end) : end_(end) { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      if (end_) return Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away"));
      response_.Clear();
      for (const v1::LeaseOp& op : request_.ops()) {
        v1::LeaseOpResult* r = response_.add_results();
        r->set_id(op.id());
        r->mutable_acquire()->set_allowed(true);
      }
      StartWrite(&response_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      StartRead(&request_);
    }
    void OnDone() override { delete this; }

   private:
    const bool end_;
    v1::LeaseStreamRequest request_;
    v1::LeaseStreamResponse response_;
  };

  grpc::ServerBidiReactor<v1::LeaseStreamRequest, v1::LeaseStreamResponse>* LeaseStream(
      grpc::CallbackServerContext* /*context*/) override {
    return new Reactor(++streams == 1);
  }
  std::atomic<int> streams{0};
};

// Serves `service` on 127.0.0.1:0; the port goes to `port`.
std::unique_ptr<grpc::Server> Serve(grpc::Service& service, int& port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  return builder.BuildAndStart();
}

std::shared_ptr<grpc::Channel> ChannelTo(int port) {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                             grpc::InsecureChannelCredentials());
}

TEST(LeaseStreamEndTest, AStreamThatEndsFailsItsOpsAndTheNextOpOpensAnother) {
  EndsItsFirstStream service;
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(service, port);
  ASSERT_NE(server, nullptr);
  LeaseStreamClient client(ChannelTo(port), ClientOptions{absl::Seconds(10), ""});
  auto refused = client.Acquire(AcquireOf("k"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("going away"));
  auto acquired = client.Acquire(AcquireOf("k"));
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  EXPECT_TRUE(acquired->allowed());
  EXPECT_EQ(client.streams_opened(), 2);
  EXPECT_EQ(service.streams.load(), 2);
  // The client's stream is still open: the shutdown cancels it rather than waiting for it.
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(LeaseStreamFallbackTest, AServerWithoutLeaseStreamIsSentCalls) {
  AcquireOnlyService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(service, port);
  ASSERT_NE(server, nullptr);
  LeaseStreamClient client(ChannelTo(port), ClientOptions{absl::Seconds(10), ""});
  auto first = client.Acquire(AcquireOf("k"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->lease().key(), "k");
  EXPECT_TRUE(client.unary_fallback());
  auto second = client.Acquire(AcquireOf("k"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(service.acquires.load(), 2);
  EXPECT_EQ(client.streams_opened(), 1);  // not tried again
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace ratelimit
