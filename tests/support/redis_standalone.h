#ifndef RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_
#define RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_

// A standalone redis-server for tests, and a synchronous hiredis connection to it.

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/redis/redis_command_runner.h"
#include "tests/support/redis_process.h"

struct redisContext;

namespace ratelimit::testing {

// Whether `redis-server` is on the PATH.
bool RedisServerInstalled();

// A synchronous RedisCommandRunner over hiredis. Thread-safe: commands are serialized (a test
// helper may hold its lock across the round trip; production clients must not).
class HiredisConnection final : public RedisCommandRunner {
 public:
  // Connects to host:port with a 5 s timeout; UNAVAILABLE naming the address when it cannot.
  static absl::StatusOr<std::unique_ptr<HiredisConnection>> Connect(const std::string& host,
                                                                    int port);
  ~HiredisConnection() override;
  HiredisConnection(const HiredisConnection&) = delete;
  HiredisConnection& operator=(const HiredisConnection&) = delete;

  absl::StatusOr<redis::Reply> Command(absl::Span<const std::string> argv) override;

 private:
  explicit HiredisConnection(redisContext* context) : context_(context) {}
  absl::Mutex mu_;
  redisContext* const context_ ABSL_PT_GUARDED_BY(mu_);
};

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
