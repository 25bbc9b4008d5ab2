#include "server/config/duration_text.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ratelimit {

absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view text) {
  const absl::Status not_a_duration = absl::InvalidArgumentError(absl::StrCat(
      "not a duration: \"", text, "\" (write a number with a unit: us, ms, s, m, h, d)"));
  absl::Duration days = absl::ZeroDuration();
  absl::string_view rest = text;
  if (const size_t d = text.find('d'); d != absl::string_view::npos) {
    double count = 0;
    if (!absl::SimpleAtod(text.substr(0, d), &count) || !std::isfinite(count)) {
      return not_a_duration;
    }
    days = absl::Hours(24) * count;
    rest = text.substr(d + 1);
    if (rest.empty()) return days;
    // "2d-3h" or "2d+3h" would read as one signed part after another: refused.
    if (rest.front() == '-' || rest.front() == '+') return not_a_duration;
  }
  absl::Duration part;
  if (rest == "0" || !absl::ParseDuration(rest, &part)) return not_a_duration;
  return days + part;
}

}  // namespace ratelimit
