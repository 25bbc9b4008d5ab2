#include "server/observability/tracer.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

namespace ratelimit {
namespace {

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
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t r = Rng()();
      std::memcpy(out.data() + i, &r, std::min<size_t>(8, N - i));
    }
  } while (std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
}

}  // namespace

int64_t UnixNanosNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Span::~Span() { End(); }

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    End();
    data_ = std::move(other.data_);
    sink_ = other.sink_;
    other.data_.reset();
  }
  return *this;
}

void Span::SetAttribute(std::string key, AttributeValue value) {
  if (!data_) return;
  data_->attributes.push_back(SpanAttribute{std::move(key), std::move(value)});
}

void Span::SetError(absl::string_view message) {
  if (!data_) return;
  data_->error = true;
  data_->status_message = std::string(message);
}

Span Span::StartChild(std::string name) const {
  if (!data_) return Span();
  SpanData child;
  child.trace_id = data_->trace_id;
  RandomNonZero(child.span_id);
  child.parent_span_id = data_->span_id;
  child.trace_state = data_->trace_state;
  child.flags = data_->flags;
  child.name = std::move(name);
  child.kind = SpanKind::kInternal;
  child.start_unix_nanos = UnixNanosNow();
  return Span(std::move(child), sink_);
}

void Span::End() {
  if (!data_) return;
  data_->end_unix_nanos = UnixNanosNow();
  SpanData done = std::move(*data_);
  data_.reset();
  sink_->Submit(std::move(done));
}

std::string Span::TraceIdHex() const {
  return data_ ? ToHex(data_->trace_id.data(), 16) : std::string();
}

Span Tracer::StartServerSpan(std::string name, const std::optional<TraceContext>& parent) {
  SpanData span;
  if (parent) {
    if (!parent->sampled()) return Span();
    span.trace_id = parent->trace_id;
    span.parent_span_id = parent->span_id;
    span.trace_state = parent->trace_state;
    span.flags = parent->flags;
  } else {
    if (options_.sample_ratio <= 0) return Span();
    RandomNonZero(span.trace_id);
    if (options_.sample_ratio < 1) {
      // Trace-id ratio: the low 8 bytes as an integer, compared with ratio * 2^64.
      uint64_t low = 0;
      for (int i = 8; i < 16; ++i) low = low << 8 | span.trace_id[i];
      const double bound = options_.sample_ratio * 18446744073709551616.0;
      if (static_cast<double>(low) >= bound) return Span();
    }
    span.flags = 1;
  }
  RandomNonZero(span.span_id);
  span.name = std::move(name);
  span.kind = SpanKind::kServer;
  span.start_unix_nanos = UnixNanosNow();
  return Span(std::move(span), &sink_);
}

}  // namespace ratelimit
