#ifndef RATELIMIT_STORAGE_REDIS_REDIS_CONNECTION_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_CONNECTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ratelimit {

// One reply of the Redis protocol (RESP2).
struct RedisReply {
  enum class Type { kString, kStatus, kInteger, kNil, kArray, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

// Sends one command and waits for its reply: what the function library needs from a connection
// to one Redis node (a standalone server, or the primary that owns the keys of the command).
//
// Thread safety: implementations document theirs.
class RedisConnection {
 public:
  virtual ~RedisConnection() = default;
  // A Redis error reply is a reply of type kError, not an error status; the status is for the
  // transport (UNAVAILABLE when the node cannot be reached or the connection broke, DEADLINE_
  // EXCEEDED on a timeout).
  virtual absl::StatusOr<RedisReply> Command(absl::Span<const std::string> argv) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_CONNECTION_H_
