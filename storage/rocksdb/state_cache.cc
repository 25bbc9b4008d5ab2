#include "storage/rocksdb/state_cache.h"

#include "absl/hash/hash.h"

namespace ratelimit {
namespace {

// Per entry besides its key: the list node (two pointers, the key's std::string, the entry and
// its epoch), the index slot and the allocator's overhead, rounded up.
constexpr size_t kEntryOverhead = 160;

// Unqueued entries looked at from the LRU end per Put before giving up (queued ones are
// skipped; they become evictable once written).
constexpr int kMaxEvictionScan = 16;

}  // namespace

StateCache::StateCache(size_t max_bytes, const std::atomic<uint64_t>& resolved)
    : max_bytes_(max_bytes),
      shard_bytes_(max_bytes / kShards),
      resolved_(resolved),
      shards_(std::make_unique<Shard[]>(kShards)) {}

size_t StateCache::ChargeOf(size_t key_size) { return key_size + kEntryOverhead; }

StateCache::Shard& StateCache::ShardOf(absl::string_view key) {
  return shards_[absl::HashOf(key) % kShards];
}

std::optional<StateCache::Entry> StateCache::Lookup(absl::string_view key, uint64_t epoch) {
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

void StateCache::Put(absl::string_view key, const Entry& entry, uint64_t epoch) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  auto found = shard.index.find(key);
  if (found != shard.index.end()) {
    Node& node = *found->second;
    node.entry = entry;
    node.epoch = epoch;
    shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
  } else {
    if (entry.ticket == 0 && shard_bytes_ == 0) return;
    shard.lru.push_front(Node{std::string(key), entry, epoch});
    shard.index.emplace(shard.lru.front().key, shard.lru.begin());
    const size_t charge = ChargeOf(key.size());
    shard.bytes += charge;
    bytes_.fetch_add(charge, std::memory_order_relaxed);
    entries_.fetch_add(1, std::memory_order_relaxed);
  }
  EvictLocked(shard);
}

void StateCache::EvictLocked(Shard& shard) {
  const uint64_t resolved = resolved_.load(std::memory_order_acquire);
  int scanned = 0;
  auto it = shard.lru.end();
  while (shard.bytes > shard_bytes_ && it != shard.lru.begin() && scanned < kMaxEvictionScan) {
    --it;
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

void StateCache::EraseLocked(Shard& shard, std::list<Node>::iterator it) {
  const size_t charge = ChargeOf(it->key.size());
  shard.index.erase(absl::string_view(it->key));
  shard.lru.erase(it);
  shard.bytes -= charge;
  bytes_.fetch_sub(charge, std::memory_order_relaxed);
  entries_.fetch_sub(1, std::memory_order_relaxed);
}

void StateCache::DropRefilled(int64_t now_us) {
  const uint64_t resolved = resolved_.load(std::memory_order_acquire);
  for (size_t i = 0; i < kShards; ++i) {
    Shard& shard = shards_[i];
    absl::MutexLock lock(&shard.mu);
    for (auto it = shard.lru.begin(); it != shard.lru.end();) {
      const Entry& e = it->entry;
      auto next = std::next(it);
      if (e.ticket <= resolved && e.state && e.state->full_at_us <= now_us) EraseLocked(shard, it);
      it = next;
    }
  }
}

void StateCache::Clear() {
  for (size_t i = 0; i < kShards; ++i) {
    Shard& shard = shards_[i];
    absl::MutexLock lock(&shard.mu);
    while (!shard.lru.empty()) EraseLocked(shard, shard.lru.begin());
  }
}

}  // namespace ratelimit
