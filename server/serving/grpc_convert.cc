#include "server/serving/grpc_convert.h"

#include <string>

namespace ratelimit {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

void SetTimestamp(int64_t us, google::protobuf::Timestamp* ts) {
  // google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z.
  constexpr int64_t kMinSeconds = -62135596800;
  constexpr int64_t kMaxSeconds = 253402300799;
  const int64_t seconds = us / 1000000;
  int32_t nanos = static_cast<int32_t>((us % 1000000) * 1000);
  if (seconds > kMaxSeconds) {
    ts->set_seconds(kMaxSeconds);
    ts->set_nanos(999999999);
    return;
  }
  if (seconds < kMinSeconds) {
    ts->set_seconds(kMinSeconds);
    ts->set_nanos(0);
    return;
  }
  int64_t s = seconds;
  if (nanos < 0) {  // Timestamp nanos are never negative: borrow a second
    nanos += 1000000000;
    --s;
  }
  ts->set_seconds(s);
  ts->set_nanos(nanos);
}

bool DurationNanosMalformed(const google::protobuf::Duration& d) {
  const int64_t s = d.seconds();
  const int32_t n = d.nanos();
  return n <= -1000000000 || n >= 1000000000 || (s > 0 && n < 0) || (s < 0 && n > 0);
}

const char* NonNegativeDurationProblem(const google::protobuf::Duration& d) {
  const int64_t s = d.seconds();
  const int32_t n = d.nanos();
  if (s < -kMaxProtoDurationSeconds || s > kMaxProtoDurationSeconds || DurationNanosMalformed(d)) {
    return "is not a valid google.protobuf.Duration";
  }
  if (s < 0 || n < 0) return "must not be negative";
  return nullptr;
}

void SetDuration(int64_t us, google::protobuf::Duration* d) {
  if (us < 0) us = 0;
  if (us / 1000000 >= kMaxProtoDurationSeconds) {
    d->set_seconds(kMaxProtoDurationSeconds);
    d->set_nanos(0);
    return;
  }
  d->set_seconds(us / 1000000);
  d->set_nanos(static_cast<int32_t>((us % 1000000) * 1000));
}

}  // namespace ratelimit
