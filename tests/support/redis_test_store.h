#ifndef RATELIMIT_TESTS_SUPPORT_REDIS_TEST_STORE_H_
#define RATELIMIT_TESTS_SUPPORT_REDIS_TEST_STORE_H_

// RedisStateStores for tests, over the production client (RedisClusterClient), on a standalone
// redis-server or on a Redis Cluster.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "storage/clock.h"
#include "storage/redis/redis_state_store.h"

namespace ratelimit::testing {

enum class RedisTopology { kStandalone, kCluster };

// Where a test's states live: the seeds, and a key prefix no other store of the process uses.
struct RedisTestTarget {
  std::string seeds;
  std::string key_prefix;
  std::shared_ptr<void> servers;  // keeps the redis-server processes alive
};

// kStandalone: a new redis-server. kCluster: a 3-primary cluster (no replicas) started on first
// use and shared by every caller in this process (stopped at exit); each target has its own
// prefix, so tests never see each other's states. FAILED_PRECONDITION when redis-server is not
// installed.
absl::StatusOr<RedisTestTarget> StartRedisTestTarget(RedisTopology topology);

// A store on `target` (a new client each time: reopening sees the same states).
// `clock_override`: see RedisStateStoreOptions; not owned, may be null.
absl::StatusOr<std::unique_ptr<RedisStateStore>> OpenRedisTestStore(const RedisTestTarget& target,
                                                                    const Clock* clock_override);
// The same with every other option as given (its key_prefix is the target's).
absl::StatusOr<std::unique_ptr<RedisStateStore>> OpenRedisTestStore(const RedisTestTarget& target,
                                                                    RedisStateStoreOptions options);

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_REDIS_TEST_STORE_H_
