#include "client/cpp/cli_util.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ratelimit {

absl::StatusOr<absl::Duration> ParseTimeout(absl::string_view text) {
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    d = std::isfinite(seconds) ? absl::Seconds(seconds) : absl::InfiniteDuration();
  } else if (!absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout: \"", text, "\" is not a duration (e.g. 5, 0.5, 500ms, 2s, 1m)"));
  }
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout: must be positive and finite, got \"", text, "\""));
  }
  return d;
}

absl::StatusOr<std::map<std::string, std::string>> ParseBucketPairs(
    const std::vector<std::string>& items) {
  std::map<std::string, std::string> pairs;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--bucket: \"", item, "\" is not key=value (e.g. --bucket=tenant=a,route=b)"));
    }
    if (!pairs.emplace(item.substr(0, eq), item.substr(eq + 1)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--bucket: the key \"", item.substr(0, eq), "\" is given twice"));
    }
  }
  return pairs;
}

absl::Status WithTransportHint(const absl::Status& error, bool tls) {
  if (error.code() != absl::StatusCode::kUnavailable) return error;
  const absl::string_view m = error.message();
  if (!tls && absl::StrContains(m, "Socket closed")) {
    return absl::Status(error.code(),
                        absl::StrCat(m,
                                     " (if the server serves TLS, add --tls, with "
                                     "--tls_ca_file when its certificate is from a private CA)"));
  }
  const std::string lower = absl::AsciiStrToLower(m);
  if (tls && (absl::StrContains(lower, "handshake") || absl::StrContains(lower, "ssl"))) {
    return absl::Status(error.code(),
                        absl::StrCat(m,
                                     " (if the server is plaintext, drop --tls and the "
                                     "--tls_* flags; if it serves TLS, check --tls_ca_file "
                                     "and --tls_server_name)"));
  }
  return error;
}

}  // namespace ratelimit
