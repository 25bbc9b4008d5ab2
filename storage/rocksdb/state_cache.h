#ifndef RATELIMIT_STORAGE_ROCKSDB_STATE_CACHE_H_
#define RATELIMIT_STORAGE_ROCKSDB_STATE_CACHE_H_

// The RocksDB store's cache of hot states: a sharded LRU map from a stored key (the states
// column family's key) to the key's latest state, so that a decision on a hot key costs no
// RocksDB read. RocksDB stays the durable truth: an entry is either a copy of what RocksDB holds,
// or a state a decision has queued for the WAL (storage/rocksdb/group_commit.h) and that later
// decisions on the key must see at once. A queued entry is not evicted until its ticket is resolved
// (so a miss never reads an older state from RocksDB than what was queued); the others are evicted,
// least recently used first, once a shard holds more than its share of the byte bound.
//
// Entries carry the epoch of the group commit they were made in; a lookup with another epoch
// misses (after a failed write nothing queued before it may be read again) and Clear() frees them.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "storage/algebra.h"

namespace ratelimit {

// Thread safety: all methods are thread-safe. Callers serialize the updates of one key (the
// store's stripe locks), so a Put never races another Put or a Lookup-then-Put of the same key.
class StateCache {
 public:
  // `max_bytes`: the bound on the entries' memory (key bytes plus a fixed per-entry charge),
  // not counting queued entries over it; 0 keeps queued entries only. `resolved`: tickets up to
  // it are resolved (evictable); must outlive the cache.
  StateCache(size_t max_bytes, const std::atomic<uint64_t>& resolved);
  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  struct Entry {
    std::optional<State> state;  // nullopt: the key has no state (it is full)
    uint64_t ticket = 0;         // the group-commit ticket that writes it; 0: already stored
  };

  // The entry of `key` made in `epoch`, or nullopt (a miss).
  std::optional<Entry> Lookup(absl::string_view key, uint64_t epoch);

  // Sets the entry of `key` (a state read from RocksDB with ticket 0, or one queued with its
  // ticket) in `epoch`, then evicts while the shard is over its bound. An unqueued entry is not
  // kept when the bound is 0.
  void Put(absl::string_view key, const Entry& entry, uint64_t epoch);

  // Removes every entry.
  void Clear();
  // Removes the written entries whose state has refilled by `now_us` (as garbage collection drops
  // them from RocksDB), so that reads agree with RocksDB after a collection.
  void DropRefilled(int64_t now_us);

  // The charge of one entry with a key of `key_size` bytes.
  static size_t ChargeOf(size_t key_size);

  size_t max_bytes() const { return max_bytes_; }
  uint64_t entries() const { return entries_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kShards = 16;

  struct Node {
    std::string key;
    Entry entry;
    uint64_t epoch = 0;
  };
  struct Shard {
    absl::Mutex mu;
    std::list<Node> lru ABSL_GUARDED_BY(mu);  // most recently used first
    absl::flat_hash_map<absl::string_view, std::list<Node>::iterator> index ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  Shard& ShardOf(absl::string_view key);
  void EvictLocked(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void EraseLocked(Shard& shard, std::list<Node>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const size_t max_bytes_;
  const size_t shard_bytes_;
  const std::atomic<uint64_t>& resolved_;
  std::unique_ptr<Shard[]> shards_;
  std::atomic<uint64_t> entries_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_STATE_CACHE_H_
