#ifndef RATELIMIT_STORAGE_ROCKSDB_SPARE_LEASE_SETS_H_
#define RATELIMIT_STORAGE_ROCKSDB_SPARE_LEASE_SETS_H_

// Lease set objects of keys whose last lease ended, kept for the next key a decision finds
// without one. The cache of lease sets (lease_set_cache.h) keeps no set of no leases, so a pair on
// one of many keys (acquire on an idle key, release of its only lease) would allocate the set and
// its leases' buffer and free both every time; buffers of a lease's size are more than the
// allocator's per-thread caches keep, so a burst of such pairs merged and split free chunks. With
// a spare, the acquire fills the buffer the release emptied.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "storage/leases/lease.h"

namespace ratelimit {

// Thread safety: none; a store keeps one per thread.
class SpareLeaseSets {
 public:
  static constexpr size_t kMaxKept = 64;  // objects kept
  static constexpr size_t kMaxRoom = 8;   // leases an object kept has room for, at most

  // An object holding no leases: a kept one (its buffer's room still there), or a new one.
  std::shared_ptr<LeaseSet> Take() {
    if (sets_.empty()) return std::make_shared<LeaseSet>();
    std::shared_ptr<LeaseSet> set = std::move(sets_.back());
    sets_.pop_back();
    return set;
  }

  // Keeps `set` for a later Take when nothing else holds it, it holds no lease, its buffer has
  // room for at most kMaxRoom leases and fewer than kMaxKept are kept; otherwise lets it go.
  void GiveBack(std::shared_ptr<LeaseSet> set) {
    if (set == nullptr || set.use_count() != 1 || !set->leases.empty() ||
        set->leases.capacity() > kMaxRoom || sets_.size() >= kMaxKept) {
      return;
    }
    sets_.push_back(std::move(set));
  }

  size_t kept() const { return sets_.size(); }

 private:
  std::vector<std::shared_ptr<LeaseSet>> sets_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_SPARE_LEASE_SETS_H_
