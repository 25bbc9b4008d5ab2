#ifndef RATELIMIT_STORAGE_ROCKSDB_TICKETED_CACHE_H_
#define RATELIMIT_STORAGE_ROCKSDB_TICKETED_CACHE_H_

// The RocksDB store's caches of what decisions read: a sharded LRU map from a stored key to the
// key's latest value, so that a decision on a hot key costs no RocksDB read. RocksDB stays the
// durable truth: an entry is either a copy of what RocksDB holds, or a value a decision has
// queued for the WAL (storage/rocksdb/group_commit.h) and that later decisions on the key must
// see at once. A queued entry is not evicted until its ticket is resolved (so a miss never reads
// an older value from RocksDB than what was queued); the others are evicted, least recently used
// first, once a shard holds more than its share of the byte bound (the entry used last stays, even
// alone over that share).
//
// Entries carry the epoch of the group commit they were made in; a lookup with another epoch
// misses (after a failed write nothing queued before it may be read again) and Clear() frees them.
//
// Two caches are made of it: the states' (state_cache.h) and the lease sets'
// (lease_set_cache.h). `Entry` is a copyable value with a `uint64_t ticket` member (the
// group-commit ticket that writes it; 0: already stored) and a `size_t CacheBytes() const`
// member (the bytes it holds beyond a fixed per-entry charge).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ratelimit {

// Thread safety: all methods are thread-safe. Callers serialize the updates of one key (the
// store's stripe locks), so a Put never races another Put or a Lookup-then-Put of the same key.
template <typename Entry>
class TicketedCache {
 public:
  // `max_bytes`: the bound on the entries' memory (key bytes plus a fixed per-entry charge plus
  // Entry::CacheBytes()), not counting queued entries over it; 0 keeps queued entries only.
  // `resolved`: tickets up to it are resolved (evictable); must outlive the cache.
  TicketedCache(size_t max_bytes, const std::atomic<uint64_t>& resolved)
      : max_bytes_(max_bytes),
        shard_bytes_(max_bytes / kShards),
        resolved_(resolved),
        shards_(std::make_unique<Shard[]>(kShards)) {}
  TicketedCache(const TicketedCache&) = delete;
  TicketedCache& operator=(const TicketedCache&) = delete;

  // The entry of `key` made in `epoch`, or nullopt (a miss).
  std::optional<Entry> Lookup(absl::string_view key, uint64_t epoch) {
    Shard& shard = ShardOf(key);
    absl::MutexLock lock(&shard.mu);
    auto found = shard.index.find(key);
    if (found == shard.index.end() || found->second->epoch != epoch) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    hits_.fetch_add(1, std::memory_order_relaxed);
    shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
    return found->second->entry;
  }

  // Sets the entry of `key` (a value read from RocksDB with ticket 0, or one queued with its
  // ticket) in `epoch`, then evicts while the shard is over its bound. An unqueued entry is not
  // kept when the bound is 0.
  void Put(absl::string_view key, Entry entry, uint64_t epoch) {
    Shard& shard = ShardOf(key);
    absl::MutexLock lock(&shard.mu);
    auto found = shard.index.find(key);
    if (found != shard.index.end()) {
      Node& node = *found->second;
      Charge(shard, -static_cast<int64_t>(node.entry.CacheBytes()));
      node.entry = std::move(entry);
      node.epoch = epoch;
      Charge(shard, static_cast<int64_t>(node.entry.CacheBytes()));
      shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
    } else {
      if (entry.ticket == 0 && shard_bytes_ == 0) return;
      shard.lru.push_front(Node{std::string(key), std::move(entry), epoch});
      shard.index.emplace(shard.lru.front().key, shard.lru.begin());
      Charge(shard,
             static_cast<int64_t>(ChargeOf(key.size()) + shard.lru.front().entry.CacheBytes()));
      entries_.fetch_add(1, std::memory_order_relaxed);
    }
    EvictLocked(shard);
  }

  // Removes every entry.
  void Clear() {
    for (size_t i = 0; i < kShards; ++i) {
      Shard& shard = shards_[i];
      absl::MutexLock lock(&shard.mu);
      while (!shard.lru.empty()) EraseLocked(shard, shard.lru.begin());
    }
  }

  // Removes the written entries (ticket resolved) for which `drop` is true.
  void DropWrittenIf(absl::FunctionRef<bool(const Entry&)> drop) {
    const uint64_t resolved = resolved_.load(std::memory_order_acquire);
    for (size_t i = 0; i < kShards; ++i) {
      Shard& shard = shards_[i];
      absl::MutexLock lock(&shard.mu);
      for (auto it = shard.lru.begin(); it != shard.lru.end();) {
        auto next = std::next(it);
        if (it->entry.ticket <= resolved && drop(it->entry)) EraseLocked(shard, it);
        it = next;
      }
    }
  }

  // The fixed charge of one entry with a key of `key_size` bytes (Entry::CacheBytes() is added).
  static size_t ChargeOf(size_t key_size) { return key_size + kEntryOverhead; }

  size_t max_bytes() const { return max_bytes_; }
  uint64_t entries() const { return entries_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kShards = 16;
  // Per entry besides its key and its CacheBytes(): the list node (two pointers, the key's
  // std::string, the entry and its epoch), the index slot and the allocator's overhead, rounded up.
  static constexpr size_t kEntryOverhead = 160;
  // Unqueued entries looked at from the LRU end per Put before giving up (queued ones are
  // skipped; they become evictable once written).
  static constexpr int kMaxEvictionScan = 16;

  struct Node {
    std::string key;
    Entry entry;
    uint64_t epoch = 0;
  };
  struct Shard {
    absl::Mutex mu;
    std::list<Node> lru ABSL_GUARDED_BY(mu);  // most recently used first
    absl::flat_hash_map<absl::string_view, typename std::list<Node>::iterator> index
        ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  Shard& ShardOf(absl::string_view key) { return shards_[absl::HashOf(key) % kShards]; }

  void Charge(Shard& shard, int64_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    shard.bytes = static_cast<size_t>(static_cast<int64_t>(shard.bytes) + delta);
    if (delta >= 0) {
      bytes_.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
    } else {
      bytes_.fetch_sub(static_cast<uint64_t>(-delta), std::memory_order_relaxed);
    }
  }

  void EvictLocked(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    const uint64_t resolved = resolved_.load(std::memory_order_acquire);
    int scanned = 0;
    auto it = shard.lru.end();
    // With a bound, the entry just used stays, even alone over it: a value larger than a shard's
    // share (a key holding tens of thousands of leases) is then read from RocksDB again only
    // after another key's use pushed it out, not at every decision on it.
    const auto kept = shard_bytes_ > 0 ? shard.lru.begin() : shard.lru.end();
    while (shard.bytes > shard_bytes_ && it != shard.lru.begin() && scanned < kMaxEvictionScan) {
      --it;
      if (it == kept) break;
      if (it->entry.ticket > resolved) {
        ++scanned;  // queued and not written yet: it must stay
        continue;
      }
      auto next = std::next(it);
      EraseLocked(shard, it);
      evictions_.fetch_add(1, std::memory_order_relaxed);
      it = next;
    }
  }

  void EraseLocked(Shard& shard, typename std::list<Node>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    Charge(shard, -static_cast<int64_t>(ChargeOf(it->key.size()) + it->entry.CacheBytes()));
    shard.index.erase(absl::string_view(it->key));
    shard.lru.erase(it);
    entries_.fetch_sub(1, std::memory_order_relaxed);
  }

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

#endif  // RATELIMIT_STORAGE_ROCKSDB_TICKETED_CACHE_H_
