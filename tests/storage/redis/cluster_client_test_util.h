#ifndef RATELIMIT_TESTS_STORAGE_REDIS_CLUSTER_CLIENT_TEST_UTIL_H_
#define RATELIMIT_TESTS_STORAGE_REDIS_CLUSTER_CLIENT_TEST_UTIL_H_

// What the cluster client's tests (redis_cluster_client_test, redis_cluster_client_failures_test)
// share: a client connected or a failed expectation, an INCR's value, a 3-primary cluster with
// a replica each, and a loopback port nobody listens on.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "tests/support/redis_process.h"

namespace ratelimit::redis {

inline std::unique_ptr<RedisClusterClient> ConnectOrDie(const std::string& seeds,
                                                        RedisClusterClient::Options options = {}) {
  options.seeds = seeds;
  absl::StatusOr<std::unique_ptr<RedisClusterClient>> client = RedisClusterClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

inline int64_t IncrOrDie(RedisClusterClient& client, const std::string& key) {
  absl::StatusOr<Reply> r = client.ExecuteSync(key, {"INCR", key});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1;
  EXPECT_EQ(r->type, Reply::Type::kInteger) << r->DebugString();
  return r->integer;
}

inline std::unique_ptr<::ratelimit::testing::RedisCluster> StartCluster() {
  absl::StatusOr<std::unique_ptr<::ratelimit::testing::RedisCluster>> cluster =
      ::ratelimit::testing::RedisCluster::Start(3, 1);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// A loopback port with nothing listening on it.
inline int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace ratelimit::redis

#endif  // RATELIMIT_TESTS_STORAGE_REDIS_CLUSTER_CLIENT_TEST_UTIL_H_
