#ifndef RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_REPLY_H_
#define RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_REPLY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ratelimit::redis {

// One Redis reply (RESP2), owned and copyable: what the server answered to one command.
struct Reply {
  enum class Type { kNil, kString, kStatus, kError, kInteger, kArray };

  Type type = Type::kNil;
  // kString (bulk string), kStatus ("OK") and kError (the whole message, e.g. "ERR unknown ...").
  std::string str;
  // kInteger.
  int64_t integer = 0;
  // kArray.
  std::vector<Reply> elements;

  bool is_nil() const { return type == Type::kNil; }
  bool is_error() const { return type == Type::kError; }

  // OK unless the reply is an error reply; then INTERNAL with the server's message (callers that
  // act on the server's error code read `str`).
  absl::Status ToStatus() const;

  // A short human-readable rendering, for logs and test failure messages.
  std::string DebugString() const;

  static Reply Nil() { return Reply{}; }
  static Reply String(std::string s) { return Reply{Type::kString, std::move(s), 0, {}}; }
  static Reply Status(std::string s) { return Reply{Type::kStatus, std::move(s), 0, {}}; }
  static Reply Error(std::string s) { return Reply{Type::kError, std::move(s), 0, {}}; }
  static Reply Integer(int64_t v) { return Reply{Type::kInteger, {}, v, {}}; }
  static Reply Array(std::vector<Reply> e) { return Reply{Type::kArray, {}, 0, std::move(e)}; }
};

}  // namespace ratelimit::redis

#endif  // RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_REPLY_H_
