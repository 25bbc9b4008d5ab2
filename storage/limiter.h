#ifndef RATELIMIT_STORAGE_LIMITER_H_
#define RATELIMIT_STORAGE_LIMITER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/algebra.h"
#include "storage/clock.h"
#include "storage/leases/lease.h"
#include "storage/limit_config.h"
#include "storage/state_store.h"

namespace ratelimit {

// One limit of a request, resolved to its definition and validated.
struct LimitRequest {
  std::string name;
  std::string key;
  LimitConfig config;
  double count = 1;
  // The namespace of the limit's state: the source of its definition.
  LimitSource source = LimitSource::kDefined;
  // The key or pattern of the runtime override that adjusted `config` (storage/overrides);
  // empty when none did.
  std::string override_target = std::string();
};

// A request's limits, resolved. Most requests carry one limit: it is held inline, so resolving it
// allocates nothing beyond its strings.
using LimitRequests = absl::InlinedVector<LimitRequest, 1>;

// The answer to a whole request.
struct Verdict {
  // Every limit allowed (and, unless checking, every one was consumed).
  bool allowed = false;
  // One per requested limit, in request order.
  Decisions decisions;
  // Index of the deciding denial (one that can never allow, else the one with the latest
  // retry_at); -1 when allowed.
  int denied_by = -1;
  // Denied: the latest retry_at among the denials, unset when one can never allow.
  // Allowed reservation: the latest retry_at among the limits.
  std::optional<int64_t> retry_at_us;
  // The time the decision was made at.
  int64_t now_us = 0;
  // Set when Evaluate was given a record that was already present: the bytes remembered with
  // it. Nothing was decided then; the other fields are empty.
  std::optional<std::string> remembered = std::nullopt;
};

// A request's answer to remember (idempotent retries): the record, and the bytes to store with
// it for a verdict (a pure function of the verdict and what it captured; it may run more than
// once).
struct Remember {
  RecordSpec record;
  std::function<std::string(const Verdict&)> encode;
};

// One receipt to settle: what was taken and when, what was used, and the record that marks the
// receipt as spent.
struct SettleItem {
  std::string name;
  std::string key;
  LimitSource source = LimitSource::kDefined;
  LimitConfig config;
  double taken = 0;  // REQUIRES: finite and > 0
  double used = 0;   // REQUIRES: finite and >= 0
  int64_t taken_at_us = 0;
  // The balance the take left (from the receipt); unset for a receipt that does not carry it.
  std::optional<double> value_after_take;
  RecordSpec spent;
};

// The answer to a Settle.
struct SettleVerdict {
  // Set when a receipt was already spent: its index. Nothing was settled then.
  std::optional<size_t> already_settled;
  // One per item, in order (empty when already_settled).
  std::vector<Settled> results;
  int64_t now_us = 0;
};

// One request of a batch (Limiter::EvaluateBatch): its limits and how to decide them.
struct BatchItem {
  // REQUIRES: 1..N limits, every config and count valid (see limit_config.h). Borrowed: must
  // outlive the EvaluateBatch call.
  absl::Span<const LimitRequest> limits;
  Mode mode = Mode::kConsume;
};

// The verdict on an outcome of Apply: picks the deciding denial and the verdict's retry_at.
// Pure.
Verdict VerdictOf(Outcome outcome);

// Evaluates requests of one or more limits against a StateStore, all-or-nothing: either every
// limit is consumed in one store transaction, or nothing is written. The store decides
// (StateStore::Apply); the Limiter picks the deciding denial and the verdict's retry_at.
//
// Thread safety: thread-safe; the store provides the isolation.
class Limiter {
 public:
  // `store` and `clock` are not owned and must outlive the Limiter.
  Limiter(StateStore& store, const Clock& clock) : store_(store), clock_(clock) {}
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // REQUIRES: 1 <= limits.size(), every config and count valid (see limit_config.h).
  // A concurrency limit (kind kConcurrency) is INVALID_ARGUMENT naming `limits[i].config.kind`
  // here and in every other Evaluate: leases decide it (StateStore::ApplyLease).
  // A store failure is returned as the store's status; nothing was consumed then.
  absl::StatusOr<Verdict> Evaluate(absl::Span<const LimitRequest> limits, Mode mode);

  // Called once with the verdict of EvaluateAsync.
  using VerdictDone = absl::AnyInvocable<void(absl::StatusOr<Verdict>) &&>;
  // Evaluate, answered through `done` (StateStore::ApplyAsync): the calling thread does not wait
  // for the store's write; `done` may run before this returns or later on a store thread (outside
  // the store's locks). `limits` need only live for the call.
  void EvaluateAsync(absl::Span<const LimitRequest> limits, Mode mode, VerdictDone done);
  // Whether EvaluateAsync never waits for the store's peer on the calling thread.
  bool AsyncNeverWaits() const { return !store_.ApplyAsyncMayWait(); }
  // Whether EvaluateBatch decides on this machine, never waiting for the store's peer.
  bool BatchesDecideLocally() const { return store_.BatchesDecideLocally(); }

  // Evaluate, remembering the answer under `remember.record` in the same transaction; when the
  // record is already present, returns its bytes (Verdict::remembered) without deciding.
  // REQUIRES: mode is not kCheck. UNIMPLEMENTED from a store that keeps no records.
  absl::StatusOr<Verdict> Evaluate(absl::Span<const LimitRequest> limits, Mode mode,
                                   const Remember& remember);

  // Evaluates independent requests with one call of StateStore::ApplyBatch (so a store that
  // writes a batch together, as RocksDB does, writes them all at once): each item exactly as
  // Evaluate(item.limits, item.mode) would, one after the other in order, each all-or-nothing on
  // its own and seeing the effect of the earlier ones. One result per item, in order; a store
  // failure fails the items it concerns only (nothing was consumed for them). Empty `items`:
  // empty result, no store call.
  std::vector<absl::StatusOr<Verdict>> EvaluateBatch(absl::Span<const BatchItem> items);

  // Settles `items` all-or-nothing in one transaction that also marks each receipt spent (its
  // `spent` record). REQUIRES: 1..N items with distinct records. UNIMPLEMENTED from a store that
  // keeps no records.
  absl::StatusOr<SettleVerdict> Settle(absl::Span<const SettleItem> items);

  // Decides a lease op (and an acquire's rate limits) in one store transaction
  // (StateStore::ApplyLease; storage/leases/lease.h). UNIMPLEMENTED from a store that keeps no
  // leases.
  absl::StatusOr<LeaseOutcome> Lease(const LeaseOperation& op) {
    return store_.ApplyLease(op, clock_);
  }
  // Lease, answering through `done` (StateStore::ApplyLeaseAsync): from RocksDB once the WAL
  // group is written, on whichever thread wrote it. `op` need only live for the call.
  void LeaseAsync(const LeaseOperation& op, StateStore::LeaseDone done) {
    store_.ApplyLeaseAsync(op, clock_, std::move(done));
  }
  // Lease for each of `ops`, concurrent calls, one after the other in an order the store may
  // choose, with one store call (StateStore::ApplyLeaseBatch: on RocksDB one WAL write). One
  // result per operation, in the order given.
  std::vector<absl::StatusOr<LeaseOutcome>> LeaseBatch(
      absl::Span<const LeaseOperation* const> ops) {
    return store_.ApplyLeaseBatch(ops, clock_);
  }
  // Ends every lease of every key of concurrency limit `name` (StateStore::DeleteAllLeases).
  absl::StatusOr<uint64_t> ResetAllLeases(const std::string& name, LimitSource source) {
    return store_.DeleteAllLeases(source, name, clock_.NowMicros());
  }
  // A page of the concurrency keys holding a lease that expired unreleased by the limiter's
  // clock (StateStore::FindLeakedLeaseKeys), from `cursor` on.
  absl::StatusOr<StateStore::LeakedLeaseKeys> FindLeakedLeaseKeys(absl::string_view cursor) {
    return store_.FindLeakedLeaseKeys(cursor, clock_.NowMicros());
  }

  // Deletes the state of one key / every key of `name`, in the namespace of `source`. Returns
  // how many states were deleted (0: the key or limit had none).
  absl::StatusOr<uint64_t> Reset(const std::string& name, const std::string& key,
                                 LimitSource source = LimitSource::kDefined);
  absl::StatusOr<uint64_t> ResetAll(const std::string& name,
                                    LimitSource source = LimitSource::kDefined);

 private:
  StateStore& store_;
  const Clock& clock_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LIMITER_H_
