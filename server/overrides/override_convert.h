#ifndef RATELIMIT_SERVER_OVERRIDES_OVERRIDE_CONVERT_H_
#define RATELIMIT_SERVER_OVERRIDES_OVERRIDE_CONVERT_H_

// Conversions between the OverrideService protos and storage/overrides, with all validation of
// the caller's input (INVALID_ARGUMENT naming the field, NOT_FOUND for a limit the file does not
// define). Free functions: each is tested without a server; inputs are borrowed for the call.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/overrides/overridable_limits.h"
#include "storage/overrides/override.h"
#include "storage/overrides/override_store.h"

namespace ratelimit {

// Validates a target; errors name `field` + its subfield ("target.key"). LIMITS_FILE names a
// limit of the limits file; ENVOY names a domain, and envoy_path the rule (required), which the
// target's name becomes (the rule's state name, EnvoyStateName). INLINE is INVALID_ARGUMENT naming
// `source`.
absl::StatusOr<OverrideTarget> TargetFromProto(const v1::OverrideTarget& target,
                                               absl::string_view field);

// Validates a SetOverride request against the limits in force and the time `now_us`, and makes
// the override it sets (without set_by, set_at_us and replaced, which the service fills).
// INVALID_ARGUMENT naming the field ("override.limit.rate"), checked first for every field; then
// NOT_FOUND naming the target's field when `limits` does not define its limit; then
// INVALID_ARGUMENT when the override would make an invalid limit of the configured one.
absl::StatusOr<Override> OverrideFromProto(const v1::SetOverrideRequest& request,
                                           const OverridableLimits& limits, int64_t now_us);

// Checks a free text of the audit (`actor`, `reason`): at most `max_bytes`.
absl::Status ValidateText(absl::string_view text, size_t max_bytes, absl::string_view field);

// An override as the API shows it: expired and inert (its limit is not in `limits`, or it would
// make an invalid limit of it) computed at `now_us`.
void OverrideToProto(const Override& o, const OverridableLimits& limits, int64_t now_us,
                     v1::Override* out);

void AuditEntryToProto(const OverrideAuditEntry& e, const OverridableLimits& limits, int64_t now_us,
                       v1::OverrideAuditEntry* out);

// A page size: 0 gives 100; 1..1000 as is; else INVALID_ARGUMENT naming `field`.
absl::StatusOr<size_t> PageSize(int32_t page_size, absl::string_view field);

// Page tokens: of ListOverrides, the stored key of the last override of the previous page; of
// ListOverrideAudit, the sequence number of the last entry. A token that is not one of ours is
// INVALID_ARGUMENT naming `page_token`.
std::string OverridePageToken(const OverrideTarget& last);
absl::StatusOr<std::string> OverridePageStart(absl::string_view token);
std::string AuditPageToken(uint64_t last_sequence);
absl::StatusOr<uint64_t> AuditPageStart(absl::string_view token);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OVERRIDES_OVERRIDE_CONVERT_H_
