#ifndef RATELIMIT_SERVER_ENVOY_XDS_XDS_OPTIONS_H_
#define RATELIMIT_SERVER_ENVOY_XDS_XDS_OPTIONS_H_

// How the server's xDS client reaches its management server (the --envoy_xds_* flags).

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ratelimit {

struct EnvoyXdsOptions {
  // host:port of the management server (gRPC ADS). Empty (default): no xDS.
  std::string server;
  // Node.id of the requests: the key of the management server's snapshot. Default "default".
  std::string node_id = "default";
  // Node.metadata of the requests, string values, in this order. Default none.
  std::vector<std::pair<std::string, std::string>> node_metadata;
  // TLS to the management server. Default false: plaintext.
  bool tls = false;
  // PEM CA bundle verifying the management server's certificate; empty: the system roots.
  std::string tls_ca_file;
  // PEM client certificate chain and key (mTLS); both or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the server's certificate must carry (a DNS SAN), also sent as the TLS server name
  // and the :authority; empty: the host of `server`.
  std::string tls_server_name;
  // The delay before reconnecting after the stream failed, doubled on each failure up to
  // retry_max, with jitter (each delay drawn in [d/2, d]); a stream that delivered a response
  // starts over at retry_initial. Defaults 1 s and 30 s.
  absl::Duration retry_initial = absl::Seconds(1);
  absl::Duration retry_max = absl::Seconds(30);

  bool enabled() const { return !server.empty(); }
};

// "k1=v1,k2=v2" as node metadata; empty entries are skipped. INVALID_ARGUMENT
// "--envoy_xds_node_metadata: ..." for an entry without '=' or with an empty or repeated key.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseXdsNodeMetadata(
    absl::string_view text);

// The options' rules, checked without reading files: OK, or INVALID_ARGUMENT
// "--envoy_xds_<flag>: why". Disabled options are always OK.
absl::Status ValidateEnvoyXdsOptions(const EnvoyXdsOptions& options);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_XDS_XDS_OPTIONS_H_
