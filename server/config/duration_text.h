#ifndef RATELIMIT_SERVER_CONFIG_DURATION_TEXT_H_
#define RATELIMIT_SERVER_CONFIG_DURATION_TEXT_H_

// A duration as people write one in the limits file, the Envoy configuration and on the command
// line: one parser, so that "7d" means the same everywhere. A free function; thread-safe.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ratelimit {

// Parses "1s", "250ms", "1h30m", "1.5h", "500us" (absl::ParseDuration's units), and days: "7d",
// "1.5d", "2d12h" (days first, then any of the others). A bare number is refused, "0" too: a
// duration must say its unit. INVALID_ARGUMENT "not a duration: ..." otherwise.
absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view text);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_CONFIG_DURATION_TEXT_H_
