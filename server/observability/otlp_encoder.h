#ifndef RATELIMIT_SERVER_OBSERVABILITY_OTLP_ENCODER_H_
#define RATELIMIT_SERVER_OBSERVABILITY_OTLP_ENCODER_H_

// Writes an OTLP trace request in the protobuf wire format around spans that are already
// encoded (tracer.h): sizes are computed first and the request is written in one pass, with no
// intermediate message objects. The output parses as
// opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest (proto/opentelemetry/...);
// the tests decode it with the generated code.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace ratelimit {

// Ownership and thread safety: EncodeExportRequest borrows its inputs for the call and returns
// the encoded bytes by value; it keeps no state and is safe to call from any thread.

// A resource attribute: a string (AnyValue.string_value) or an integer (AnyValue.int_value, e.g.
// process.pid, which the OpenTelemetry conventions type as an int).
struct ResourceAttribute {
  std::string key;
  std::variant<std::string, int64_t> value;
};
using Resource = std::vector<ResourceAttribute>;

// An ExportTraceServiceRequest with one ResourceSpans (`resource` attributes) and one ScopeSpans
// (scope `scope_name`) holding `spans` (each an encoded Span message).
std::string EncodeExportRequest(const Resource& resource, absl::string_view scope_name,
                                const std::vector<std::string>& spans);

// Appends `span` (an encoded Span message) to `framed` as one ScopeSpans.spans field.
void AppendFramedSpan(std::string& framed, absl::string_view span);

// The bytes of the request EncodeExportRequest writes that come before its spans, for
// `framed_spans_size` bytes of spans framed by AppendFramedSpan: the header followed by the
// framed spans is the request, so the spans can be sent from where they were collected.
std::string EncodeExportRequestHeader(const Resource& resource, absl::string_view scope_name,
                                      size_t framed_spans_size);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_OTLP_ENCODER_H_
