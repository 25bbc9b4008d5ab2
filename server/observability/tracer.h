#ifndef RATELIMIT_SERVER_OBSERVABILITY_TRACER_H_
#define RATELIMIT_SERVER_OBSERVABILITY_TRACER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/observability/trace_context.h"

namespace ratelimit {

using AttributeValue =
    std::variant<std::string, int64_t, double, bool, std::vector<std::string>, std::vector<double>>;

struct SpanAttribute {
  std::string key;
  AttributeValue value;
};

enum class SpanKind { kInternal = 1, kServer = 2 };

// A finished span, as handed to a SpanSink.
struct SpanData {
  TraceId trace_id{};
  SpanId span_id{};
  std::optional<SpanId> parent_span_id;
  std::string trace_state;
  uint8_t flags = 0;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_nanos = 0;
  int64_t end_unix_nanos = 0;
  std::vector<SpanAttribute> attributes;
  bool error = false;
  std::string status_message;
};

// Receives finished spans. Submit must not block: it is called on the request path.
class SpanSink {
 public:
  virtual ~SpanSink() = default;
  virtual void Submit(SpanData span) = 0;
};

// A span being recorded, or a no-op one when its trace is not sampled (then every method does
// nothing and costs a branch). Move-only; End() hands it to the sink once.
class Span {
 public:
  Span() = default;  // no-op
  // Moving leaves `other` a no-op span (a moved-from optional would still hold its data).
  Span(Span&& other) noexcept : data_(std::move(other.data_)), sink_(other.sink_) {
    other.data_.reset();
  }
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span();  // ends the span if End() was not called

  bool recording() const { return data_.has_value(); }
  void SetAttribute(std::string key, AttributeValue value);
  void SetError(absl::string_view message);
  // Starts a child span (kind INTERNAL) in the same trace.
  Span StartChild(std::string name) const;
  void End();

  // The trace id in hex, or empty when not recording (for request-scoped log lines).
  std::string TraceIdHex() const;

 private:
  friend class Tracer;
  Span(SpanData data, SpanSink* sink) : data_(std::move(data)), sink_(sink) {}

  std::optional<SpanData> data_;
  SpanSink* sink_ = nullptr;
};

struct TracerOptions {
  // Probability that a new trace (a request without a traceparent) is sampled, 0..1. A request
  // with a traceparent follows the caller's sampled flag. Default 1.
  double sample_ratio = 1.0;
};

// Starts spans and decides sampling (parent-based, else trace-id ratio, like OpenTelemetry's
// parentbased_traceidratio sampler).
//
// Thread safety: thread-safe. `sink` is not owned and must outlive the tracer and its spans.
class Tracer {
 public:
  Tracer(TracerOptions options, SpanSink& sink) : options_(options), sink_(sink) {}

  // A SERVER span named `name`, joining `parent` when given.
  Span StartServerSpan(std::string name, const std::optional<TraceContext>& parent);

 private:
  const TracerOptions options_;
  SpanSink& sink_;
};

int64_t UnixNanosNow();

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_TRACER_H_
