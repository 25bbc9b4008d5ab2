#ifndef RATELIMIT_SERVER_OBSERVABILITY_TRACER_H_
#define RATELIMIT_SERVER_OBSERVABILITY_TRACER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/observability/telemetry_clock.h"
#include "server/observability/trace_context.h"

namespace ratelimit {

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

// Receives finished spans, each an encoded opentelemetry.proto.trace.v1.Span message. Submit
// must not block: it is called on the request path.
//
// Ownership: Submit takes the span. Thread safety: implementations must be thread-safe (spans
// end on every request thread).
class SpanSink {
 public:
  virtual ~SpanSink() = default;
  virtual void Submit(std::string encoded_span) = 0;
};

// A span being recorded, or a no-op one when its trace is not sampled (then every method does
// nothing and costs a branch). Attributes are written in the OTLP wire format as they are set,
// and End() appends the span's ids, name, kind, times and status, so the finished span is one
// string, ready to be sent without another conversion. Move-only; End() hands it to the sink
// once.
//
// Ownership: owns its attributes; the sink and clock belong to the Tracer that started it, which
// must outlive it. Thread safety: thread-compatible (one call's thread at a time).
class Span {
 public:
  Span() = default;  // no-op
  Span(Span&& other) noexcept;
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span();  // ends the span if End() was not called

  bool recording() const { return sink_ != nullptr; }

  // Attribute setters. REQUIRES: `key` is at most 127 bytes (a literal, whose length the
  // compiler knows).
  void SetAttribute(absl::string_view key, absl::string_view value);
  void SetAttribute(absl::string_view key, const char* value) {
    SetAttribute(key, absl::string_view(value));
  }
  void SetAttribute(absl::string_view key, int64_t value);
  void SetAttribute(absl::string_view key, double value);
  void SetAttribute(absl::string_view key, bool value);
  void SetAttribute(absl::string_view key, absl::Span<const absl::string_view> values);
  void SetAttribute(absl::string_view key, absl::Span<const double> values);

  void SetError(absl::string_view message);
  // Starts a child span (kind INTERNAL unless given) in the same trace. REQUIRES: `name` is a
  // literal.
  Span StartChild(const char* name, SpanKind kind = SpanKind::kInternal) const;
  // The same, starting at `steady_nanos` (a reading of the tracer's clock's SteadyNanos() the
  // caller took anyway): its wall-clock start is the parent's plus the steady time since the
  // parent started, so no clock is read.
  Span StartChild(const char* name, SpanKind kind, int64_t steady_nanos) const;
  void End();
  // Ends at `steady_nanos`, a reading of the tracer's clock's SteadyNanos() taken by the caller.
  void End(int64_t steady_nanos);

  // The trace id in hex, or empty when not recording (for request-scoped log lines).
  std::string TraceIdHex() const;

 private:
  friend class Tracer;

  SpanSink* sink_ = nullptr;  // null: not recording
  TraceId trace_id_{};
  SpanId span_id_{};
  std::optional<SpanId> parent_;
  std::string trace_state_;
  uint8_t flags_ = 0;
  const char* name_ = "";
  SpanKind kind_ = SpanKind::kInternal;
  const TelemetryClock* clock_ = nullptr;  // the tracer's; set while recording
  int64_t start_unix_nanos_ = 0;
  int64_t start_steady_nanos_ = 0;  // the end time is the start plus the steady time elapsed
  bool error_ = false;
  std::string status_message_;
  std::string wire_;  // attributes so far (Span field 9), encoded
};

struct TracerOptions {
  // Probability that a new trace (a request without a traceparent) is sampled, 0..1. A request
  // with a traceparent follows the caller's sampled flag. Default 1.
  double sample_ratio = 1.0;
};

// The trace-id ratio sampler's decision for a new trace: sampled when the low 8 bytes of
// `trace_id`, read as a big-endian integer, are below `ratio` * 2^64. A ratio of 1 or more samples
// every trace, 0 or less none. Pure: the same id and ratio always give the same answer.
bool TraceIdRatioSampled(const TraceId& trace_id, double ratio);

// Starts spans and decides sampling (parent-based, else trace-id ratio, like OpenTelemetry's
// parentbased_traceidratio sampler).
//
// Span times: the start is `clock.UnixNanos()`, the end the start plus the `SteadyNanos()`
// elapsed, so a step of the wall clock never makes a span negative or distorts its length.
//
// Thread safety: thread-safe. `sink` and `clock` are not owned and must outlive the tracer and
// its spans.
class Tracer {
 public:
  Tracer(TracerOptions options, SpanSink& sink,
         const TelemetryClock& clock = TelemetryClock::Real())
      : options_(options), sink_(sink), clock_(clock) {}

  // A SERVER span named `name`, joining `parent` when given. REQUIRES: `name` is a literal.
  Span StartServerSpan(const char* name, const std::optional<TraceContext>& parent);
  // The same, starting at `steady_nanos`, a reading of clock().SteadyNanos() the caller took.
  Span StartServerSpan(const char* name, const std::optional<TraceContext>& parent,
                       int64_t steady_nanos);

  // The clock of the spans' times.
  const TelemetryClock& clock() const { return clock_; }

 private:
  // `steady_nanos`: the caller's reading, else the clock is read once the span is sampled.
  Span Start(const char* name, const std::optional<TraceContext>& parent,
             std::optional<int64_t> steady_nanos);

  const TracerOptions options_;
  SpanSink& sink_;
  const TelemetryClock& clock_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_TRACER_H_
