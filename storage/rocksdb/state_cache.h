#ifndef RATELIMIT_STORAGE_ROCKSDB_STATE_CACHE_H_
#define RATELIMIT_STORAGE_ROCKSDB_STATE_CACHE_H_

// The RocksDB store's cache of hot states: from a stored key (the states column family's key) to
// the key's latest state, so that a decision on a hot key costs no RocksDB read. How entries are
// kept, queued, evicted and invalidated: ticketed_cache.h.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "storage/algebra.h"
#include "storage/rocksdb/ticketed_cache.h"

namespace ratelimit {

struct StateCacheEntry {
  std::optional<State> state;  // nullopt: the key has no state (it is full)
  uint64_t ticket = 0;         // the group-commit ticket that writes it; 0: already stored

  size_t CacheBytes() const { return 0; }
};

// Thread safety: as TicketedCache.
class StateCache : public TicketedCache<StateCacheEntry> {
 public:
  using Entry = StateCacheEntry;
  using TicketedCache::TicketedCache;

  // Removes the written entries whose state has refilled by `now_us` (as garbage collection drops
  // them from RocksDB), so that reads agree with RocksDB after a collection.
  void DropRefilled(int64_t now_us);
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_STATE_CACHE_H_
