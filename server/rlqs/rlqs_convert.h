#ifndef RATELIMIT_SERVER_RLQS_RLQS_CONVERT_H_
#define RATELIMIT_SERVER_RLQS_RLQS_CONVERT_H_

// The RLQS stream's messages to and from the buckets' terms (rlqs_buckets.h): a usage report
// checked and converted, an assignment as Envoy's BucketAction. Pure functions; safe from any
// thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"
#include "google/protobuf/map.h"
#include "server/rlqs/rlqs_buckets.h"

namespace ratelimit {

// The bounds of what a stream reports, which the administrative view takes too: a domain of at
// most this many bytes, a BucketId of at most this many pairs, each with a key.
inline constexpr size_t kMaxRlqsDomainBytes = 256;
inline constexpr size_t kMaxRlqsBucketPairs = 32;

// A domain past kMaxRlqsDomainBytes: INVALID_ARGUMENT naming `field`.
absl::Status CheckRlqsDomain(absl::string_view domain, absl::string_view field);

// A BucketId's pairs as a bucket key, sorted. INVALID_ARGUMENT naming `field` for more than
// kMaxRlqsBucketPairs pairs or an empty key. No pairs give an empty key: whether one is allowed
// is the caller's to say.
absl::StatusOr<RlqsBucketKey> ToRlqsBucketKey(
    const google::protobuf::Map<std::string, std::string>& pairs, absl::string_view field);

// One usage of a checked message.
struct RlqsUsage {
  RlqsBucketKey bucket;
  uint64_t allowed = 0;
  uint64_t denied = 0;
  int64_t elapsed_us = 0;  // time_elapsed, to the microsecond
};

// Checks one message of a stream and converts it. `domain` is the stream's ("" before its
// first message); the result's domain is the stream's afterwards. INVALID_ARGUMENT naming the
// field (domain, bucket_quota_usages[i].bucket_id, ...time_elapsed) when malformed or past the
// bounds above.
struct RlqsReports {
  std::string domain;
  std::vector<RlqsUsage> usages;
};
absl::StatusOr<RlqsReports> ParseRlqsReports(
    const envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports& message,
    absl::string_view domain);

// An assignment as Envoy's BucketAction.
envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse::BucketAction ToBucketAction(
    const RlqsBucketKey& bucket, const RlqsAssignment& assignment);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_CONVERT_H_
