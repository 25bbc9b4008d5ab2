#ifndef RATELIMIT_SERVER_TLS_TLS_H_
#define RATELIMIT_SERVER_TLS_TLS_H_

// TLS for the gRPC listener: server credentials that follow certificate rotation, the rule for
// plaintext listeners, and the identities of a verified client certificate.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/auth_context.h"

namespace ratelimit {

struct ServerTlsOptions {
  // PEM certificate chain and private key of the server; both or neither. Neither: no TLS.
  std::string cert_file;
  std::string key_file;
  // PEM bundle of the CAs that sign client certificates. Set: every client must present a
  // certificate that verifies against it (mTLS), or its handshake fails. Empty: client
  // certificates are not requested.
  std::string client_ca_file;
  // How often the three files are re-read. A changed certificate/key pair (or CA bundle) is used
  // for the connections made after the reload; a pair whose key does not match its certificate
  // (a rotation caught half-way) is skipped until the next check. Whole seconds, at least 1 s.
  // Default 1 minute.
  absl::Duration reload_interval = absl::Minutes(1);

  bool enabled() const {
    return !cert_file.empty() || !key_file.empty() || !client_ca_file.empty();
  }
};

// Checks the files of `options` (readable, PEM, the key belongs to the certificate, the CA bundle
// parses) and returns server credentials that serve them and re-read them every
// reload_interval (grpc::experimental::FileWatcherCertificateProvider). INVALID_ARGUMENT naming
// the flag (--tls_cert_file, --tls_key_file, --tls_client_ca_file, --tls_reload_interval) and
// the file otherwise. REQUIRES: options.enabled().
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const ServerTlsOptions& options);

// Whether `address` (a gRPC listening address: "host:port", "[v6]:port", "unix:path") can only
// be reached from this machine: 127.0.0.0/8, ::1, "localhost", or a Unix socket. A wildcard
// ("0.0.0.0", "[::]", empty host) or any other name is not.
bool IsLoopbackAddress(absl::string_view address);

// The identities a caller proved with its client certificate: the URI SANs (SPIFFE IDs among
// them) and DNS SANs of a certificate the server verified. Empty for plaintext callers and for
// TLS callers without a client certificate.
std::vector<std::string> PeerIdentities(const grpc::AuthContext& context);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_TLS_TLS_H_
