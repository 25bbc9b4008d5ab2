#ifndef RATELIMIT_STORAGE_APPLY_H_
#define RATELIMIT_STORAGE_APPLY_H_

// How an Operation is decided with storage/algebra: the pure part every store shares (a remote
// store re-runs it to explain what its engine decided) and the default StateStore::Apply built on
// StateStore::Update.

#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/algebra.h"
#include "storage/clock.h"
#include "storage/state_store.h"

namespace ratelimit {

// The distinct states an operation touches: `keys` in order of first mention, and for each limit
// of the operation the index in `keys` of its state.
// Inline for up to 4 limits: building them allocates nothing for a typical request.
struct OperationKeys {
  absl::InlinedVector<StateKey, 4> keys;
  absl::InlinedVector<size_t, 4> slot_of;
};
OperationKeys DistinctKeys(absl::Span<const LimitOp> limits);

// Decides `op` at `now_us` against `current`. A limit with `settle` set is settled
// (storage/algebra Settle) instead, and is always allowed; its Decision then carries `settled`.
// (the stored state of each of `keys.keys`, nullopt when there is none). Fills `writes` (one per
// key, initially nullopt) with the states to store: set for every key when the operation is allowed
// and not a check, untouched otherwise. Pure: the same inputs give the same outcome, bit for bit.
// REQUIRES: `keys` == DistinctKeys(op.limits); current.size() == writes.size() == keys.keys.size().
Outcome DecideOperation(const Operation& op, const OperationKeys& keys,
                        absl::Span<const std::optional<State>> current, int64_t now_us,
                        absl::Span<std::optional<State>> writes);

// The default StateStore::Apply: one `store.Update` whose callback reads `clock` and runs
// DecideOperation.
absl::StatusOr<Outcome> ApplyWithUpdate(StateStore& store, const Operation& op, const Clock& clock);

// Applies an operation that may carry records and settlements: one `store.UpdateWithRecords`
// whose callback returns the first present record (deciding nothing), else decides with
// DecideOperation and, unless the mode is kCheck, writes every record with op.record_value of the
// outcome. UNIMPLEMENTED from a store that keeps no records.
absl::StatusOr<Outcome> ApplyWithRecords(StateStore& store, const Operation& op,
                                         const Clock& clock);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_APPLY_H_
