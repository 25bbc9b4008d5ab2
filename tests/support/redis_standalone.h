#ifndef RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_
#define RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_

// A standalone redis-server child process for tests, and a synchronous hiredis connection to it.

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/redis/redis_command_runner.h"

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

// redis-server on 127.0.0.1 and a free port found at start, in `dir`, without persistence
// (--save '' --appendonly no). Stopped (SIGTERM, then SIGKILL) by pid on destruction.
class RedisStandalone {
 public:
  // Starts the server and waits until it answers PING (30 s at most; retried on another port if
  // the chosen one was taken meanwhile).
  static absl::StatusOr<std::unique_ptr<RedisStandalone>> Start(const std::string& dir);
  ~RedisStandalone();
  RedisStandalone(const RedisStandalone&) = delete;
  RedisStandalone& operator=(const RedisStandalone&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  absl::StatusOr<std::unique_ptr<HiredisConnection>> Connect() const {
    return HiredisConnection::Connect("127.0.0.1", port_);
  }

 private:
  RedisStandalone() = default;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_REDIS_STANDALONE_H_
