#ifndef RATELIMIT_SERVER_SERVING_GRPC_CONVERT_H_
#define RATELIMIT_SERVER_SERVING_GRPC_CONVERT_H_

// Conversions every gRPC API of the server shares: status codes and the well-known time types.
// Free functions; thread-safe.

#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "grpcpp/support/status.h"

namespace ratelimit {

// google.protobuf.Duration's range in seconds (10,000 years).
inline constexpr int64_t kMaxProtoDurationSeconds = 315576000000;

// True when `d`'s nanos cannot go with its seconds in any valid Duration: outside (-1e9, 1e9), or
// of the other sign than seconds.
bool DurationNanosMalformed(const google::protobuf::Duration& d);

// Why `d` cannot be read as a duration of at least 0, to follow the field's name in an
// INVALID_ARGUMENT: "is not a valid google.protobuf.Duration" (seconds past the type's range,
// nanos outside (-1e9, 1e9), or seconds and nanos of opposite signs) or "must not be negative".
// nullptr when it can.
const char* NonNegativeDurationProblem(const google::protobuf::Duration& d);

// absl::Status -> grpc::Status (the codes are the same numbers; the message is kept).
grpc::Status ToGrpcStatus(const absl::Status& status);

// Writes a duration in microseconds into a google.protobuf.Duration. Negative values become 0,
// and values past the type's range (kMaxProtoDurationSeconds) become that maximum, so the
// message is always valid.
void SetDuration(int64_t us, google::protobuf::Duration* d);

// Writes a Unix time in microseconds into a google.protobuf.Timestamp, clamped to the type's
// range: later than 9999-12-31T23:59:59.999999999Z becomes that instant (earlier than
// 0001-01-01T00:00:00Z becomes that one), so the message is always valid.
void SetTimestamp(int64_t us, google::protobuf::Timestamp* ts);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_GRPC_CONVERT_H_
