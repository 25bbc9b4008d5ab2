#include "server/rlqs/rlqs_convert.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/serving/grpc_convert.h"

namespace ratelimit {

namespace rlqs = envoy::service::rate_limit_quota::v3;

absl::Status CheckRlqsDomain(absl::string_view domain, absl::string_view field) {
  if (domain.size() <= kMaxRlqsDomainBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": at most ", kMaxRlqsDomainBytes, " bytes, got ", domain.size()));
}

absl::StatusOr<RlqsBucketKey> ToRlqsBucketKey(
    const google::protobuf::Map<std::string, std::string>& pairs, absl::string_view field) {
  if (pairs.size() > kMaxRlqsBucketPairs) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", kMaxRlqsBucketPairs, " pairs, got ", pairs.size()));
  }
  RlqsBucketKey key;
  key.reserve(pairs.size());
  for (const auto& [k, v] : pairs) {
    if (k.empty())
      return absl::InvalidArgumentError(absl::StrCat(field, ": a key must not be empty"));
    key.emplace_back(k, v);
  }
  std::sort(key.begin(), key.end());
  return key;
}

absl::StatusOr<RlqsReports> ParseRlqsReports(const rlqs::RateLimitQuotaUsageReports& message,
                                             absl::string_view domain) {
  RlqsReports out;
  if (domain.empty()) {
    if (message.domain().empty()) {
      return absl::InvalidArgumentError("domain: required in the first message of a stream");
    }
    if (absl::Status s = CheckRlqsDomain(message.domain(), "domain"); !s.ok()) return s;
    out.domain = message.domain();
  } else {
    if (!message.domain().empty() && message.domain() != domain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "domain: \"", message.domain(), "\" differs from the stream's \"", domain, "\""));
    }
    out.domain = std::string(domain);
  }
  if (message.bucket_quota_usages().empty()) {
    return absl::InvalidArgumentError("bucket_quota_usages: at least one usage");
  }
  out.usages.reserve(message.bucket_quota_usages_size());
  for (int i = 0; i < message.bucket_quota_usages_size(); ++i) {
    const auto& u = message.bucket_quota_usages(i);
    const std::string field = absl::StrCat("bucket_quota_usages[", i, "]");
    if (u.bucket_id().bucket().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".bucket_id: at least one pair"));
    }
    absl::StatusOr<RlqsBucketKey> bucket =
        ToRlqsBucketKey(u.bucket_id().bucket(), absl::StrCat(field, ".bucket_id"));
    if (!bucket.ok()) return bucket.status();
    if (!u.has_time_elapsed()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".time_elapsed: required"));
    }
    const google::protobuf::Duration& d = u.time_elapsed();
    if (const char* problem = NonNegativeDurationProblem(d)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".time_elapsed: ", problem));
    }
    if (u.num_requests_allowed() > std::numeric_limits<uint64_t>::max() - u.num_requests_denied()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".num_requests_denied: allowed + denied overflows 64 bits"));
    }
    RlqsUsage usage;
    usage.bucket = *std::move(bucket);
    usage.allowed = u.num_requests_allowed();
    usage.denied = u.num_requests_denied();
    usage.elapsed_us =
        d.seconds() * kMicrosPerSecond + d.nanos() / 1000;  // checked: within 10,000 years
    out.usages.push_back(std::move(usage));
  }
  return out;
}

rlqs::RateLimitQuotaResponse::BucketAction ToBucketAction(const RlqsBucketKey& bucket,
                                                          const RlqsAssignment& assignment) {
  rlqs::RateLimitQuotaResponse::BucketAction action;
  auto& pairs = *action.mutable_bucket_id()->mutable_bucket();
  for (const auto& [k, v] : bucket) pairs[k] = v;
  if (assignment.kind == RlqsAssignment::Kind::kAbandon) {
    action.mutable_abandon_action();
    return action;
  }
  auto* q = action.mutable_quota_assignment_action();
  q->mutable_assignment_time_to_live()->set_seconds(assignment.ttl_seconds);
  envoy::type::v3::RateLimitStrategy* strategy = q->mutable_rate_limit_strategy();
  switch (assignment.kind) {
    case RlqsAssignment::Kind::kDenyAll:
      strategy->set_blanket_rule(envoy::type::v3::RateLimitStrategy::DENY_ALL);
      break;
    case RlqsAssignment::Kind::kTokenBucket: {
      envoy::type::v3::TokenBucket* tb = strategy->mutable_token_bucket();
      tb->set_max_tokens(assignment.token_bucket.max_tokens);
      tb->mutable_tokens_per_fill()->set_value(assignment.token_bucket.tokens_per_fill);
      tb->mutable_fill_interval()->set_seconds(assignment.token_bucket.fill_interval_seconds);
      break;
    }
    default:
      strategy->set_blanket_rule(envoy::type::v3::RateLimitStrategy::ALLOW_ALL);
      break;
  }
  return action;
}

}  // namespace ratelimit
