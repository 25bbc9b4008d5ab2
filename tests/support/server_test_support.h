#ifndef RATELIMIT_TESTS_SUPPORT_SERVER_TEST_SUPPORT_H_
#define RATELIMIT_TESTS_SUPPORT_SERVER_TEST_SUPPORT_H_

// Helpers for tests of an in-process RateLimitServer with its HTTP endpoint: a limits file, a
// fixture that starts the server on port 0, and the two ways of asking for its health. Targets
// that include this link ratelimit_server and PkgConfig::HTTPLIB.

#include <memory>
#include <string>
#include <utility>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/server.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

// "127.0.0.1:<port>" of `server`'s gRPC port.
inline std::string Target(const RateLimitServer& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

// grpc.health.v1 Check of `service` over `channel`; UNKNOWN when the call fails.
inline grpc::health::v1::HealthCheckResponse::ServingStatus GrpcHealth(
    const std::shared_ptr<grpc::Channel>& channel,
    const std::string& service = "ratelimit.v1.RateLimitService") {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  if (!stub->Check(&ctx, req, &resp).ok()) {
    return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }
  return resp.status();
}

// GET `path` from the HTTP endpoint on 127.0.0.1:`port`: (status, body), or (-1, "") when the
// request fails.
inline std::pair<int, std::string> HttpGet(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get(path);
  if (!res) return {-1, ""};
  return {res->status, res->body};
}

// Starts an in-process server on port 0 with its HTTP endpoint, the limits file kApiLimits in a
// fresh directory, a fake clock and a store probe every 10 ms.
class InProcessServerTest : public ::testing::Test {
 protected:
  // Starts the server with `options` (listen addresses, limits file and probe interval set
  // here) on `store` (null: the one options.store.open.rocksdb.path names).
  void StartServer(ServerOptions options, std::unique_ptr<StateStore> store) {
    WriteFileAtomically(dir_.File("limits.yaml"), kApiLimits);
    options.listen.address = "127.0.0.1:0";
    options.observability.metrics_listen = "127.0.0.1:0";
    options.limits.file = dir_.File("limits.yaml");
    options.store.health_probe_interval = absl::Milliseconds(10);
    auto server = RateLimitServer::Start(options, clock_, std::move(store));
    ASSERT_OK(server);
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(Target(*server_), grpc::InsecureChannelCredentials());
  }

  // GET `path` from the server's HTTP endpoint.
  std::pair<int, std::string> Http(const std::string& path) {
    return HttpGet(server_->metrics_port(), path);
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_SERVER_TEST_SUPPORT_H_
