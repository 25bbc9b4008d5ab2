#include "server/observability/telemetry_clock.h"

#include <time.h>

namespace ratelimit {
namespace {

int64_t Nanos(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class RealTelemetryClock final : public TelemetryClock {
 public:
  int64_t UnixNanos() const override { return Nanos(CLOCK_REALTIME); }
  int64_t SteadyNanos() const override { return Nanos(CLOCK_MONOTONIC); }
};

}  // namespace

const TelemetryClock& TelemetryClock::Real() {
  static const RealTelemetryClock* const clock = new RealTelemetryClock();
  return *clock;
}

}  // namespace ratelimit
