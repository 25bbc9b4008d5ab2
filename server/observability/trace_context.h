#ifndef RATELIMIT_SERVER_OBSERVABILITY_TRACE_CONTEXT_H_
#define RATELIMIT_SERVER_OBSERVABILITY_TRACE_CONTEXT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ratelimit {

// Ownership and thread safety: TraceContext is a value; the functions are pure and safe to call
// from any thread.

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// A W3C Trace Context: the caller's trace and span, its flags and tracestate.
struct TraceContext {
  TraceId trace_id{};
  SpanId span_id{};
  uint8_t flags = 0;  // bit 0: sampled
  std::string trace_state;

  bool sampled() const { return (flags & 1) != 0; }
};

// Parses a `traceparent` header value ("00-<32 hex>-<16 hex>-<2 hex>"), following the W3C
// rules: lowercase hex, non-zero ids, version "ff" invalid, and a future version may carry more
// fields after the flags. nullopt when invalid (the span then starts a new trace).
std::optional<TraceContext> ParseTraceparent(absl::string_view header);

// True when `header` is a valid W3C `tracestate`: at most 512 characters and 32 list members,
// printable ASCII only, each non-empty member `key=value` with a simple key (lowercase letter,
// then up to 255 of [a-z0-9_*/-]) or a multi-tenant key (tenant@system: up to 241 and 14
// characters), a value of 1..256 printable characters other than ',' and '=' not ending in a
// space, and no key twice. An invalid tracestate is dropped (the traceparent is still used).
bool IsValidTracestate(absl::string_view header);

// The caller's context from its `traceparent` and `tracestate` header values (either may be
// absent): nullopt without a valid traceparent; the tracestate is kept only when valid, since it
// is passed on verbatim and one bad value would make the collector reject a whole batch.
std::optional<TraceContext> ParseTraceContext(std::optional<absl::string_view> traceparent,
                                              std::optional<absl::string_view> tracestate);

// "00-<trace id>-<span id>-<flags>".
std::string FormatTraceparent(const TraceId& trace_id, const SpanId& span_id, uint8_t flags);

std::string ToHex(const uint8_t* bytes, size_t n);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_TRACE_CONTEXT_H_
