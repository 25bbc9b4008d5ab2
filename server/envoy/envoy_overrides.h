#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_OVERRIDES_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_OVERRIDES_H_

// Runtime overrides of Envoy descriptor rules (docs/overrides.md, "Envoy rules"): an override
// whose source is ENVOY targets one configured rule (its state_name) and one key or key pattern
// of the descriptor's joined values (EnvoyStateKey). It adjusts the rule's first limit; an
// unlimited or blocked override applies to the whole rule. Free functions; thread-compatible.

#include <cstdint>

#include "absl/types/span.h"
#include "server/envoy/envoy_plan.h"
#include "storage/overrides/override_index.h"

namespace ratelimit {

// Applies the overrides of `index` in force at `now_us` to the descriptors of `plan` that a
// configured rule limits (kLimited) or refunds (kRefund):
//   - a limit override adjusts the first limit's LimitRequest (its config, with the change the
//     key's state crosses, and override_target) and the limit the status reports (override_rule:
//     a copy of the rule whose first limit reads as the override's rate, see EnvoyReportedLimit);
//   - `unlimited` makes the descriptor kUnlimited (a refund too, reported as a configured
//     unlimited rule reports one), `blocked` makes it kBlocked, reported as a rule of 0 requests
//     per unit (a refund of a blocked rule: kNoLimit); neither takes or gives back anything.
// A descriptor that uses no override is left as it is, except that its first LimitRequest may
// carry the change back to its configured limit (an override deleted or expired).
// Returns how many descriptors an override decided.
size_t ApplyEnvoyOverrides(const OverrideIndex& index, int64_t now_us,
                           absl::Span<EnvoyDescriptorPlan> plan);

// `configured` as Envoy's RateLimit message can report `adjusted` (a limit override applied to
// it): requests_per_unit in the configured unit, else in the first longer unit where it is at
// least 1, rounded down; the token bucket's burst and max_reserved from `adjusted`, rounded down.
// A period that is exactly one unit's length reports in that unit. A token bucket's rate is its
// rate; a fixed window's is what each window admits, the rate but at most the capacity (0 when
// the capacity is below 1: no window admits a request).
EnvoyLimit EnvoyReportedLimit(const EnvoyLimit& configured, const LimitConfig& adjusted);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_OVERRIDES_H_
