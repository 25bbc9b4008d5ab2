#ifndef RATELIMIT_SERVER_ENVOY_XDS_XDS_CHANNEL_H_
#define RATELIMIT_SERVER_ENVOY_XDS_XDS_CHANNEL_H_

// The gRPC channel to the xDS management server: plaintext, TLS or mTLS as the options say.

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/envoy/xds/xds_options.h"

namespace ratelimit {

// What a channel to the management server is made of; the files are read once, by
// MakeXdsChannelSpec, so that a bad one fails start-up.
struct XdsChannelSpec {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments arguments;
};

// Reads the TLS files of `options` (when options.tls) and returns the credentials and channel
// arguments: TLS verifying the server against tls_ca_file (or the system roots), presenting the
// client certificate when set, expecting tls_server_name when set; plaintext otherwise. The
// channel's own reconnection backoff follows retry_initial/retry_max, and each channel gets
// subchannels of its own (no reconnection state shared with an earlier channel).
// INVALID_ARGUMENT naming the flag and the file when one cannot be read or is not PEM.
// REQUIRES: ValidateEnvoyXdsOptions(options) is OK.
absl::StatusOr<XdsChannelSpec> MakeXdsChannelSpec(const EnvoyXdsOptions& options);

// A new channel to options.server.
std::shared_ptr<grpc::Channel> NewXdsChannel(const EnvoyXdsOptions& options,
                                             const XdsChannelSpec& spec);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_XDS_XDS_CHANNEL_H_
