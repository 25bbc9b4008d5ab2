#ifndef RATELIMIT_STORAGE_REDIS_REDIS_COMMAND_RUNNER_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_COMMAND_RUNNER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/redis/cluster/redis_reply.h"

namespace ratelimit {

// Sends one command and waits for its reply: what the function library needs from a connection
// to one Redis node (a standalone server, or the primary that owns the keys of the command).
//
// Thread safety: implementations document theirs.
class RedisCommandRunner {
 public:
  virtual ~RedisCommandRunner() = default;
  // A Redis error reply is a reply of type kError, not an error status; the status is for the
  // transport (UNAVAILABLE when the node cannot be reached or the connection broke, DEADLINE_
  // EXCEEDED on a timeout).
  virtual absl::StatusOr<redis::Reply> Command(absl::Span<const std::string> argv) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_COMMAND_RUNNER_H_
