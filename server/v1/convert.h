#ifndef RATELIMIT_SERVER_V1_CONVERT_H_
#define RATELIMIT_SERVER_V1_CONVERT_H_

// Conversions between the ratelimit.v1 protos and the domain types, with all validation of
// client input. Free functions, so each is tested without a server.

#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/serving/grpc_convert.h"
#include "server/v1/limits_file.h"
#include "storage/limiter.h"

namespace ratelimit {

// Ownership and thread safety: every function here is a pure conversion; inputs are borrowed
// for the call, results are returned by value or written into the caller's message (not
// retained). Safe to call from any thread.

// Converts an inline config. INVALID_ARGUMENT naming `prefix` + field on any bad value.
absl::StatusOr<LimitConfig> ConfigFromProto(const v1::LimitConfig& config,
                                            absl::string_view prefix);

// Whether requests may define limits inline (--inline_limits).
enum class InlineLimits {
  kAllow,  // default
  kDeny,   // a request with an inline config gets PERMISSION_DENIED
};

// Validates `request` and resolves each limit to its definition: the server's (`limits`) when it
// defines the name (source kDefined), else the inline config (source kInline). Errors:
// INVALID_ARGUMENT naming the field (sizes, counts, configs, an inline config for a
// server-defined name); PERMISSION_DENIED naming limits[i].config for an inline config when
// `inline_limits` is kDeny; NOT_FOUND for a name that is neither defined nor given a config.
absl::StatusOr<LimitRequests> ResolveRequest(const v1::RateLimitRequest& request,
                                             const LimitSet& limits,
                                             InlineLimits inline_limits = InlineLimits::kAllow);

// ResolveRequest over a request's repeated `limits` (Acquire's too).
absl::StatusOr<LimitRequests> ResolveLimits(
    const google::protobuf::RepeatedPtrField<v1::LimitRequest>& limits, const LimitSet& defined,
    InlineLimits inline_limits = InlineLimits::kAllow);

// One limit named by its own fields (a Release's `name`, `key` and `config`; `config` null when
// unset), resolved as ResolveLimits resolves a request's only limit, its errors naming the fields
// bare ("key: ...", "config.capacity: ...").
absl::StatusOr<LimitRequest> ResolveNamedLimit(absl::string_view name, absl::string_view key,
                                               const v1::LimitConfig* config,
                                               const LimitSet& defined,
                                               InlineLimits inline_limits = InlineLimits::kAllow);

// INVALID_ARGUMENT naming `limits[i].name` when limits[i] is a concurrency limit, whose slots
// only Acquire takes; `where` names the refusing call ("Consume", "a Batch").
absl::Status RefuseConcurrencyLimits(absl::Span<const LimitRequest> limits,
                                     absl::string_view where);

// Whether `limits` name a concurrency limit (whose slots only the lease path reads and takes).
bool NamesConcurrencyLimit(absl::Span<const LimitRequest> limits);

// INVALID_ARGUMENT naming `limits[i].count` when a concurrency limit among `limits` asks for
// other than a whole number of slots, 1..1e9 (the count of a rate limit is a number of tokens,
// validated with the request).
absl::Status CheckSlotCounts(absl::Span<const LimitRequest> limits);

// `d` as a message shows it, exactly as sent ("500ns", "1m0.000001s", "-1s"), never rounded to
// the microseconds the server keeps; fields no valid Duration has, as they are
// ("{seconds: 5, nanos: -1}").
std::string DurationText(const google::protobuf::Duration& d);

// A google.protobuf.Duration as microseconds (truncating below 1us), validated: INVALID_ARGUMENT
// naming `field` + `leaf` when it is not a valid Duration, negative, or over 100 years.
absl::StatusOr<int64_t> DurationMicros(const google::protobuf::Duration& d, absl::string_view field,
                                       absl::string_view leaf);

// Batch bounds: entries per call, and limits over all its entries.
inline constexpr int kMaxBatchEntries = 1000;
inline constexpr int kMaxBatchLimits = 4096;

// One entry of a Batch, validated and resolved on its own: either `error` (the entry's own
// error, its fields named `entries[i]...`) or `limits` to decide with `mode`.
struct BatchEntryPlan {
  Mode mode = Mode::kConsume;
  absl::Status error;
  LimitRequests limits;
  bool receipts = true;  // false: the entry's request asked to omit them
};

// Validates a Batch: the whole call (INVALID_ARGUMENT naming `entries` when it has no entries,
// more than kMaxBatchEntries, or more than kMaxBatchLimits limits in all), then each entry as
// ResolveRequest would its request, with errors naming `entries[i].` + the field; an entry
// carrying a request_id is INVALID_ARGUMENT naming `entries[i].request_id`; one naming a
// concurrency limit is a CHECK (its slot counts checked as CheckSlotCounts does, naming
// `entries[i].limits[j].count`) or INVALID_ARGUMENT naming `entries[i].limits[j].name`,
// for a CONSUME or RESERVE, which cannot take slots; an unknown method
// INVALID_ARGUMENT naming `entries[i].method`. One plan per entry, in order.
absl::StatusOr<std::vector<BatchEntryPlan>> ResolveBatch(
    const v1::BatchRequest& request, const LimitSet& limits,
    InlineLimits inline_limits = InlineLimits::kAllow);

// Writes `error` (not OK) as the result of one Batch entry.
void EntryErrorToProto(const absl::Status& error, v1::BatchResult* result);

// Fills `response` from a verdict on `limits`. An AcquireResponse carries the same fields as a
// RateLimitResponse (allowed, results, retry_at, retry_after, reason, denied_by) and is filled
// the same way, directly.
void VerdictToProto(const Verdict& verdict, absl::Span<const LimitRequest> limits,
                    v1::RateLimitResponse* response);
void VerdictToProto(const Verdict& verdict, absl::Span<const LimitRequest> limits,
                    v1::AcquireResponse* response);

// Fills `response` for a request allowed without evaluation because the store failed and the
// failure policy is "open".
void FailedOpenToProto(absl::Span<const LimitRequest> limits, v1::RateLimitResponse* response);

// What a Reset request deletes.
struct ResetTarget {
  LimitSource source = LimitSource::kDefined;
  // The state name: the limit name; for ENVOY, named by the Envoy API from the domain and path
  // (RateLimitServiceImpl::set_envoy_reset_resolver), empty until then.
  std::string name;
  // Empty when all_keys.
  std::string key;
  bool all_keys = false;
  // The limit as an operator reads it in logs ("api"; for Envoy the dotted "web.user").
  std::string display_name;
  // ENVOY only: the domain, the descriptor path (key, value; an override's values are empty),
  // and whether the target is an override (a limit Envoy sent).
  std::string envoy_domain;
  std::vector<std::pair<std::string, std::string>> envoy_path;
  bool envoy_override = false;
  // Set by the resolver of ENVOY targets: what follows `key` in the keys of the target's other
  // states (a rule with several limits keeps limit i > 0 under key + suffix i); a Reset of one
  // key resets those too.
  std::vector<std::string> key_suffixes;
  // Set by the resolver of ENVOY targets: the target is a concurrency rule, whose reset ends its
  // leases.
  bool envoy_concurrency = false;
};

// Validates a Reset request and names the states it deletes (INVALID_ARGUMENT naming the field).
absl::StatusOr<ResetTarget> ResetFromProto(const v1::ResetRequest& request);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_CONVERT_H_
