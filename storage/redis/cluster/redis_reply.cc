#include "storage/redis/cluster/redis_reply.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ratelimit::redis {

absl::Status Reply::ToStatus() const {
  if (type != Type::kError) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("redis: ", str));
}

std::string Reply::DebugString() const {
  switch (type) {
    case Type::kNil:
      return "(nil)";
    case Type::kString:
      return absl::StrCat("\"", str, "\"");
    case Type::kStatus:
      return str;
    case Type::kError:
      return absl::StrCat("(error) ", str);
    case Type::kInteger:
      return absl::StrCat("(integer) ", integer);
    case Type::kArray:
      return absl::StrCat(
          "[",
          absl::StrJoin(elements, ", ",
                        [](std::string* out, const Reply& r) { out->append(r.DebugString()); }),
          "]");
  }
  return "";
}

}  // namespace ratelimit::redis
