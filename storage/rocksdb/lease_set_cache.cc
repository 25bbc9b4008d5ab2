#include "storage/rocksdb/lease_set_cache.h"

#include <utility>

namespace ratelimit {

size_t LeaseSetMemoryBytes(const LeaseSet& set) {
  size_t bytes = sizeof(LeaseSet) + set.leases.capacity() * sizeof(Lease);
  // Strings past the small-string buffer own a heap block of their capacity.
  const auto heap = [](const std::string& s) {
    return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
  };
  for (const Lease& l : set.leases) bytes += heap(l.id) + heap(l.request_id) + heap(l.holder);
  return bytes;
}

LeaseSetCache::Entry LeaseSetCache::Make(std::shared_ptr<LeaseSet> set, int64_t expires_at_us,
                                         uint64_t ticket) {
  Entry entry;
  entry.ticket = ticket;
  if (set != nullptr && !set->leases.empty()) {
    entry.bytes = LeaseSetMemoryBytes(*set);
    entry.expires_at_us = expires_at_us;
    entry.set = std::move(set);
  }
  return entry;
}

void LeaseSetCache::DropExpired(int64_t now_us) {
  DropWrittenIf([now_us](const Entry& e) { return e.set != nullptr && e.expires_at_us <= now_us; });
}

}  // namespace ratelimit
