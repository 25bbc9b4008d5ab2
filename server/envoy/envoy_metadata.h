#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_METADATA_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_METADATA_H_

// The response's dynamic_metadata (--envoy_response_dynamic_metadata), as the reference's
// RESPONSE_DYNAMIC_METADATA builds it, for Envoy to hand to later filters and access logs.

#include "absl/types/span.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/struct.pb.h"
#include "server/envoy/envoy_plan.h"

namespace ratelimit {

// The dynamic metadata of one answered request:
//   domain:      the request's domain
//   descriptors: one struct per request descriptor, in order: `entries` ["key=value", ...],
//                `limit` (the descriptor's limit override in protobuf text format, when it has
//                one), `hitsAddend` (the descriptor's hits_addend, when set)
//   hitsAddend:  the request's hits_addend, when not 0
//   metadata:    the `metadata` of the rules of the descriptors that passed (status not
//                OVER_LIMIT; unlimited, replaced and unmatched descriptors contribute nothing),
//                merged in request order: a key already present is kept, except that two structs
//                under one key are merged the same way. Absent when empty.
// REQUIRES: plan and statuses come from `request` (one each per descriptor, as
// PlanEnvoyRequest and BuildEnvoyResponse make them). Pure; thread-compatible.
google::protobuf::Struct EnvoyDynamicMetadata(
    const envoy::service::ratelimit::v3::RateLimitRequest& request,
    absl::Span<const EnvoyDescriptorPlan> plan,
    const google::protobuf::RepeatedPtrField<
        envoy::service::ratelimit::v3::RateLimitResponse::DescriptorStatus>& statuses);

// Hands Envoy the token of the lease the request took (EnvoyOutcome::lease_token), if it took
// one: the response's dynamic_metadata field kEnvoyLeaseKey, whatever
// --envoy_response_dynamic_metadata says, for the route's stream-done rate limit to send back in a
// release descriptor (docs/leases.md, "Envoy"). Leaves the response's dynamic_metadata as it is
// (unset) when it took none. Returns whether it added one.
bool AddEnvoyLeaseToken(absl::Span<const EnvoyOutcome> outcomes,
                        envoy::service::ratelimit::v3::RateLimitResponse* response);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_METADATA_H_
