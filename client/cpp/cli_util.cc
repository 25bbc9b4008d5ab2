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

absl::StatusOr<std::map<std::string, std::string>> ParseBucketPairs(absl::string_view text) {
  std::map<std::string, std::string> pairs;
  if (text.empty()) return pairs;
  std::string key, value, raw;  // raw: the item as given, for errors
  bool in_value = false;
  auto end_item = [&]() -> absl::Status {
    if (!in_value || key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--bucket: \"", raw, "\" is not key=value (e.g. --bucket=tenant=a,route=b)"));
    }
    if (!pairs.emplace(key, value).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--bucket: the key \"", key, "\" is given twice"));
    }
    key.clear();
    value.clear();
    raw.clear();
    in_value = false;
    return absl::OkStatus();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ',') {
      if (absl::Status s = end_item(); !s.ok()) return s;
      continue;
    }
    raw.push_back(c);
    if (c == '=' && !in_value) {
      in_value = true;
      continue;
    }
    char literal = c;
    if (c == '\\') {
      if (i + 1 == text.size() ||
          (text[i + 1] != ',' && text[i + 1] != '=' && text[i + 1] != '\\')) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--bucket: a '\\' escapes only ',', '=' or '\\' (byte ", i, " of \"", text, "\")"));
      }
      literal = text[++i];
      raw.push_back(literal);
    }
    (in_value ? value : key).push_back(literal);
  }
  if (absl::Status s = end_item(); !s.ok()) return s;
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
