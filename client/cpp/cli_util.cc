#include "client/cpp/cli_util.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/config/duration_text.h"

namespace ratelimit {

std::string FlagNotTaken(absl::string_view command, const std::vector<std::string>& given) {
  static const auto* const kConnection = new std::set<std::string>{
      "target",  "tls",  "tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name",
      "timeout", "json", "help",        "helpfull",      "helpshort",    "version"};
  // An inline config's flags, and those of a concurrency limit: a lease call's config flags make
  // it inline; only a listing takes --source (a listing of an inline limit needs no config).
  const std::vector<std::string> config = {"kind",         "rate",      "period",       "capacity",
                                           "max_reserved", "lease_ttl", "max_lease_ttl"};
  const std::vector<std::string> lease = {"name",     "key",       "kind",
                                          "capacity", "lease_ttl", "max_lease_ttl"};
  const std::vector<std::string> override_target = {"source", "envoy_path", "name", "key",
                                                    "key_pattern"};
  auto with = [](std::vector<std::string> a, std::initializer_list<std::string> b) {
    a.insert(a.end(), b);
    return a;
  };
  static const auto* const kTakes = new std::map<std::string, std::vector<std::string>>{
      {"consume", with(config, {"name", "key", "count", "request_id", "omit_receipts"})},
      {"check", with(config, {"name", "key", "count"})},
      {"reserve",
       with(config, {"name", "key", "count", "request_id", "omit_receipts", "wait", "max_wait"})},
      {"settle", {"receipt", "used"}},
      {"reset",
       {"name", "key", "all_keys", "source", "envoy_path", "envoy_override", "admin_token_file"}},
      {"health", {}},
      {"acquire", with(lease, {"count", "ttl", "request_id", "holder"})},
      {"release", with(lease, {"lease_id"})},
      {"extend", with(lease, {"lease_id", "ttl"})},
      {"leases", with(lease, {"source", "page_size", "page_token", "admin_token_file"})},
      {"rlqs assignments", {"domain", "bucket", "page_size", "page_token", "admin_token_file"}},
      {"override set",
       with(override_target, {"rate", "period", "capacity", "max_reserved", "unlimited", "blocked",
                              "expires_in", "reason", "actor", "admin_token_file"})},
      {"override get", with(override_target, {"admin_token_file"})},
      {"override delete", with(override_target, {"reason", "actor", "admin_token_file"})},
      {"override list", {"source", "name", "page_size", "page_token", "admin_token_file"}},
      {"override audit", {"name", "page_size", "page_token", "admin_token_file"}},
  };
  const auto it = kTakes->find(std::string(command));
  if (it == kTakes->end()) return "";
  for (const std::string& flag : given) {
    if (kConnection->contains(flag)) continue;
    if (std::find(it->second.begin(), it->second.end(), flag) != it->second.end()) continue;
    return flag;
  }
  return "";
}

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

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag, absl::string_view text) {
  absl::StatusOr<absl::Duration> d = ParseDurationText(text);
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", d.status().message()));
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

absl::Status WithAdminHint(const absl::Status& error, bool token_sent) {
  if (error.code() != absl::StatusCode::kUnauthenticated || token_sent) return error;
  return absl::Status(error.code(),
                      absl::StrCat(error.message(),
                                   " (the CLI sends the token of --admin_token_file, else of "
                                   "$RATELIMIT_ADMIN_TOKEN; neither is set)"));
}

}  // namespace ratelimit
