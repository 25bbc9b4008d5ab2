#ifndef RATELIMIT_SERVER_OBSERVABILITY_TELEMETRY_CLOCK_H_
#define RATELIMIT_SERVER_OBSERVABILITY_TELEMETRY_CLOCK_H_

#include <cstdint>

namespace ratelimit {

// The time telemetry reads. Span timestamps leave the process, so they are wall-clock (Unix
// nanoseconds); durations (latency histograms, span lengths) are differences of a steady clock,
// so that a step of the wall clock does not distort them. Tests inject a fake.
//
// Thread safety: implementations are safe to call from any thread.
class TelemetryClock {
 public:
  virtual ~TelemetryClock() = default;
  // Nanoseconds since 1970-01-01T00:00:00Z (CLOCK_REALTIME).
  virtual int64_t UnixNanos() const = 0;
  // Nanoseconds since an arbitrary fixed point; never decreases (CLOCK_MONOTONIC).
  virtual int64_t SteadyNanos() const = 0;

  // The real clocks; a process-wide instance, never destroyed.
  static const TelemetryClock& Real();
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_TELEMETRY_CLOCK_H_
