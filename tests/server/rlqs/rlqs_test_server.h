#ifndef RATELIMIT_TESTS_SERVER_RLQS_RLQS_TEST_SERVER_H_
#define RATELIMIT_TESTS_SERVER_RLQS_RLQS_TEST_SERVER_H_

// An RlqsService on a real gRPC server (127.0.0.1, port 0) with a fake clock and a
// configuration the test swaps, for the RLQS tests.

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/rlqs/rlqs_service.h"
#include "tests/support/test_support.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit::testing {

namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

class RlqsTestServer {
 public:
  // `clock`: a clock shared with other servers (replicas of one fleet); null: its own.
  explicit RlqsTestServer(RlqsServiceOptions options = {}, FakeClock* clock = nullptr)
      : clock_(clock != nullptr ? *clock : own_clock_) {
    service_ = std::make_unique<RlqsService>(options, clock_, [this](absl::string_view domain) {
      absl::MutexLock lock(&mu_);
      return domain == "edge" ? config_ : nullptr;
    });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
  }
  ~RlqsTestServer() { Stop(); }

  void Stop() {
    if (!server_) return;
    service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_.reset();
  }

  // A crash as the Envoys see it: every stream breaks at once, no time to live of 0 is sent,
  // and nothing of this replica answers any more (its board record goes stale).
  void Kill() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  bool alive() const { return server_ != nullptr; }

  // Sets the `quota_buckets` of domain "edge".
  void SetConfig(const std::string& yaml) {
    absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> c =
        ParseRlqsQuotaBuckets(YAML::Load(yaml), "edge.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
    absl::MutexLock lock(&mu_);
    config_ = *c;
  }

  std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> NewStub() const {
    return rlqs_v3::RateLimitQuotaService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }

  int port() const { return port_; }
  RlqsService& service() { return *service_; }
  FakeClock& clock() { return clock_; }

 private:
  FakeClock own_clock_;
  FakeClock& clock_;
  absl::Mutex mu_;
  std::shared_ptr<const RlqsDomainConfig> config_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RlqsService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// One usage message of one bucket.
inline rlqs_v3::RateLimitQuotaUsageReports Usage(
    const std::string& domain, std::initializer_list<std::pair<std::string, std::string>> bucket,
    uint64_t allowed, uint64_t denied, int64_t elapsed_seconds) {
  rlqs_v3::RateLimitQuotaUsageReports m;
  m.set_domain(domain);
  auto* u = m.add_bucket_quota_usages();
  for (const auto& [k, v] : bucket) (*u->mutable_bucket_id()->mutable_bucket())[k] = v;
  u->mutable_time_elapsed()->set_seconds(elapsed_seconds);
  u->set_num_requests_allowed(allowed);
  u->set_num_requests_denied(denied);
  return m;
}

// The tokens_per_fill of a response's first action's token bucket.
inline uint64_t FirstTokensPerFill(const rlqs_v3::RateLimitQuotaResponse& r) {
  return r.bucket_action(0)
      .quota_assignment_action()
      .rate_limit_strategy()
      .token_bucket()
      .tokens_per_fill()
      .value();
}

// One RLQS stream to a server, as an Envoy holds it.
struct RlqsTestClient {
  using Stream = grpc::ClientReaderWriter<rlqs_v3::RateLimitQuotaUsageReports,
                                          rlqs_v3::RateLimitQuotaResponse>;
  std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;

  explicit RlqsTestClient(RlqsTestServer& server) : RlqsTestClient(server.NewStub()) {}
  explicit RlqsTestClient(std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> s)
      : stub(std::move(s)) {
    stream = stub->StreamRateLimitQuotas(&context);
  }
  rlqs_v3::RateLimitQuotaResponse Read() {
    rlqs_v3::RateLimitQuotaResponse r;
    EXPECT_TRUE(stream->Read(&r));
    return r;
  }
  grpc::Status End() {
    rlqs_v3::RateLimitQuotaResponse r;
    while (stream->Read(&r)) {
    }
    return stream->Finish();
  }
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SERVER_RLQS_RLQS_TEST_SERVER_H_
