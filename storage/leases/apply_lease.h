#ifndef RATELIMIT_STORAGE_LEASES_APPLY_LEASE_H_
#define RATELIMIT_STORAGE_LEASES_APPLY_LEASE_H_

// How a store that keeps idempotency records (StateStore::UpdateWithRecords) keeps lease sets:
// the lease set of a concurrency key is one record of the store, under a record key of its own,
// decided and written in the transaction of the rate limits' states. The memory store implements
// ApplyLease with it; the RocksDB store keeps a record per lease instead (storage/rocksdb/
// lease_record.h) and names a key's set by its LeaseRecordKey (its cache entry and stripe).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/apply.h"
#include "storage/clock.h"
#include "storage/leases/lease.h"
#include "storage/state_store.h"

namespace ratelimit {

// The record key of the lease set of `key`:
//   "L" [source: 1 byte] [name length: u16 big-endian] [name] [key]
// The service's other records start with "q" (request_id), "s" (spent receipts) or "e" (Envoy
// refunds), and the RocksDB store's lease records with "M", so no lease set meets one of them; the
// name's length makes the name and the key unambiguous. Up to 4 + kMaxNameBytes + kMaxKeyBytes
// bytes (longer than the 256 bytes of the service's own records).
std::string LeaseRecordKey(const StateKey& key);

// The prefix every LeaseRecordKey of limit `name` of `source` starts with, and no other: what a
// store scans to delete every lease set of a limit (DeleteAllLeases).
std::string LeaseRecordPrefix(LimitSource source, absl::string_view name);

// The concurrency key whose LeaseRecordKey is `record_key`; nullopt when it is not one.
std::optional<StateKey> ParseLeaseRecordKey(absl::string_view record_key);

// How much later than its latest lease expiry a lease set's record expires (the RocksDB store's
// record of one lease, and Redis's keys of a set, keep the same margin). It is the slack for the
// clock read before the transaction (the record's expiry) and the one read inside it (the
// leases'), and the leak detector's window (docs/leases.md): a lease that expired unreleased is
// still found, dropped and counted by a decision on its key, or by the leak sweep
// (StateStore::FindLeakedLeaseKeys), until then. A record whose leases would outlive it is
// written with a later expiry.
inline constexpr int64_t kLeaseRecordMarginMicros = 60'000'000;

// `expires_at_us` + kLeaseRecordMarginMicros, saturating: when a record holding leases that
// expire by `expires_at_us` expires.
inline int64_t LeaseRecordExpiry(int64_t expires_at_us) {
  return expires_at_us > INT64_MAX - kLeaseRecordMarginMicros
             ? INT64_MAX
             : expires_at_us + kLeaseRecordMarginMicros;
}

// What ApplyLease requires of `op`: ValidateLeaseOp, rate limits only with an acquire (at most
// kMaxLimitsPerRequest, none a concurrency limit, each with a valid config and a count > 0 that
// is no settlement). INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateLeaseOperation(const LeaseOperation& op);

// The decision of a lease operation on what its transaction read: the key's lease set `set` and,
// for an acquire, the rate limits' states `current` (of `keys`, DistinctKeys(op.limits)), at
// `now_us`. Lease first (DecideLease); then, for an acquire not answered by a replay, the rate
// limits with storage/apply DecideOperation (mode kConsume when the lease is allowed, else kCheck
// so that the decisions report balances as they are), their states to write in `writes` (only
// when everything allowed). A replayed acquire reads the rate limits (kCheck) and reports them
// AsReplayed: their balances now, nothing taken again. A rate denial takes no slot: lease.write
// false, lease.lease unset, held and free as before, lease.next the set as read. The store writes
// outcome.lease.next when outcome.lease.write. `set` is taken by value, as DecideLease takes it.
// REQUIRES: ValidateLeaseOperation(op) is OK.
LeaseOutcome DecideLeaseOperation(const LeaseOperation& op, const OperationKeys& keys, LeaseSet set,
                                  absl::Span<const std::optional<State>> current, int64_t now_us,
                                  absl::Span<std::optional<State>> writes);
// The same decision made into `outcome`, where the caller keeps it, with the set's
// LeaseSetSummary `summary` carried and kept as DecideLease carries and keeps it (lease.h).
// REQUIRES: `outcome` is as default-constructed, and what DecideLeaseOperation requires.
void DecideLeaseOperation(const LeaseOperation& op, const OperationKeys& keys, LeaseSet set,
                          absl::Span<const std::optional<State>> current, int64_t now_us,
                          absl::Span<std::optional<State>> writes, LeaseSetSummary& summary,
                          LeaseOutcome& outcome);

// The rate limits' decisions of a replayed acquire (read in mode kCheck): each allowed, as the
// acquire they were taken with was, with no reason or retry_at; `value` stays the balance now.
void AsReplayed(Decisions& rates);

// The expiry of the record of `next`, the set `op` writes at `now_us`: kLeaseRecordMarginMicros
// after the later of now_us + op.config.max_lease_ttl_us and the set's latest lease expiry
// (saturating): once it has passed, every lease of the set has expired.
int64_t LeaseRecordExpiresAt(const LeaseOp& op, const LeaseSet& next, int64_t now_us);

// StateStore::ApplyLease on UpdateWithRecords: one transaction reading the key's lease set (its
// record; absent or expired reads as empty) and, for an acquire, the rate limits' states; deciding
// with DecideLease and, for an acquire not answered by a replay, the rate limits with
// storage/apply DecideOperation (mode kConsume when the lease is allowed, else kCheck so that the
// decisions report balances as they are); and writing the lease set and the rate limits' states
// only when everything allowed (LeaseOutcome). A rate denial takes no slot (lease.write is false,
// lease.lease unset, held and free as before); a slot denial takes no token.
// The record's expiry is now + config.max_lease_ttl_us + kLeaseRecordMarginMicros, later when a
// lease of the set expires after that (a TTL lowered since it was taken): once it expires every
// lease in it has, and the store may drop it.
// INVALID_ARGUMENT naming the field for an op ValidateLeaseOp refuses, limits with an action other
// than kAcquire, or a concurrency limit among the rate limits; DATA_LOSS for a stored set that
// does not decode; the store's error otherwise (nothing written then).
absl::StatusOr<LeaseOutcome> ApplyLeaseWithRecords(StateStore& store, const LeaseOperation& op,
                                                   const Clock& clock);

// Whether `record` (the bytes of a lease set record) holds a lease at `now_us`: not released, its
// expiry after `now_us`; a record that does not decode counts as holding one. For a store
// counting the keys whose leases it ended (StateStore::DeleteAllLeases).
bool LeaseRecordHoldsLiveLease(absl::string_view record, int64_t now_us);

// Whether `set` holds a lease that expired unreleased by `now_us` (held, never released, its
// expiry passed) less than kLeaseRecordMarginMicros ago: a leak the stores still keep, for their
// StateStore::FindLeakedLeaseKeys.
bool LeaseSetHoldsKeptLeak(const LeaseSet& set, int64_t now_us);

// Whether `record` (the bytes of a lease set record) holds a lease that expired unreleased by
// `now_us` (held, never released, its expiry passed) less than kLeaseRecordMarginMicros ago (as
// long as the RocksDB store keeps a lease's record); a record that does not decode counts as
// holding one, so that the decision the leak sweep makes on it reports the damage. For a store's
// StateStore::FindLeakedLeaseKeys.
bool LeaseRecordHoldsLeak(absl::string_view record, int64_t now_us);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_APPLY_LEASE_H_
