#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_EVALUATOR_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_EVALUATOR_H_

#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/envoy/envoy_plan.h"
#include "server/serving/decision_scheduler.h"
#include "storage/clock.h"

namespace ratelimit {

// Ownership and thread safety: EvaluateEnvoyPlan borrows `scheduler`, `clock` and `plan` for the
// call and retains none of them; it is safe to call from any thread (DecisionScheduler is
// thread-safe and the store isolates the transactions).

// Evaluates the descriptors of one ShouldRateLimit request, all-or-nothing: either every
// kLimited descriptor that adds hits is consumed in one store transaction (every limit of its
// rule), or none is.
//
//  0. Refunds (kRefund) first, together in one settlement transaction: each gives its hits back
//     to every limit of its rule (never above capacity; a fixed window only in its current one).
//     Then releases (kRelease), each a lease operation of its own; a release is never over.
//  1. Checks (nothing written): descriptors with hits 0 ask "would one more hit be allowed?"
//     (a concurrency rule's: "is a slot free?", a lease check of its own);
//     descriptors whose rule has max_reserved must have at least one token left before they may
//     go into debt.
//  2. If a descriptor that is not soft (shadow or quota) failed a check or is blocked
//     (requests_per_unit 0), or every quota descriptor is over (and one is not a shadow), the
//     others are only checked, so their statuses are true and nothing is consumed.
//  3. Otherwise the rest are consumed together (Mode::kReserve, with max_reserved 0 for limits
//     without it, when any rule allows debt). When the only descriptors over their limit are soft
//     and not every quota descriptor is over, they are left out and the others are tried again:
//     a shadow rule, or a spent quota while another quota is left, never denies a request and
//     never drains the others. A kAcquire descriptor (at most one per request) makes each such
//     transaction one lease operation: its slots and the others' rate limits all-or-nothing, in
//     Mode::kConsume (no debt). Blocked, its slots are only checked.
//
// Store transactions (DecisionScheduler::Evaluate and Settle calls) per request:
//  - one when no descriptor needs a check (no hits 0, no max_reserved), none is a refund and no
//    soft descriptor is over its limit: the common case;
//  - one for the refunds, when there are any;
//  - one when a check or a blocked descriptor blocks the request (the check transaction also
//    checks the descriptors that add hits), and one when every descriptor only checks;
//  - one for the checks plus one for the consume when the checks pass;
//  - plus one per retry without soft descriptors found over their limit (one in the absence of
//    concurrent requests on the same keys).
//
// Returns one outcome per descriptor of `plan` (kNoLimit and kUnlimited ones carry only the
// time). A store failure is returned as the store's status; nothing was consumed then (refunds
// made before the failure stay made).
absl::StatusOr<std::vector<EnvoyOutcome>> EvaluateEnvoyPlan(
    DecisionScheduler& scheduler, const Clock& clock, absl::Span<const EnvoyDescriptorPlan> plan);

// Called once with the outcomes of EvaluateEnvoyPlanAsync (or the store's error).
using EnvoyDone = absl::AnyInvocable<void(absl::StatusOr<std::vector<EnvoyOutcome>>) &&>;

// EvaluateEnvoyPlan, answered through `done`. The common case (one consume transaction: no
// descriptor needs a check, a reservation or a refund, none is soft or blocked) is one
// DecisionScheduler::Decide, with the serving loop's `burst` (may be null), so the calling thread
// does not wait for the store's write; `done` then runs once the decision is durable. Every other
// plan is evaluated synchronously (EvaluateEnvoyPlan and then `done`) where the store may be
// waited for (DecisionScheduler::RunBlocking: possibly a store thread). Same outcomes and
// transactions as EvaluateEnvoyPlan. REQUIRES: `scheduler`, `clock` and `plan` (and what it points
// into) live until `done` has run.
void EvaluateEnvoyPlanAsync(DecisionScheduler& scheduler, const Clock& clock,
                            absl::Span<const EnvoyDescriptorPlan> plan, ServingLoop::Burst* burst,
                            EnvoyDone done);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_EVALUATOR_H_
