#ifndef RATELIMIT_STORAGE_ROCKSDB_LEASE_SET_CACHE_H_
#define RATELIMIT_STORAGE_ROCKSDB_LEASE_SET_CACHE_H_

// The RocksDB store's cache of lease sets (storage/leases/): from a lease set's record key
// (LeaseRecordKey) to the key's latest set, decoded, with the expiry of its records. A decision on
// a concurrency key reads the set here (RocksDB only on a miss), queues the records of the leases
// it changed with the group commit, puts the new set here with its ticket and frees the key's
// stripe before its WAL write, as the states' decisions do (rocksdb_state_store.h). How entries
// are kept, queued, evicted and invalidated: ticketed_cache.h.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "storage/leases/lease.h"
#include "storage/rocksdb/ticketed_cache.h"

namespace ratelimit {

// What the store carries beside a cached set from one decision on it to the next, so that a
// decision on a key holding many leases makes no pass over them: the algebra's summary (lease.h:
// the slots held, the earliest expiry) and the heap memory of the leases' strings (the cache's
// charge). Each is filled by a pass over the set when it is not known, then kept true by the
// decisions (AccountLeaseDecision).
struct LeaseSetBook {
  LeaseSetSummary summary;
  // The heap bytes of the strings of the set's leases (LeaseStringBytes summed), when known.
  bool strings_known = false;
  size_t string_bytes = 0;
};

struct LeaseSetCacheEntry {
  // The set as stored; null: no set is stored (every slot free). Read and changed only under the
  // stripe of its key (a decision on the key moves its leases out and refills it).
  std::shared_ptr<LeaseSet> set;
  // When the set's lease records have all expired (they read as absent from then on); 0 with no
  // set.
  int64_t expires_at_us = 0;
  uint64_t ticket = 0;  // the group-commit ticket that writes it; 0: already stored
  size_t bytes = 0;     // the memory `set` holds (LeaseSetMemoryBytes)
  // True of `set` as far as it says it is known (nothing known with no set).
  LeaseSetBook book;

  size_t CacheBytes() const { return bytes; }
};

// The heap memory a decoded set holds: the vector's leases, their strings and its index.
size_t LeaseSetMemoryBytes(const LeaseSet& set);
// The heap memory of `lease`'s strings (the ones past the small-string buffer).
size_t LeaseStringBytes(const Lease& lease);

// Keeps `book` true of the set decision `d` of `op` left (d.next, before it is moved out): a
// decision that passed over every lease (d.read_all) drops leases unseen, and the strings are then
// unknown; one that found the expired leases by the set's index lists them (d.dropped).
void AccountLeaseDecision(const LeaseOp& op, const LeaseDecision& d, LeaseSetBook& book);

// Thread safety: as TicketedCache.
class LeaseSetCache : public TicketedCache<LeaseSetCacheEntry> {
 public:
  using Entry = LeaseSetCacheEntry;
  using TicketedCache::TicketedCache;

  // The entry for `set` (null or empty: none stored) whose records expire by `expires_at_us` (or
  // earlier), written by `ticket`, with `book` (its strings counted here when it does not know
  // them).
  static Entry Make(std::shared_ptr<LeaseSet> set, int64_t expires_at_us, uint64_t ticket,
                    LeaseSetBook book = {});

  // Removes the written entries whose record has expired by `now_us` (as the records' compaction
  // filter drops them from RocksDB).
  void DropExpired(int64_t now_us);
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_LEASE_SET_CACHE_H_
