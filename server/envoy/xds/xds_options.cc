#include "server/envoy/xds/xds_options.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ratelimit {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseXdsNodeMetadata(
    absl::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  absl::flat_hash_set<std::string> keys;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return Invalid("--envoy_xds_node_metadata",
                     absl::StrCat("entry \"", entry, "\" is not key=value"));
    }
    std::string key(entry.substr(0, eq));
    if (!keys.insert(key).second) {
      return Invalid("--envoy_xds_node_metadata", absl::StrCat("key \"", key, "\" is repeated"));
    }
    out.emplace_back(std::move(key), std::string(entry.substr(eq + 1)));
  }
  return out;
}

absl::Status ValidateEnvoyXdsOptions(const EnvoyXdsOptions& o) {
  if (!o.enabled()) return absl::OkStatus();
  const size_t colon = o.server.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(o.server.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return Invalid("--envoy_xds_server",
                   absl::StrCat("expected host:port, got \"", o.server, "\""));
  }
  if (o.node_id.empty()) return Invalid("--envoy_xds_node_id", "must not be empty");
  if (!o.tls) {
    for (const auto& [flag, value] : {std::pair{"--envoy_xds_tls_ca_file", &o.tls_ca_file},
                                      {"--envoy_xds_tls_cert_file", &o.tls_cert_file},
                                      {"--envoy_xds_tls_key_file", &o.tls_key_file},
                                      {"--envoy_xds_tls_server_name", &o.tls_server_name}}) {
      if (!value->empty()) return Invalid(flag, "set, but --envoy_xds_tls is false");
    }
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return Invalid(
        o.tls_cert_file.empty() ? "--envoy_xds_tls_cert_file" : "--envoy_xds_tls_key_file",
        "the client certificate and its key go together: set both or neither");
  }
  if (o.retry_initial <= absl::ZeroDuration() || o.retry_initial == absl::InfiniteDuration()) {
    return Invalid("--envoy_xds_retry_initial", "must be positive and finite");
  }
  if (o.retry_max < o.retry_initial || o.retry_max == absl::InfiniteDuration()) {
    return Invalid("--envoy_xds_retry_max",
                   "must be finite and at least --envoy_xds_retry_initial");
  }
  return absl::OkStatus();
}

}  // namespace ratelimit
