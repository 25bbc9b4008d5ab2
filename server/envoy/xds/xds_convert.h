#ifndef RATELIMIT_SERVER_ENVOY_XDS_XDS_CONVERT_H_
#define RATELIMIT_SERVER_ENVOY_XDS_XDS_CONVERT_H_

// The rate-limit configuration an xDS management server sends (RateLimitConfig resources, one
// domain each) as the Envoy configuration in force. Each resource is written as the YAML text of
// the file it stands for and parsed by the one YAML loader (envoy_config_loader.h), so that a
// resource and a file mean the same and are validated the same way.

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "server/envoy/envoy_config.h"

namespace ratelimit {

// The type URL of the resources the xDS client asks for and accepts.
inline constexpr char kRateLimitConfigTypeUrl[] =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

// The YAML file `config` stands for. A field is written only when it is set (proto3: differs
// from its default), so the loader's defaults and rules apply to what the management server left
// out (a rate_limit without a unit is "required", as in a file). requests_per_unit is written
// whenever the limit is not unlimited (0 blocks, as in the reference). quota_mode and a metadata
// with fields are written as the keys of the same names; the loader refuses keys it does not
// know. `name` is not part of the YAML (it names the source).
// Thread safety: pure.
std::string RateLimitConfigToYaml(
    const ::ratelimit::config::ratelimit::v3::RateLimitConfig& config);

// The whole configuration of one state-of-the-world response: every resource unpacked, written
// as YAML and parsed with source "xds:<name>" (or "xds:resources[<i>]" for a resource without a
// name). INVALID_ARGUMENT, leaving nothing built, when a resource is not a RateLimitConfig
// (its type URL or bytes), two resources share a name, two define one domain (naming both), or
// the loader refuses one (its error, which names the source and the field). No resources: no
// domains.
// Thread safety: pure.
absl::StatusOr<EnvoyConfig> BuildEnvoyConfigFromResources(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_XDS_XDS_CONVERT_H_
