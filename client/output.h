#ifndef RATELIMIT_CLIENT_OUTPUT_H_
#define RATELIMIT_CLIENT_OUTPUT_H_

#include <string>

#include "absl/time/time.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {

// Human-readable rendering of a reply, one line for the verdict and one per limit:
//   DENIED by api/user-1: INSUFFICIENT_TOKENS, retry in 1.5s (at 2026-11-21T10:00:01.5Z)
//     api/user-1  denied   value=0.25 of 10
std::string FormatResponse(const v1::RateLimitResponse& response, absl::Time now);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_OUTPUT_H_
