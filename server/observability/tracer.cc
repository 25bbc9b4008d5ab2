#include "server/observability/tracer.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "server/observability/protowire.h"

namespace ratelimit {
namespace {

using namespace protowire;  // NOLINT(build/namespaces): wire-format helpers

// Span (opentelemetry.proto.trace.v1) field numbers.
constexpr int kTraceId = 1, kSpanId = 2, kTraceState = 3, kParentSpanId = 4, kName = 5, kKind = 6,
              kStart = 7, kEnd = 8, kAttributes = 9, kStatus = 15, kFlags = 16;
// KeyValue: key 1, value 2. AnyValue: string 1, bool 2, int 3, double 4, array 5.
// ArrayValue: values 1. Status: message 2, code 3 (STATUS_CODE_ERROR = 2).

std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           std::hash<std::thread::id>()(std::this_thread::get_id());
  }());
  return rng;
}

template <size_t N>
void RandomNonZero(std::array<uint8_t, N>& out) {
  std::mt19937_64& rng = Rng();
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t r = rng();
      std::memcpy(out.data() + i, &r, std::min<size_t>(8, N - i));
    }
  } while (std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
}

absl::string_view Bytes(const uint8_t* p, size_t n) {
  return absl::string_view(reinterpret_cast<const char*>(p), n);
}

// Appends KeyValue{key, AnyValue{<value_bytes>}} as Span field 9, where `value_bytes` is the
// encoded AnyValue body of `value_size` bytes written by `put_value`.
template <typename PutValue>
void PutAttribute(std::string& out, absl::string_view key, size_t value_size, PutValue put_value) {
  const size_t kv_size =
      1 + VarintSize(key.size()) + key.size() + 1 + VarintSize(value_size) + value_size;
  PutTag(out, kAttributes, kLen);
  PutVarint(out, kv_size);
  PutBytes(out, 1, key);
  PutTag(out, 2, kLen);
  PutVarint(out, value_size);
  put_value(out);
}

}  // namespace

Span::Span(Span&& other) noexcept { *this = std::move(other); }

Span& Span::operator=(Span&& other) noexcept {
  if (this == &other) return *this;
  End();
  sink_ = other.sink_;
  trace_id_ = other.trace_id_;
  span_id_ = other.span_id_;
  parent_ = other.parent_;
  trace_state_ = std::move(other.trace_state_);
  flags_ = other.flags_;
  name_ = other.name_;
  kind_ = other.kind_;
  clock_ = other.clock_;
  start_unix_nanos_ = other.start_unix_nanos_;
  start_steady_nanos_ = other.start_steady_nanos_;
  error_ = other.error_;
  status_message_ = std::move(other.status_message_);
  wire_ = std::move(other.wire_);
  other.sink_ = nullptr;  // the moved-from span no longer records
  return *this;
}

Span::~Span() { End(); }

void Span::SetAttribute(absl::string_view key, absl::string_view value) {
  if (!sink_) return;
  const size_t size = 1 + VarintSize(value.size()) + value.size();
  PutAttribute(wire_, key, size, [&](std::string& out) { PutBytes(out, 1, value); });
}

void Span::SetAttribute(absl::string_view key, int64_t value) {
  if (!sink_) return;
  const size_t size = 1 + VarintSize(static_cast<uint64_t>(value));
  PutAttribute(wire_, key, size,
               [&](std::string& out) { PutUint(out, 3, static_cast<uint64_t>(value)); });
}

void Span::SetAttribute(absl::string_view key, double value) {
  if (!sink_) return;
  PutAttribute(wire_, key, 9, [&](std::string& out) { PutDouble(out, 4, value); });
}

void Span::SetAttribute(absl::string_view key, bool value) {
  if (!sink_) return;
  PutAttribute(wire_, key, 2, [&](std::string& out) { PutUint(out, 2, value ? 1 : 0); });
}

void Span::SetAttribute(absl::string_view key, absl::Span<const absl::string_view> values) {
  if (!sink_) return;
  // ArrayValue{values: AnyValue{string_value}} inside AnyValue.array_value (5).
  size_t array_size = 0;
  for (absl::string_view v : values) {
    const size_t any = 1 + VarintSize(v.size()) + v.size();
    array_size += 1 + VarintSize(any) + any;
  }
  const size_t size = 1 + VarintSize(array_size) + array_size;
  PutAttribute(wire_, key, size, [&](std::string& out) {
    PutTag(out, 5, kLen);
    PutVarint(out, array_size);
    for (absl::string_view v : values) {
      PutTag(out, 1, kLen);
      PutVarint(out, 1 + VarintSize(v.size()) + v.size());
      PutBytes(out, 1, v);
    }
  });
}

void Span::SetAttribute(absl::string_view key, absl::Span<const double> values) {
  if (!sink_) return;
  const size_t array_size = values.size() * (1 + 1 + 9);
  const size_t size = 1 + VarintSize(array_size) + array_size;
  PutAttribute(wire_, key, size, [&](std::string& out) {
    PutTag(out, 5, kLen);
    PutVarint(out, array_size);
    for (double d : values) {
      PutTag(out, 1, kLen);
      PutVarint(out, 9);
      PutDouble(out, 4, d);
    }
  });
}

void Span::SetError(absl::string_view message) {
  if (!sink_) return;
  error_ = true;
  status_message_ = std::string(message);
}

Span Span::StartChild(const char* name, SpanKind kind) const {
  if (!sink_) return Span();
  return StartChild(name, kind, clock_->SteadyNanos());
}

Span Span::StartChild(const char* name, SpanKind kind, int64_t steady_nanos) const {
  Span child;
  if (!sink_) return child;
  child.sink_ = sink_;
  child.trace_id_ = trace_id_;
  RandomNonZero(child.span_id_);
  child.parent_ = span_id_;
  child.trace_state_ = trace_state_;
  child.flags_ = flags_;
  child.name_ = name;
  child.kind_ = kind;
  child.wire_.reserve(256);
  child.clock_ = clock_;
  // On the parent's time line: the child's times agree with the parent's to the nanosecond
  // whatever the wall clock did since the parent started.
  child.start_unix_nanos_ = start_unix_nanos_ + (steady_nanos - start_steady_nanos_);
  child.start_steady_nanos_ = steady_nanos;
  return child;
}

void Span::End() {
  if (!sink_) return;
  End(clock_->SteadyNanos());
}

void Span::End(int64_t steady_nanos) {
  if (!sink_) return;
  const int64_t end = start_unix_nanos_ + (steady_nanos - start_steady_nanos_);
  // Field order does not matter in the wire format: the attributes are already in wire_, the
  // rest is appended.
  std::string& out = wire_;
  PutBytes(out, kTraceId, Bytes(trace_id_.data(), 16));
  PutBytes(out, kSpanId, Bytes(span_id_.data(), 8));
  if (!trace_state_.empty()) PutBytes(out, kTraceState, trace_state_);
  if (parent_) PutBytes(out, kParentSpanId, Bytes(parent_->data(), 8));
  PutBytes(out, kName, name_);
  PutUint(out, kKind, static_cast<uint64_t>(kind_));
  PutFixed64(out, kStart, static_cast<uint64_t>(start_unix_nanos_));
  PutFixed64(out, kEnd, static_cast<uint64_t>(end));
  if (error_) {
    const size_t status_size = 1 + VarintSize(status_message_.size()) + status_message_.size() + 2;
    PutTag(out, kStatus, kLen);
    PutVarint(out, status_size);
    PutBytes(out, 2, status_message_);
    PutUint(out, 3, 2);
  }
  PutFixed32(out, kFlags, flags_);
  SpanSink* sink = sink_;
  sink_ = nullptr;
  sink->Submit(std::move(wire_));
}

std::string Span::TraceIdHex() const { return sink_ ? ToHex(trace_id_.data(), 16) : std::string(); }

bool TraceIdRatioSampled(const TraceId& trace_id, double ratio) {
  if (ratio >= 1) return true;
  if (ratio <= 0) return false;
  uint64_t low = 0;
  for (int i = 8; i < 16; ++i) low = low << 8 | trace_id[i];
  return static_cast<double>(low) < ratio * 18446744073709551616.0;
}

Span Tracer::StartServerSpan(const char* name, const std::optional<TraceContext>& parent) {
  return Start(name, parent, std::nullopt);
}

Span Tracer::StartServerSpan(const char* name, const std::optional<TraceContext>& parent,
                             int64_t steady_nanos) {
  return Start(name, parent, steady_nanos);
}

Span Tracer::Start(const char* name, const std::optional<TraceContext>& parent,
                   std::optional<int64_t> steady_nanos) {
  Span span;
  if (parent) {
    if (!parent->sampled()) return span;
    span.trace_id_ = parent->trace_id;
    span.parent_ = parent->span_id;
    span.trace_state_ = parent->trace_state;
    span.flags_ = parent->flags;
  } else {
    if (options_.sample_ratio <= 0) return span;
    RandomNonZero(span.trace_id_);
    if (!TraceIdRatioSampled(span.trace_id_, options_.sample_ratio)) return span;
    span.flags_ = 1;
  }
  RandomNonZero(span.span_id_);
  span.sink_ = &sink_;
  span.name_ = name;
  span.kind_ = SpanKind::kServer;
  span.wire_.reserve(384);
  span.clock_ = &clock_;
  span.start_unix_nanos_ = clock_.UnixNanos();
  span.start_steady_nanos_ = steady_nanos ? *steady_nanos : clock_.SteadyNanos();
  return span;
}

}  // namespace ratelimit
