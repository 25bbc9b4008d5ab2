#include "tests/support/redis_standalone.h"

#include <cstdlib>

namespace ratelimit::testing {

bool RedisServerInstalled() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

absl::StatusOr<std::unique_ptr<RedisStandalone>> RedisStandalone::Start() {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  if (!server.ok()) return server.status();
  return std::unique_ptr<RedisStandalone>(new RedisStandalone(*std::move(server)));
}

}  // namespace ratelimit::testing
