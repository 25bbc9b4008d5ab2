// The redis-server processes the Redis tests start: a server is only handed to a test once it is
// the one listening on its port.
#include "tests/support/redis_process.h"

#include <memory>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/support/redis_standalone.h"

namespace ratelimit::testing {
namespace {

// Two tests running at once can be handed the same free port. The one whose server loses the bind
// must learn so, not take the other's server (which answers its PING) for its own: two clusters
// formed over one node failed with "the node knows other nodes".
TEST(RedisServerTest, APortAnotherServerHoldsIsRefusedNotTakenForOurs) {
  ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
  absl::StatusOr<std::unique_ptr<RedisServer>> holder = RedisServer::Start();
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_EQ((*holder)->Cli({"SET", "owner", "holder"}).value_or(""), "OK");

  absl::StatusOr<std::unique_ptr<RedisServer>> second = RedisServer::StartOn((*holder)->port(), {});
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  EXPECT_EQ((*holder)->Cli({"GET", "owner"}).value_or(""), "holder");
}

}  // namespace
}  // namespace ratelimit::testing
