#include "storage/clock.h"

#include <time.h>

namespace ratelimit {

int64_t SystemClock::NowMicros() const {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

const SystemClock& SystemClock::Default() {
  static const SystemClock* clock = new SystemClock();
  return *clock;
}

}  // namespace ratelimit
