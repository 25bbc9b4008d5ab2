#ifndef RATELIMIT_TESTS_SERVER_ENVOY_XDS_FAKE_ADS_SERVER_H_
#define RATELIMIT_TESTS_SERVER_ENVOY_XDS_FAKE_ADS_SERVER_H_

// A small xDS management server for tests: a real AggregatedDiscoveryService (state of the
// world) on 127.0.0.1 that sends the responses the test pushes, one at a time, and records every
// request it receives (the first of each stream, then the ACK or NACK of each response).

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "server/envoy/xds/xds_convert.h"

namespace ratelimit::testing {

namespace discovery = ::envoy::service::discovery::v3;
namespace rlsconf = ::ratelimit::config::ratelimit::v3;

// Thread safety: thread-safe; the streams are served on gRPC's threads.
class FakeAdsServer final : public discovery::AggregatedDiscoveryService::Service {
 public:
  // Listens on 127.0.0.1:`port` (0: any free port). Null when it cannot listen.
  static std::unique_ptr<FakeAdsServer> Start(
      int port,
      std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials()) {
    std::unique_ptr<FakeAdsServer> s(new FakeAdsServer());
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), credentials, &s->port_);
    builder.RegisterService(s.get());
    s->server_ = builder.BuildAndStart();
    if (!s->server_ || s->port_ == 0) return nullptr;
    return s;
  }
  ~FakeAdsServer() override { Stop(); }

  int port() const { return port_; }

  // Queues a response: sent on the open stream once it has received the answer to the previous
  // one (or on the next stream). Returns its nonce.
  std::string Push(discovery::DiscoveryResponse response) {
    absl::MutexLock lock(&mu_);
    const std::string nonce = absl::StrCat("n", ++nonces_);
    response.set_nonce(nonce);
    outbox_.push_back(std::move(response));
    return nonce;
  }
  // A response of RateLimitConfig resources.
  std::string Push(const std::string& version,
                   const std::vector<rlsconf::RateLimitConfig>& configs) {
    discovery::DiscoveryResponse response;
    response.set_version_info(version);
    response.set_type_url(kRateLimitConfigTypeUrl);
    for (const rlsconf::RateLimitConfig& c : configs) response.add_resources()->PackFrom(c);
    return Push(std::move(response));
  }

  // The `index`-th request received (0: the first stream's first request), waiting for it up to
  // `timeout`; nullopt when it did not come.
  std::optional<discovery::DiscoveryRequest> Request(size_t index,
                                                     absl::Duration timeout = absl::Seconds(30)) {
    absl::MutexLock lock(&mu_);
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.size() > index; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout)) return std::nullopt;
    return requests_[index];
  }

  // Ends every stream and stops listening. Idempotent.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  grpc::Status StreamAggregatedResources(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<discovery::DiscoveryResponse, discovery::DiscoveryRequest>* stream)
      override {
    discovery::DiscoveryRequest request;
    if (!stream->Read(&request)) return grpc::Status::OK;
    Record(request);
    while (true) {
      discovery::DiscoveryResponse response;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !outbox_.empty() || context->IsCancelled();
        };
        // A cancelled call does not signal the mutex: look again now and then.
        while (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(20))) {
        }
        if (stopping_ || context->IsCancelled()) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "management server stopping");
        }
        response = outbox_.front();
        outbox_.pop_front();
      }
      if (!stream->Write(response) || !stream->Read(&request)) return grpc::Status::OK;
      Record(request);
    }
  }

 private:
  FakeAdsServer() = default;

  void Record(const discovery::DiscoveryRequest& request) {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int nonces_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<discovery::DiscoveryResponse> outbox_ ABSL_GUARDED_BY(mu_);
  std::vector<discovery::DiscoveryRequest> requests_ ABSL_GUARDED_BY(mu_);
};

// A RateLimitConfig of one domain with one rule: `key` (any value) limited to
// `requests_per_unit` per hour.
inline rlsconf::RateLimitConfig OneRule(const std::string& name, const std::string& domain,
                                        const std::string& key, uint32_t requests_per_unit) {
  rlsconf::RateLimitConfig c;
  c.set_name(name);
  c.set_domain(domain);
  rlsconf::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key(key);
  d->mutable_rate_limit()->set_unit(rlsconf::HOUR);
  d->mutable_rate_limit()->set_requests_per_unit(requests_per_unit);
  return c;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SERVER_ENVOY_XDS_FAKE_ADS_SERVER_H_
