#ifndef RATELIMIT_STORAGE_CLOCK_H_
#define RATELIMIT_STORAGE_CLOCK_H_

#include <cstdint>

namespace ratelimit {

// The source of wall-clock time for everything that decides. States outlive the process, so the
// time is wall-clock (microseconds since the Unix epoch), not a monotonic clock; the algebra
// guards against it stepping backwards.
//
// Thread safety: implementations are safe to call from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since 1970-01-01T00:00:00Z.
  virtual int64_t NowMicros() const = 0;
};

// The real clock (CLOCK_REALTIME).
class SystemClock final : public Clock {
 public:
  int64_t NowMicros() const override;
  // A process-wide instance; never destroyed.
  static const SystemClock& Default();
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_CLOCK_H_
