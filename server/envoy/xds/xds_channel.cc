#include "server/envoy/xds/xds_channel.h"

#include <algorithm>
#include <limits>

#include "grpc/grpc.h"
#include "grpc/grpc_security_constants.h"
#include "server/tls/tls_files.h"

namespace ratelimit {
namespace {

int Millis(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, std::numeric_limits<int>::max()));
}

}  // namespace

absl::StatusOr<XdsChannelSpec> MakeXdsChannelSpec(const EnvoyXdsOptions& options) {
  XdsChannelSpec spec;
  spec.arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  spec.arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Millis(options.retry_initial));
  spec.arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, Millis(options.retry_initial));
  spec.arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(options.retry_max));
  // Resources can be large: a whole configuration in one response.
  spec.arguments.SetMaxReceiveMessageSize(-1);
  if (!options.tls) {
    spec.credentials = grpc::InsecureChannelCredentials();
    return spec;
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemCertificates("--envoy_xds_tls_ca_file", options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<PemKeyPair> pair =
        ReadPemKeyPair("--envoy_xds_tls_cert_file", options.tls_cert_file,
                       "--envoy_xds_tls_key_file", options.tls_key_file);
    if (!pair.ok()) return pair.status();
    ssl.pem_cert_chain = std::move(pair->certificate_chain);
    ssl.pem_private_key = std::move(pair->private_key);
  }
  if (!options.tls_server_name.empty()) {
    // The name checked against the certificate's SANs, sent as SNI and as the :authority.
    spec.arguments.SetSslTargetNameOverride(options.tls_server_name);
  }
  spec.credentials = grpc::SslCredentials(ssl);
  return spec;
}

std::shared_ptr<grpc::Channel> NewXdsChannel(const EnvoyXdsOptions& options,
                                             const XdsChannelSpec& spec) {
  return grpc::CreateCustomChannel(options.server, spec.credentials, spec.arguments);
}

}  // namespace ratelimit
