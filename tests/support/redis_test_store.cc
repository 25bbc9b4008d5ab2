#include "tests/support/redis_test_store.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/support/redis_process.h"
#include "tests/support/redis_standalone.h"

namespace ratelimit::testing {
namespace {

absl::StatusOr<std::shared_ptr<RedisCluster>> SharedCluster() {
  static absl::Mutex mu(absl::kConstInit);
  static std::shared_ptr<RedisCluster>* cluster = nullptr;
  absl::MutexLock l(&mu);
  if (cluster == nullptr) {
    absl::StatusOr<std::unique_ptr<RedisCluster>> started = RedisCluster::Start(3, 0);
    if (!started.ok()) return started.status();
    if (absl::Status s = (*started)->WaitHealthy(); !s.ok()) return s;
    // Destroyed at exit, which stops the servers.
    static std::shared_ptr<RedisCluster> kept(*std::move(started));
    cluster = &kept;
  }
  return *cluster;
}

std::string FreshPrefix() {
  static std::atomic<int> next{0};
  return absl::StrCat("t", getpid(), "-", next.fetch_add(1), ":");
}

}  // namespace

absl::StatusOr<RedisTestTarget> StartRedisTestTarget(RedisTopology topology) {
  if (!RedisServerInstalled()) {
    return absl::FailedPreconditionError("redis-server is required (scripts/setup.sh installs it)");
  }
  if (topology == RedisTopology::kStandalone) {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    if (!server.ok()) return server.status();
    const std::string seeds = (*server)->address();
    return RedisTestTarget{seeds, FreshPrefix(), std::shared_ptr<RedisServer>(*std::move(server))};
  }
  absl::StatusOr<std::shared_ptr<RedisCluster>> cluster = SharedCluster();
  if (!cluster.ok()) return cluster.status();
  return RedisTestTarget{(*cluster)->seeds(), FreshPrefix(), *cluster};
}

absl::StatusOr<std::unique_ptr<RedisStateStore>> OpenRedisTestStore(const RedisTestTarget& target,
                                                                    const Clock* clock_override) {
  RedisStateStoreOptions o;
  o.clock_override = clock_override;
  return OpenRedisTestStore(target, std::move(o));
}

absl::StatusOr<std::unique_ptr<RedisStateStore>> OpenRedisTestStore(
    const RedisTestTarget& target, RedisStateStoreOptions options) {
  redis::RedisClusterClient::Options co;
  co.seeds = target.seeds;
  co.command_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<redis::RedisClusterClient>> client =
      redis::RedisClusterClient::Connect(co);
  if (!client.ok()) return client.status();
  options.key_prefix = target.key_prefix;
  return RedisStateStore::Open(*std::move(client), std::move(options));
}

}  // namespace ratelimit::testing
