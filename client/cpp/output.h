#ifndef RATELIMIT_CLIENT_OUTPUT_H_
#define RATELIMIT_CLIENT_OUTPUT_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {

// Human-readable rendering of a reply, one line for the verdict and one per limit (with its
// receipt, base64, when the call took tokens):
//   DENIED by api/user-1: INSUFFICIENT_TOKENS, retry in 1.5s (at 2026-11-21T10:00:01.5Z)
//     api/user-1  denied   value=0.25 of 10
std::string FormatResponse(const v1::RateLimitResponse& response, absl::Time now);

// Human-readable rendering of a Settle reply, one line per settlement:
//   SETTLED
//     llm/org-7  returned=1200 charged=0 uncharged=0 value=8200
std::string FormatSettleResponse(const v1::SettleResponse& response);

// Human-readable rendering of a Reset reply for `target` (name/key, or the name and " (all
// keys)"), naming what was deleted: "reset api/u1: 1 state deleted", "reset jobs/t: 2 leases
// ended", "reset jobs (all keys): leases ended on 3 keys", "reset api/u1: nothing to reset (no
// state or lease held)".
std::string FormatResetResponse(const std::string& target, bool all_keys,
                                const v1::ResetResponse& response);

// A BucketId as key=value items in key order, joined by ',', with a ',', '=' or '\' inside a
// key or value escaped by a '\': what the command line's --bucket reads back.
std::string FormatBucketId(const std::map<std::string, std::string>& pairs);

// Human-readable rendering of the live RLQS assignments, a bucket (its pairs in key order) and
// its rule, then one line per subscribed stream:
//   tenant=a  rule per_tenant: token bucket 100/s burst 50
//     stream 7  ipv4:10.0.0.7:51234  demand 30/s  assigned 30/s burst 15 (30 per 1s, max 15)
//       ttl 15s  sent 2026-11-21T10:00:01.000Z
// and, when there is a next page, how to ask for it.
std::string FormatRlqsAssignments(const v1::GetRlqsAssignmentsResponse& response);

// A reply as one line of JSON (proto field names, default values included; bytes such as
// receipts in base64). INVALID_ARGUMENT
// with the converter's reason when the reply cannot be written as JSON (e.g. a Timestamp out of
// its range), never an empty string.
absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& response);

// An error as one line of JSON, for callers that read --json output:
//   {"error":{"code":"NOT_FOUND","message":"name: no limit \"x\" in the limits file"}}
std::string FormatJsonError(const absl::Status& error);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_OUTPUT_H_
