// Fuzz target: the W3C trace headers a caller sends (server/observability/trace_context.h).
// Properties: a traceparent that parses has non-zero ids and formats back to a header that parses
// to the same context; the tracestate kept with it (and so exported in every span of the call)
// is valid per W3C Trace Context: printable ASCII, at most 512 characters.
//
// The input is a traceparent (up to the first newline) and a tracestate (the rest).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/observability/trace_context.h"
#include "tests/fuzz/fuzz_util.h"

namespace ratelimit {
namespace {

bool AllZero(const uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

}  // namespace
}  // namespace ratelimit

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ratelimit;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const absl::string_view traceparent = input.substr(0, newline);
  const absl::string_view tracestate =
      newline == absl::string_view::npos ? absl::string_view() : input.substr(newline + 1);

  // What the server keeps of a call's headers (Telemetry::StartRpc calls the same function).
  std::optional<TraceContext> kept = ParseTraceContext(traceparent, tracestate);
  if (!kept) return 0;
  FUZZ_CHECK(!AllZero(kept->trace_id.data(), kept->trace_id.size()), "all-zero trace id kept");
  FUZZ_CHECK(!AllZero(kept->span_id.data(), kept->span_id.size()), "all-zero span id kept");
  const std::string formatted = FormatTraceparent(kept->trace_id, kept->span_id, kept->flags);
  FUZZ_CHECK(formatted.size() == 55 && fuzz::IsPrintableAscii(formatted), "formatted \"%s\"",
             formatted.c_str());
  std::optional<TraceContext> again = ParseTraceparent(formatted);
  FUZZ_CHECK(again && again->trace_id == kept->trace_id && again->span_id == kept->span_id &&
                 again->flags == kept->flags,
             "\"%s\" does not parse back", formatted.c_str());

  FUZZ_CHECK(kept->trace_state.size() <= 512, "kept a tracestate of %zu characters",
             kept->trace_state.size());
  FUZZ_CHECK(fuzz::IsPrintableAscii(kept->trace_state),
             "kept a tracestate that is not printable ASCII");
  return 0;
}
