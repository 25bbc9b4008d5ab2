#ifndef RATELIMIT_CLIENT_CPP_PROTO_TIME_H_
#define RATELIMIT_CLIENT_CPP_PROTO_TIME_H_

// The well-known time messages as the command-line tool and the C++ client read and write them:
// one conversion each way, to microseconds (the server's resolution), and one way to print an
// instant. Free functions; thread-safe.

#include <string>

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace ratelimit {

// `d` to the microsecond, toward zero, into `out` (seconds and nanos of one sign, as the type
// requires). Not clamped: a value past the type's range is sent for the server to refuse by name.
void SetProtoDuration(absl::Duration d, google::protobuf::Duration* out);

// `t` as an instant (its nanos kept).
absl::Time TimeOf(const google::protobuf::Timestamp& t);

// `t` in RFC 3339, UTC written "Z" as the docs write it, with as many fractional digits as it
// has ("2026-12-04T07:00:00.25Z").
std::string Rfc3339(const google::protobuf::Timestamp& t);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CPP_PROTO_TIME_H_
