#include "client/cpp/proto_time.h"

#include <cstdint>

namespace ratelimit {

void SetProtoDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t us = absl::ToInt64Microseconds(d);
  out->set_seconds(us / 1000000);
  out->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
}

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

std::string Rfc3339(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ", TimeOf(t), absl::UTCTimeZone());
}

}  // namespace ratelimit
