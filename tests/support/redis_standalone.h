#ifndef RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_
#define RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_

// A standalone redis-server for tests, and synchronous hiredis connections to it
// (HiredisConnection, redis_process.h).

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tests/support/redis_process.h"

namespace ratelimit::testing {

// Whether `redis-server` is on the PATH.
bool RedisServerInstalled();

// A standalone redis-server (a RedisServer: free loopback port, its own temporary directory,
// no persistence, stopped by pid on destruction) and hiredis connections to it.
class RedisStandalone {
 public:
  static absl::StatusOr<std::unique_ptr<RedisStandalone>> Start();
  RedisStandalone(const RedisStandalone&) = delete;
  RedisStandalone& operator=(const RedisStandalone&) = delete;

  int port() const { return server_->port(); }
  pid_t pid() const { return server_->pid(); }
  absl::StatusOr<std::unique_ptr<HiredisConnection>> Connect() const {
    return HiredisConnection::Connect("127.0.0.1", server_->port());
  }

 private:
  explicit RedisStandalone(std::unique_ptr<RedisServer> server) : server_(std::move(server)) {}
  std::unique_ptr<RedisServer> server_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_
