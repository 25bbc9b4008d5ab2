#ifndef RATELIMIT_STORAGE_LEASES_LEASE_SET_INDEX_H_
#define RATELIMIT_STORAGE_LEASES_LEASE_SET_INDEX_H_

// What a lease set (lease.h) keeps beside its leases so that a decision on a key holding many
// leases makes no pass over them: the position of each lease by its id, for a release or an extend;
// the request_ids its leases were acquired with, for an acquire that carries one (is it a retry?);
// and the record numbers its leases hold, for the RocksDB store's numbering of a new lease's record
// (storage/rocksdb/lease_record.h). Part of LeaseSet but not of its meaning (== ignores it).
//
// They are kept differently, because a wrong answer costs differently:
//  - Positions are hints. Find checks the lease at the position it finds and searches the set
//    when that is not the lease, so positions that fell behind the set give the right answer
//    slowly. They are built by the second search of a set object (a set decoded for one decision,
//    as the in-memory store's are, is searched once: building would cost more than the search),
//    and rebuilt when they do not describe as many leases as the set holds.
//  - Record numbers are exact or not known. A number taken for free while a lease holds it would
//    put two leases in one record, and a restart would lose one. They are known only from a pass
//    over the leases (LowestFreeRecord's first call) and kept through the algebra's changes
//    (Appended, Removing, Dropping, Clear) and the store's numbering (RecordTaken). A set whose
//    leases are changed in any other way must be a new object (a decoded set is: it knows none).
//    A moved-from index knows none.
//  - Request ids are exact or not known, as record numbers are: an acquire told that no lease has
//    its request_id takes new slots, so a wrong "none" would take twice for one retried request.
//    They are counted by hash, from a pass over the leases at a set object's second question
//    (MayHoldRequestId), and kept through the same changes. A hash that is there (a retry, or two
//    request_ids of one 64-bit hash) is only a maybe: the caller searches.
//  - Ids are exact while the positions describe the set and no two of its ids share a hash: an id
//    whose hash is not among the positions is then in no lease, and Find answers so without a
//    search (a release or extend of a lease that ended, as a retried call makes).
//  - Expiries are exact or not known, as record numbers are: every lease's (expiry, id hash), in
//    expiry order, so that a decision after a lease may have expired drops the expired ones
//    without a pass over the set (SoonestExpired), and a denial finds when slots free without
//    sorting the held leases (VisitByExpiry). Counted from kPositionsFrom leases at a set
//    object's second question (AskExpiries: a full read, or a denial's VisitByExpiry), and kept
//    through the same changes and ExpiryChanging.
//    They find their leases through the positions, so they answer only while ids are exact.
//
// Thread safety: none (a set is changed under its key's hold).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "storage/leases/lease_id.h"

namespace ratelimit {

struct Lease;

class LeaseSetIndex {
 public:
  // Positions are kept once a set holds this many leases: a search of fewer is as fast as a probe.
  static constexpr size_t kPositionsFrom = 256;

  // Knows nothing. Moving moves one pointer (a decision moves its set several times) and leaves
  // an index that knows nothing; copying copies what it knows.
  LeaseSetIndex() = default;
  LeaseSetIndex(const LeaseSetIndex& other) { *this = other; }
  LeaseSetIndex& operator=(const LeaseSetIndex& other);
  LeaseSetIndex(LeaseSetIndex&&) noexcept = default;
  LeaseSetIndex& operator=(LeaseSetIndex&&) noexcept = default;

  // The position in `leases` of the lease whose id is `id` (held or released), or -1. `leases` is
  // the set this index belongs to; ids are unique in it. From kPositionsFrom leases, a set
  // object's second search on builds the positions; with exact ids a miss costs no search.
  int Find(const std::vector<Lease>& leases, const LeaseId& id);

  // After `leases` gained its last lease, appended (its record numbered or not yet).
  void Appended(const std::vector<Lease>& leases);
  // Before the lease at `i` of `leases` is removed, the last lease taking its place (none when it
  // is the last).
  void Removing(const std::vector<Lease>& leases, size_t i);
  // Before a pass that keeps the leases in order but may drop some: `dropped` for each one it
  // drops (its record free again), then Reordered once it is done.
  void Dropping(const Lease& dropped);
  void Reordered() {
    if (s_ != nullptr) s_->live = false;
  }
  // Every lease removed: positions, records, request_ids and expiries known (none).
  void Clear();

  // Before the expiry of `lease`, a lease of the set, becomes `expires_at_us` (an extend).
  void ExpiryChanging(const Lease& lease, int64_t expires_at_us);
  // Whether the expiries are known. Asked after a pass over every lease of `leases` (the
  // algebra's full read, which drops through Dropping and Reordered) and by VisitByExpiry: from
  // kPositionsFrom leases, a set object's second question counts them (a set asked once, as a
  // decoded one is, is not worth ordering).
  bool AskExpiries(const std::vector<Lease>& leases);
  // SoonestExpired's answer when the expiries cannot tell: the caller passes over the set.
  static constexpr int kUnknown = -2;
  // The position in `leases` of a lease that has expired at `now_us` (expires_at_us <= now_us),
  // the soonest first; -1 when none has; kUnknown when the expiries are not known or ids are not
  // exact. May build the positions (a pass) when they fell behind the set.
  int SoonestExpired(const std::vector<Lease>& leases, int64_t now_us);
  // The earliest expiry of the set's leases (INT64_MAX when it has none). REQUIRES: expiries known.
  int64_t EarliestExpiry() const;
  // Calls `visit` with the leases of `leases` in expiry order, soonest first, until it returns
  // true. False (and `visit` may have been called for some) when the expiries are not known or ids
  // are not exact: the caller orders the leases itself. Asks for the expiries (AskExpiries).
  bool VisitByExpiry(const std::vector<Lease>& leases, absl::FunctionRef<bool(const Lease&)> visit);

  // Whether a lease of `leases` (held or released) may have been acquired with `request_id`: false
  // only when none was. `leases` is the set this index belongs to. From kPositionsFrom leases on,
  // a set object asked a second time answers from its counted request_ids (a new request_id, as
  // every first attempt has, costs no pass); below that, or at the first question, true (the
  // caller's search costs no more than counting would), unless they are counted already (a set
  // emptied by Clear counts from there).
  bool MayHoldRequestId(const std::vector<Lease>& leases, absl::string_view request_id);

  // Record numbers above this are not kept as known: a set holding one (4M leases on one key, or a
  // damaged record) is numbered by a pass over its leases at each new lease.
  static constexpr uint32_t kMaxKnownRecord = uint32_t{1} << 22;

  // The lowest record number (1 and up) no lease of `leases` holds, knowing the numbers from a pass
  // over `leases` when they are not known.
  uint32_t LowestFreeRecord(const std::vector<Lease>& leases);
  // A lease of the set now holds record `record` (the store numbered it).
  void RecordTaken(uint32_t record);

  // The heap memory the index holds (for a cache's charge).
  size_t MemoryBytes() const;

  // For tests: whether the positions describe the set, and whether the record numbers are known.
  bool positions_live() const { return s_ != nullptr && s_->live; }
  bool records_known() const { return s_ != nullptr && s_->records_known; }
  bool request_ids_known() const { return s_ != nullptr && s_->request_ids_known; }
  bool expiries_known() const { return s_ != nullptr && s_->expiries_known; }

 private:
  static uint64_t HashOf(const LeaseId& id);
  static uint64_t HashOf(absl::string_view request_id);

  struct State {
    // By HashOf(id): a position (two ids of one hash keep one; a search finds the other), and
    // the set's size they describe when `live`.
    absl::flat_hash_map<uint64_t, uint32_t> of_id;
    size_t of_size = 0;
    bool live = false;
    bool searched = false;  // a search of kPositionsFrom leases or more was made
    // Bit r: record r is held by a lease of the set (bit 0 unused), when `records_known`.
    std::vector<uint64_t> records;
    bool records_known = false;
    uint32_t lowest_free = 1;  // no record below it is free
    // By HashOf(request_id): how many leases of the set have a request_id of that hash, when
    // `request_ids_known` (leases without one are not counted).
    absl::flat_hash_map<uint64_t, uint32_t> request_ids;
    bool request_ids_known = false;
    // MayHoldRequestId was called on a set of kPositionsFrom leases or more.
    bool request_id_asked = false;
    // Two ids of the set share a hash, as far as the positions know (set when building or
    // appending them finds a hash taken; cleared when they are built again without).
    bool ids_collide = false;
    // (expires_at_us, HashOf(id)) of every lease of the set, when `expiries_known`.
    absl::btree_multiset<std::pair<int64_t, uint64_t>> by_expiry;
    bool expiries_known = false;
    // The expiries were asked for (AskExpiries) with kPositionsFrom leases or more.
    bool expiries_asked = false;
  };

  State& Own();
  void BuildPositions(const std::vector<Lease>& leases);
  // Whether ids are exact (building the positions first when they fell behind the set).
  bool IdsExact(const std::vector<Lease>& leases);
  // The position of the lease with hash `hash` and expiry `expires_at_us`, when ids are exact;
  // -1 (and the expiries known no longer) when the positions do not hold it.
  int PositionOfExpiry(const std::vector<Lease>& leases, int64_t expires_at_us, uint64_t hash);
  void ForgetExpiries();
  // Removes the expiry of `lease` (its id's hash `hash`); false, and the expiries known no
  // longer, when it is not there.
  bool EraseExpiry(const Lease& lease, uint64_t hash);
  // Knows the records of `leases`; false (and knows none) when one is above kMaxKnownRecord.
  bool BuildRecords(const std::vector<Lease>& leases);
  void SetRecord(uint32_t record, bool held);
  void CountRequestId(const Lease& lease, bool added);

  // Null: knows nothing (no allocation for a set that needs none).
  std::unique_ptr<State> s_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_LEASE_SET_INDEX_H_
