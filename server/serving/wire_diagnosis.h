#ifndef RATELIMIT_SERVER_SERVING_WIRE_DIAGNOSIS_H_
#define RATELIMIT_SERVER_SERVING_WIRE_DIAGNOSIS_H_

// Why a request body did not parse, by field. Protobuf's parser answers only "it did not": a
// string field that is not valid UTF-8 (proto3 refuses it), a field cut short. (A field sent with
// another wire type than its type's is no fault: the parser keeps it as an unknown field.) This
// walks the body beside the message's descriptor and names the first
// field at fault the way the services' own checks do ("limits[1].key: is not valid UTF-8"), so
// that a caller is told which value to fix. Used only on the error path: the walk costs what a
// second parse costs.

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/byte_buffer.h"

namespace ratelimit {

// "<field path>: <what is wrong>" for the first field of `bytes` (a serialized `type`) that
// makes it unparsable, or empty when the fault is not in a field of `type` (the body ends inside
// a tag, or nests deeper than the walk follows).
std::string DiagnoseWireFormat(const google::protobuf::Descriptor& type, absl::string_view bytes);

// The INVALID_ARGUMENT message for a request `body` that did not parse as a `type`: the field at
// fault first when one is ("limits[0].key: is not valid UTF-8 (request body is not a valid
// ratelimit.v1.RateLimitRequest)"), else "request body is not a valid <type> (protobuf wire
// format)".
std::string UnparsableBodyMessage(const google::protobuf::Descriptor& type,
                                  const grpc::ByteBuffer& body);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_WIRE_DIAGNOSIS_H_
