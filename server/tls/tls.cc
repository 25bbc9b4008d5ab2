#include "server/tls/tls.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/tls/tls_files.h"

namespace ratelimit {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const ServerTlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError(
        options.cert_file.empty()
            ? "--tls_cert_file: required with --tls_key_file or --tls_client_ca_file"
            : "--tls_key_file: required with --tls_cert_file");
  }
  if (options.reload_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--tls_reload_interval: must be at least 1s");
  }
  // The provider logs and skips unusable files; checking them here turns a bad start-up
  // configuration into one clear error instead of a server whose every handshake fails.
  absl::StatusOr<PemKeyPair> pair =
      ReadPemKeyPair("--tls_cert_file", options.cert_file, "--tls_key_file", options.key_file);
  if (!pair.ok()) return pair.status();
  if (!options.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemCertificates("--tls_client_ca_file", options.client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  const auto seconds = static_cast<unsigned int>(
      std::min<int64_t>(absl::ToInt64Seconds(options.reload_interval), int64_t{24} * 3600 * 365));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, options.client_ca_file, seconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.client_ca_file.empty()) {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(tls);
  if (!credentials) return absl::InternalError("gRPC could not create TLS server credentials");
  return credentials;
}

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  absl::string_view host;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return false;
    host = address.substr(1, close - 1);
  } else {
    const size_t colon = address.rfind(':');
    host = colon == absl::string_view::npos ? address : address.substr(0, colon);
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

std::vector<std::string> PeerIdentities(const grpc::AuthContext& context) {
  std::vector<std::string> out;
  if (!context.IsPeerAuthenticated()) return out;
  for (const char* property : {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
      out.emplace_back(value.data(), value.size());
    }
  }
  return out;
}

}  // namespace ratelimit
