#ifndef RATELIMIT_TESTS_FUZZ_FUZZ_UTIL_H_
#define RATELIMIT_TESTS_FUZZ_FUZZ_UTIL_H_

// Helpers shared by the fuzz targets: a failed property prints what broke and aborts, so
// libFuzzer records the input as a crash; decoders of "interesting" values for
// FuzzedDataProvider.

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ratelimit::fuzz {

// Aborts with `what` when `ok` is false. Unlike assert(), active in every build type.
#define FUZZ_CHECK(ok, ...)                                                            \
  do {                                                                                 \
    if (!(ok)) {                                                                       \
      std::fprintf(stderr, "%s:%d: property failed: %s\n  ", __FILE__, __LINE__, #ok); \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fprintf(stderr, "\n");                                                      \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// A double that is often a boundary (0, 1, 1e15, 1e-300, inf, NaN, negative...) and otherwise
// arbitrary.
inline double PickDouble(FuzzedDataProvider& in) {
  static constexpr double kValues[] = {0,
                                       1,
                                       0.5,
                                       2,
                                       10,
                                       100,
                                       1e6,
                                       1e9,
                                       1e12,
                                       1e15,
                                       1e15 + 1,
                                       2e15,
                                       1e-9,
                                       1e-300,
                                       1e300,
                                       -1,
                                       -0.0,
                                       std::numeric_limits<double>::infinity(),
                                       std::numeric_limits<double>::quiet_NaN(),
                                       std::numeric_limits<double>::denorm_min(),
                                       std::numeric_limits<double>::max()};
  constexpr size_t kCount = sizeof(kValues) / sizeof(kValues[0]);
  const size_t pick = in.ConsumeIntegralInRange<size_t>(0, kCount);
  if (pick < kCount) return kValues[pick];
  return in.ConsumeFloatingPoint<double>();
}

// Seconds of a duration: often a unit boundary (1s, 1h, 1d, 60 and 100 years...).
inline int64_t PickSeconds(FuzzedDataProvider& in) {
  constexpr int64_t kDay = 86400, kYear = 366 * kDay;
  static constexpr int64_t kValues[] = {0,
                                        1,
                                        60,
                                        3600,
                                        kDay,
                                        7 * kDay,
                                        30 * kDay,
                                        365 * kDay,
                                        60 * kYear,
                                        100 * kYear,
                                        100 * kYear + 1,
                                        -1,
                                        315576000000,
                                        315576000001};
  constexpr size_t kCount = sizeof(kValues) / sizeof(kValues[0]);
  const size_t pick = in.ConsumeIntegralInRange<size_t>(0, kCount);
  if (pick < kCount) return kValues[pick];
  return in.ConsumeIntegral<int64_t>();
}

// One of `choices`, or (when `random_len` > 0) an arbitrary string of up to that many bytes.
inline std::string PickString(FuzzedDataProvider& in, const std::vector<std::string>& choices,
                              size_t random_len) {
  const size_t pick = in.ConsumeIntegralInRange<size_t>(0, choices.size());
  if (pick < choices.size()) return choices[pick];
  return in.ConsumeRandomLengthString(random_len);
}

// Printable ASCII (0x20..0x7E), the character set of W3C trace headers.
inline bool IsPrintableAscii(absl::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace ratelimit::fuzz

#endif  // RATELIMIT_TESTS_FUZZ_FUZZ_UTIL_H_
