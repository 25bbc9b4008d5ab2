#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_CONVERT_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_CONVERT_H_

// Conversions between the Envoy RLS v3 protos and the domain types, with all validation of
// Envoy's input. Free functions, each tested without a server.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_plan.h"
#include "storage/limiter.h"

namespace ratelimit {

// Ownership and thread safety: the functions are pure; a plan points into the configuration
// snapshot it was made from (which must outlive it, see PlanEnvoyRequest), responses are written
// into the caller's message. Safe to call from any thread.

namespace rlsv3 = ::envoy::service::ratelimit::v3;

// Documented bounds of an Envoy request (beyond them: INVALID_ARGUMENT naming the field).
inline constexpr int kMaxEnvoyDescriptors = 64;  // descriptors per request
inline constexpr int kMaxEnvoyEntries = 32;      // entries per descriptor
// Entry values of one descriptor, joined into the state key: kMaxKeyBytes (1024) bytes.

// Validates `request` and decides, per descriptor, which rule applies and how it is evaluated.
// `config` must outlive the result (plans point into it). Errors: INVALID_ARGUMENT naming the
// field (domain, descriptors[i].entries[j].key, descriptors[i].hits_addend,
// descriptors[i].limit.unit, ...). Nothing is looked up in the store.
absl::StatusOr<std::vector<EnvoyDescriptorPlan>> PlanEnvoyRequest(
    const rlsv3::RateLimitRequest& request, const EnvoyConfig& config);

// The names of the rate-limit response headers (the reference's LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER). REQUIRES: valid HTTP header names
// (IsHttpHeaderName).
struct EnvoyHeaderNames {
  std::string limit = "RateLimit-Limit";
  std::string remaining = "RateLimit-Remaining";
  std::string reset = "RateLimit-Reset";
};

// Whether `name` is an HTTP header name (an RFC 9110 token: one or more of A-Z a-z 0-9
// !#$%&'*+-.^_`|~).
bool IsHttpHeaderName(absl::string_view name);

// Fills `response`: statuses in request order, overall_code, and (when `ratelimit_headers`)
// the limit, remaining and reset headers named by `header_names` from the most restrictive
// non-shadow descriptor. REQUIRES: outcomes.size() == plan.size().
void BuildEnvoyResponse(absl::Span<const EnvoyDescriptorPlan> plan,
                        absl::Span<const EnvoyOutcome> outcomes, bool ratelimit_headers,
                        rlsv3::RateLimitResponse* response,
                        const EnvoyHeaderNames& header_names = EnvoyHeaderNames());

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_CONVERT_H_
