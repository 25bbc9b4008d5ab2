#ifndef RATELIMIT_STORAGE_LEASES_APPLY_LEASE_H_
#define RATELIMIT_STORAGE_LEASES_APPLY_LEASE_H_

// How a store that keeps idempotency records (StateStore::UpdateWithRecords) keeps lease sets:
// the lease set of a concurrency key is one record of the store, under a record key of its own,
// decided and written in the transaction of the rate limits' states. The memory and RocksDB
// stores implement ApplyLease with it.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/clock.h"
#include "storage/leases/lease.h"
#include "storage/state_store.h"

namespace ratelimit {

// The record key of the lease set of `key`:
//   "L" [source: 1 byte] [name length: u16 big-endian] [name] [key]
// The service's other records start with "q" (request_id), "s" (spent receipts) or "e" (Envoy
// refunds), so no lease set meets one of them; the name's length makes the name and the key
// unambiguous. Up to 4 + kMaxNameBytes + kMaxKeyBytes bytes (longer than the 256 bytes of the
// service's own records).
std::string LeaseRecordKey(const StateKey& key);

// The prefix every LeaseRecordKey of limit `name` of `source` starts with, and no other: what a
// store scans to delete every lease set of a limit (DeleteAllLeases).
std::string LeaseRecordPrefix(LimitSource source, absl::string_view name);

// How much later than its latest lease expiry a lease set's record expires: the slack for the
// clock read before the transaction (the record's expiry) and the one read inside it (the
// leases'). A record whose leases would outlive it is written with a later expiry.
inline constexpr int64_t kLeaseRecordMarginMicros = 1'000'000;

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

// Whether `record` (the bytes of a lease set record) holds at least one lease; a record that does
// not decode counts as holding one. For a store counting the lease sets it deletes.
bool LeaseRecordHoldsLeases(absl::string_view record);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_APPLY_LEASE_H_
