#ifndef RATELIMIT_TESTS_SUPPORT_CLIENT_SERVER_TEST_SUPPORT_H_
#define RATELIMIT_TESTS_SUPPORT_CLIENT_SERVER_TEST_SUPPORT_H_

// An in-process RateLimitServer on port 0 with a C++ client connected to it, for the tests of the
// service's RPCs. Targets that include this link ratelimit_server and ratelimit_client.

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

struct ServerAndClient {
  std::unique_ptr<RateLimitServer> server;
  std::unique_ptr<RateLimitClient> client;
};

// Writes `limits_yaml` to dir/limits.yaml, starts a server on 127.0.0.1:0 (gRPC, and the HTTP
// endpoint on port 0 too) with the limits file and, unless options.store.open.rocksdb.path was
// changed from its default, dir/`data_subdir` as its data directory; on `store` (null: the RocksDB
// store of data_dir) with `clock`; and connects a client with `client_options`.
inline absl::StatusOr<ServerAndClient> StartServerAndClient(
    ServerOptions options, const TempDir& dir, const std::string& limits_yaml, const Clock& clock,
    std::unique_ptr<StateStore> store = nullptr,
    ClientOptions client_options = ClientOptions{absl::Seconds(10), ""},
    const std::string& data_subdir = "data") {
  WriteFileAtomically(dir.File("limits.yaml"), limits_yaml);
  options.listen.address = "127.0.0.1:0";
  options.observability.metrics_listen = "127.0.0.1:0";
  if (options.store.open.rocksdb.path == ServerOptions{}.store.open.rocksdb.path)
    options.store.open.rocksdb.path = dir.File(data_subdir);
  options.limits.file = dir.File("limits.yaml");
  auto server = RateLimitServer::Start(options, clock, std::move(store));
  if (!server.ok()) return server.status();
  ServerAndClient started;
  started.server = *std::move(server);
  started.client = RateLimitClient::Connect("127.0.0.1:" + std::to_string(started.server->port()),
                                            std::move(client_options));
  return started;
}

// The balance of `name`/`key` as Check reports it; on a failed Check, the test fails and the
// answer is `on_error`.
inline double CheckedBalance(RateLimitClient& client, const std::string& name,
                             const std::string& key, double on_error = -1) {
  auto r = client.Check(MakeRequest(name, key));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->results(0).value() : on_error;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_CLIENT_SERVER_TEST_SUPPORT_H_
