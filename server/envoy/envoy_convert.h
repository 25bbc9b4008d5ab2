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

// The server-wide switches of the Envoy API.
struct EnvoyPolicy {
  // --envoy_shadow_mode: no descriptor denies a request; statuses still say OVER_LIMIT.
  bool shadow_mode = false;
  // --envoy_quota_mode: every descriptor is a quota descriptor (EnvoyDescriptorPlan::quota).
  bool quota_mode = false;
};

// The names of the rate-limit response headers (the reference's LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER). REQUIRES: valid HTTP header names
// (IsHttpHeaderName).
struct EnvoyHeaderNames {
  std::string limit = "RateLimit-Limit";
  std::string remaining = "RateLimit-Remaining";
  std::string reset = "RateLimit-Reset";
};

// What BuildEnvoyResponse adds beyond the statuses.
struct EnvoyResponseOptions {
  // Add RateLimit-Limit / -Remaining / -Reset from the most restrictive non-shadow descriptor.
  bool ratelimit_headers = false;
  // --envoy_shadow_mode: an OVER_LIMIT overall code is answered OK.
  bool shadow_mode = false;
  // The headers' names.
  EnvoyHeaderNames header_names;
};

// Validates `request` and decides, per descriptor, which rule applies and how it is evaluated.
// `config` must outlive the result (plans point into it). Errors: INVALID_ARGUMENT naming the
// field (domain, descriptors[i].entries[j].key, descriptors[i].hits_addend,
// descriptors[i].limit.unit, ...). Nothing is looked up in the store. A descriptor with
// is_negative_hits is a refund (Kind::kRefund) of its hits to every limit of its rule.
absl::StatusOr<std::vector<EnvoyDescriptorPlan>> PlanEnvoyRequest(
    const rlsv3::RateLimitRequest& request, const EnvoyConfig& config, EnvoyPolicy policy = {});

// Whether `name` is an HTTP header name (an RFC 9110 token: one or more of A-Z a-z 0-9
// !#$%&'*+-.^_`|~).
bool IsHttpHeaderName(absl::string_view name);

// Fills `response`: statuses in request order (each reporting its rule's tightest limit: see
// EnvoyOutcome::limit), overall_code, and (options.ratelimit_headers) the limit, remaining and
// reset headers named by options.header_names from the most restrictive non-shadow descriptor.
// The overall code is OVER_LIMIT when a descriptor that is not a quota descriptor is, or when
// every quota descriptor is over its limit and one of them is not in shadow mode (the
// reference's quota mode); answered OK in the server's shadow mode. Returns true when the
// server's shadow mode turned OVER_LIMIT into OK. REQUIRES: outcomes.size() == plan.size().
bool BuildEnvoyResponse(absl::Span<const EnvoyDescriptorPlan> plan,
                        absl::Span<const EnvoyOutcome> outcomes,
                        const EnvoyResponseOptions& options, rlsv3::RateLimitResponse* response);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_CONVERT_H_
