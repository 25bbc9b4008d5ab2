#ifndef RATELIMIT_STORAGE_LEASES_LEASE_H_
#define RATELIMIT_STORAGE_LEASES_LEASE_H_

// Concurrency limits (docs/leases.md): at most `capacity` slots of a (name, key) held at once, by
// leases that end when released or when they expire unextended. The state of a concurrency key
// is its lease set, kept by the store beside the (value, ts) states and decided in the same
// transaction as the rate limits of the request (all-or-nothing). This file holds the plain
// values and the pure algebra over a lease set; no I/O, no clock reads, no protos.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/algebra.h"
#include "storage/leases/lease_id.h"
#include "storage/leases/lease_set_index.h"
#include "storage/limit_config.h"
#include "storage/operation.h"

namespace ratelimit {

// One lease on slots of a concurrency key.
struct Lease {
  // Chosen by the server (LeaseId::New); never empty.
  LeaseId id;
  // Slots held: a whole number, 1..capacity.
  int64_t count = 1;
  int64_t acquired_at_us = 0;
  // The lease ends by itself at this time (not held from this time on) unless extended.
  int64_t expires_at_us = 0;
  // Released, kept until expires_at_us only so that a retried acquire with the same request_id
  // answers it again (only a lease with a request_id is kept so). Holds no slots.
  bool released = false;
  // Where a store keeps the lease, not part of its meaning (== ignores either): the RocksDB
  // store's record number under its key (storage/rocksdb/lease_record.h), 1 and up; 0: none; and
  // the size of that record's value as last written or read (0: not known), which a record freed
  // keeps. The algebra carries both along and gives a new lease 0.
  uint16_t record_bytes = 0;
  uint32_t record = 0;
  // The acquire's idempotency key (empty: none) and the holder's free-text name. After the fields
  // above, which share the first 48 bytes: a decision's pass over a key's leases reads only those.
  std::string request_id;
  std::string holder;

  friend bool operator==(const Lease& a, const Lease& b) {
    return a.id == b.id && a.count == b.count && a.acquired_at_us == b.acquired_at_us &&
           a.expires_at_us == b.expires_at_us && a.request_id == b.request_id &&
           a.holder == b.holder && a.released == b.released;
  }
};

// The state of one concurrency key: its leases, held or kept released, in no particular order
// (the algebra keeps the order it is given, appends, and moves the last lease into the place of
// one it removes). Empty: every slot free (as absent).
struct LeaseSet {
  LeaseSet() = default;
  // A set of `leases` (its index knowing nothing yet).
  LeaseSet(std::vector<Lease> leases) : leases(std::move(leases)) {}  // NOLINT: implicit

  std::vector<Lease> leases;
  // The leases' positions by id and their record numbers (lease_set_index.h), kept by the algebra:
  // not part of the set's meaning. A set whose leases are changed outside the algebra is a new
  // object.
  LeaseSetIndex index;

  // The same leases, in whatever order.
  friend bool operator==(const LeaseSet& a, const LeaseSet& b);
};

// Removes lease `i` of `leases`, a set whose index is `index`, and returns it: the index is told,
// and the last lease takes its place (the order is no matter, so a removal moves one lease, not
// every one after it).
Lease TakeLease(std::vector<Lease>& leases, LeaseSetIndex& index, size_t i);

// What a caller that decides one key's operations one after another on the `next` of the
// decision before (the RocksDB store's run of a hot key's burst) carries between them, so that a
// decision need not read every lease of the set to learn that none has expired and how many
// slots are held. DecideLease fills it when it reads the set and keeps it true of the `next` it
// returns; it describes no other set. A caller that changes the set's leases or counts itself
// keeps it true, or clears `known`.
struct LeaseSetSummary {
  // false: not filled yet; the next decision reads the set (and fills it).
  bool known = false;
  // The sum of the counts of the set's leases that are not released.
  int64_t held = 0;
  // No lease of the set expires before this time (a lower bound of their expiries).
  int64_t expires_from_us = 0;
};

// Whether a decision at `now_us` given `summary` leaves the set unread (DecideLease below): the
// summary is known and no lease of the set can have expired yet.
inline bool LeaseSummarySparesRead(const LeaseSetSummary& summary, int64_t now_us) {
  return summary.known && now_us < summary.expires_from_us;
}

// Where a lease stands in a listing (kList): soonest expiry first, then the earlier acquired, then
// the smaller id.
struct LeasePlace {
  int64_t expires_at_us = 0;
  int64_t acquired_at_us = 0;
  LeaseId id;

  friend bool operator<(const LeasePlace& a, const LeasePlace& b) {
    if (a.expires_at_us != b.expires_at_us) return a.expires_at_us < b.expires_at_us;
    if (a.acquired_at_us != b.acquired_at_us) return a.acquired_at_us < b.acquired_at_us;
    return a.id < b.id;
  }
  friend bool operator==(const LeasePlace&, const LeasePlace&) = default;
};
inline LeasePlace PlaceOf(const Lease& l) {
  return LeasePlace{l.expires_at_us, l.acquired_at_us, l.id};
}

// One page of a listing: of `leases` (held leases in any order), those after `after` (none: from
// the first), in the listing's order, at most `limit` of them (0: every one). `*more`: held leases
// follow the page's last. Costs O(n + k log k) for n leases and a page of k.
std::vector<Lease> ListingPage(const std::vector<Lease>& leases,
                               const std::optional<LeasePlace>& after, int64_t limit, bool* more);

// What is asked of a concurrency key.
enum class LeaseAction : uint8_t {
  kAcquire,  // take `count` slots for a new lease (or answer the lease of `request_id` again)
  kRelease,  // give back the slots of `lease_id`
  kExtend,   // push the expiry of `lease_id` to now + ttl_us
  kCheck,    // whether `count` slots are free now; writes nothing
  kList,     // the leases held now; writes nothing
  kReset,    // end every lease of the key (all slots free)
};

// One request on a concurrency key.
struct LeaseOp {
  StateKey key;
  // REQUIRES: kind kConcurrency and ValidateLimitConfig OK.
  LimitConfig config;
  LeaseAction action = LeaseAction::kAcquire;
  // kAcquire, kCheck: slots, 1..kMaxSlots, whole.
  int64_t count = 1;
  // kAcquire, kExtend: the TTL, kMinLeaseTtlMicros..config.max_lease_ttl_us.
  int64_t ttl_us = 0;
  // kRelease, kExtend: the lease. kAcquire: the id of the new lease (chosen by the caller,
  // unique), unused when the acquire is answered by the lease of `request_id`. Empty for the
  // other actions.
  LeaseId lease_id;
  // kAcquire only.
  std::string request_id;
  std::string holder;
  // kList only: the page listed, the held leases after `list_after` (unset: from the first), at
  // most `list_limit` of them (0: every one). A store reads no more of the set than the page
  // needs where it can (Redis), and copies no more into the decision.
  std::optional<LeasePlace> list_after;
  int64_t list_limit = 0;
};

// Whether a lease is held after a release or extend.
enum class LeaseState : uint8_t { kHeld, kReleased, kNotHeld };

// What the algebra decided for one LeaseOp.
struct LeaseDecision {
  // kAcquire, kCheck: `count` slots were free (and, acquiring, taken). Always true for the others.
  bool allowed = false;
  // kAcquire, kCheck denied: kNoFreeSlots, or kCountExceedsCapacity when count > capacity.
  DenyReason reason = DenyReason::kNone;
  // kRelease, kExtend: kReleased / kHeld when the lease was held, else kNotHeld.
  LeaseState state = LeaseState::kNotHeld;
  // kAcquire allowed (or replayed), kExtend held: the lease as it is now.
  std::optional<Lease> lease;
  // kAcquire: the lease of an earlier acquire with the same request_id, answered again; nothing
  // was taken.
  bool replayed = false;
  // Slots held after the decision, and free (capacity - held, never below 0).
  int64_t held = 0;
  int64_t free = 0;
  // kAcquire and kCheck denied (not kCountExceedsCapacity): when enough slots are free at the
  // latest if no lease is released or extended meanwhile (the expiry that brings held down to
  // capacity - count).
  std::optional<int64_t> retry_at_us;
  // Leases found expired while still held (never released) and dropped by this decision: the
  // leak detector's count. The decision that finds them writes (whatever its action: a check, a
  // list, a denial), so each is reported by one decision only.
  int64_t expired_unreleased = 0;
  // Whether the decision passed over every lease of the set (it read the set without the
  // summary, or its index could not name the expired leases).
  bool read_all = false;
  // The leases the decision dropped as expired: found by the set's index in expiry order
  // (lease_set_index.h), or by the pass over every lease (`read_all`). A store that accounts for
  // the set's memory subtracts them (after a pass it counts the set again instead); a store that
  // keeps a record per lease frees theirs when the decision writes, so that no later read finds
  // a leak again.
  std::vector<Lease> dropped;
  // kList: the leases held now of op's page (list_after, list_limit), in the listing's order
  // (LeasePlace); `more_listed`: further held leases follow the page's last.
  std::vector<Lease> held_leases;
  bool more_listed = false;
  // kRelease that released: the lease as it was held (Lease::record included), so that a store
  // frees or rewrites where it kept it without searching the set again. Unset otherwise.
  std::optional<Lease> released;
  // Where the decision stands among the store's decisions on the key: a later one on the same key
  // has a larger seq, whichever thread or batch made it and in whatever order the answers are
  // handed back (a batch answers in the order given, not in the order decided). On Redis, this
  // server's decisions are numbered as their replies are read, in the order the node made them
  // (another server's decisions are not numbered here). 0: not numbered. Set by the store, not
  // by DecideLease; for what reports a key's state as of its latest decision (the held-slots
  // gauge).
  uint64_t seq = 0;
  // Whether `next` must be written (false: leave the stored set as it is).
  bool write = false;
  // The set after the decision: expired leases dropped, released ones without a request_id
  // dropped, released ones with a request_id kept until their expiry. When `write`, the set to
  // store (empty: every slot free; a store deletes it or stores it empty). Otherwise the set as
  // read at now_us, which reads the same as the stored one from then on: a store that keeps
  // decoded sets in memory may keep this one instead. A store may move it out (RocksDB does): in
  // a LeaseOutcome a store returns, it is unspecified.
  LeaseSet next;
};

// The first of `n` consecutive numbers, each larger than every number returned before in this
// process: what a store stamps its lease decisions with (LeaseDecision::seq), taken while it
// holds the key (or, on Redis, as it reads the replies in the order the node made them), so that
// the decisions on a key are numbered in the order they were made.
uint64_t NextLeaseDecisionSeq(uint64_t n = 1);

// Decides `op` on the key's lease set `current` at `now_us`. Pure. `current` is taken by value:
// a caller that owns the set moves it in, and the leases are moved into `next`, never copied. A
// lease is held while
// now_us < expires_at_us and it is not released. Every decision that writes drops expired leases,
// and every decision that finds a lease expired unreleased writes (so that the next one does not
// find it again: expired_unreleased counts each such lease once).
// kReset writes an empty set. REQUIRES: op is valid (see LeaseOp).
//
// The rules, exactly (every number is a whole int64; capacity is config.capacity as an int64; no
// rounding anywhere; now_us + ttl_us saturates at INT64_MAX). First the set is read at now_us:
//  - a lease with now_us >= expires_at_us is expired: dropped from `next`; counted in
//    expired_unreleased when it was not released;
//  - a released lease without a request_id is dropped (it is never stored so);
//  - every other lease is kept, in the order given: held when not released.
//  held = the sum of the counts of the held leases.
// Then by action:
//  - kAcquire, request_id not empty and a kept lease (held or released) has that request_id:
//    allowed, replayed, `lease` = that lease as stored; writes nothing. The count, ttl and holder
//    of the retry are not compared.
//  - kAcquire/kCheck, count > capacity: denied kCountExceedsCapacity, no retry_at, no write.
//  - kAcquire/kCheck, held + count <= capacity: allowed. kAcquire appends the lease
//    {op.lease_id, count, acquired_at_us = now_us, expires_at_us = now_us + ttl_us, request_id,
//    holder} to the kept leases and writes; held += count. kCheck writes nothing.
//  - kAcquire/kCheck otherwise: denied kNoFreeSlots, no write. retry_at_us: the held leases
//    sorted by expires_at_us; the first expiry t (in that order) at which held - (the counts of
//    held leases with expires_at_us <= t) <= capacity - count.
//  - kRelease: the held lease whose id is op.lease_id (a released or expired one is not held):
//    state kReleased; kept with released = true when it has a request_id, removed otherwise (the
//    last kept lease takes its place); writes. No such lease: state kNotHeld, no write.
//  - kExtend: the held lease whose id is op.lease_id: expires_at_us = now_us + ttl_us (even when
//    that is earlier than before), state kHeld, `lease` = it as extended; writes. No such lease:
//    kNotHeld, no write.
//  - kList: held_leases = the held leases, sorted by (expires_at_us, acquired_at_us, id)
//    ascending (LeasePlace), those after op.list_after when set, the first op.list_limit of them
//    when it is above 0 (more_listed when more follow); no write.
//  - kReset: every lease ends; writes the empty set; held = 0.
// Whatever the action, a decision with expired_unreleased > 0 writes (the "no write" above then
// writes the kept leases as read, the expired ones dropped).
// `allowed` is true for kRelease, kExtend, kList and kReset whatever they found. held and free
// are those after the decision (free = max(0, capacity - held); held can exceed capacity after
// the capacity was lowered). `next` is the kept leases after the action: when written, the set
// to store (a store deletes it, or stores it empty, when it is empty).
LeaseDecision DecideLease(const LeaseOp& op, LeaseSet current, int64_t now_us);
// The same decision, made into `d` where the caller keeps it (a decision is large: the store keeps
// a burst's outcomes), with `summary` (LeaseSetSummary) of `current` carried from the decision
// that returned `current` as its `next`: when it is known and now_us is before every expiry it
// bounds, the set is not read (nothing in it has expired, and the algebra keeps no released lease
// without a request_id), otherwise it is read as above. Either way, `summary` describes the
// decision's `next` afterwards. The decision is the one DecideLease(op, current, now_us) makes.
// REQUIRES: `d` is as default-constructed.
void DecideLease(const LeaseOp& op, LeaseSet current, int64_t now_us, LeaseSetSummary& summary,
                 LeaseDecision& d);

// Takes back the lease that `d`, an allowed kAcquire of `op` (not replayed), appended, when a
// rate limit of the same request denied it: `d` becomes an acquire that took nothing, whose
// `next` is the set as read, and which writes only to drop the leases it found expired (the rule
// above). `summary` follows.
void WithdrawAcquire(const LeaseOp& op, LeaseDecision& d, LeaseSetSummary& summary);

// Checks what LeaseOp REQUIRES: INVALID_ARGUMENT naming the field after `field_prefix`
// ("config.capacity", "count", "ttl", "lease_id") when it does not hold. kAcquire needs a
// lease_id (the new lease's), kRelease and kExtend the lease's; count and ttl are checked only
// for the actions that use them.
absl::Status ValidateLeaseOp(const LeaseOp& op, absl::string_view field_prefix = "");

// The latest expiry among the leases of `set` (released ones included), or 0 when empty: after it
// the set holds nothing and a store may drop it.
int64_t LeaseSetExpiresAt(const LeaseSet& set);

// ---------------------------------------------------------------------------------------------
// What the service asks of a store (StateStore::ApplyLease): one lease op and, with an acquire,
// the rate limits to take with it, all-or-nothing in one transaction.
struct LeaseOperation {
  LeaseOp lease;
  // kAcquire only: rate limits (kind token bucket or fixed window) consumed with the slots.
  absl::Span<const LimitOp> limits = {};
  // Where the concurrency limit stood among the request's limits, so that a message names a rate
  // limit as the caller numbered it: RequestIndexOf(i) for limits[i].
  size_t lease_at = 0;
  size_t RequestIndexOf(size_t rate) const { return rate < lease_at ? rate : rate + 1; }
};

struct LeaseOutcome {
  // The lease decision allowed it and every rate limit allowed (then every one was taken).
  bool allowed = false;
  // The decision on the concurrency key. When a rate limit denied, nothing was taken: `lease`
  // decided allowed but wrote nothing (lease.lease is unset then).
  LeaseDecision lease;
  // One per rate limit, in order, as StateStore::Apply decides them (empty when replayed).
  Decisions decisions;
  // The time the decision was made at (the store's clock).
  int64_t now_us = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_LEASE_H_
