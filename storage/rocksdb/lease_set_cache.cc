#include "storage/rocksdb/lease_set_cache.h"

#include <utility>

namespace ratelimit {

namespace {

// Strings past the small-string buffer own a heap block of their capacity.
size_t HeapBytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}

size_t StringBytes(const LeaseSet& set) {
  size_t bytes = 0;
  for (const Lease& l : set.leases) bytes += LeaseStringBytes(l);
  return bytes;
}

size_t FixedBytes(const LeaseSet& set) {
  return sizeof(LeaseSet) + set.leases.capacity() * sizeof(Lease) + set.index.MemoryBytes();
}

}  // namespace

size_t LeaseStringBytes(const Lease& lease) {
  return HeapBytes(lease.request_id) + HeapBytes(lease.holder);
}

size_t LeaseSetMemoryBytes(const LeaseSet& set) { return FixedBytes(set) + StringBytes(set); }

void AccountLeaseDecision(const LeaseOp& op, const LeaseDecision& d, LeaseSetBook& book) {
  if (op.action == LeaseAction::kReset) {
    book.strings_known = true;
    book.string_bytes = 0;
    return;
  }
  if (d.read_all) book.strings_known = false;
  if (!book.strings_known) return;
  for (const Lease& l : d.dropped) {
    const size_t gone = LeaseStringBytes(l);
    book.string_bytes = book.string_bytes > gone ? book.string_bytes - gone : 0;
  }
  if (!d.write) return;
  if (op.action == LeaseAction::kAcquire && d.lease && !d.replayed) {
    // The new lease, appended (lease.h).
    book.string_bytes += LeaseStringBytes(d.next.leases.back());
  } else if (op.action == LeaseAction::kRelease && d.released && d.released->request_id.empty()) {
    // Removed from the set (one with a request_id is kept, released).
    const size_t gone = LeaseStringBytes(*d.released);
    book.string_bytes = book.string_bytes > gone ? book.string_bytes - gone : 0;
  }
}

LeaseSetCache::Entry LeaseSetCache::Make(std::shared_ptr<LeaseSet> set, int64_t expires_at_us,
                                         uint64_t ticket, LeaseSetBook book) {
  Entry entry;
  entry.ticket = ticket;
  if (set != nullptr && !set->leases.empty()) {
    if (!book.strings_known) {
      book.string_bytes = StringBytes(*set);
      book.strings_known = true;
    }
    entry.bytes = FixedBytes(*set) + book.string_bytes;
    entry.expires_at_us = expires_at_us;
    entry.book = book;
    entry.set = std::move(set);
  }
  return entry;
}

void LeaseSetCache::DropExpired(int64_t now_us) {
  DropWrittenIf([now_us](const Entry& e) { return e.set != nullptr && e.expires_at_us <= now_us; });
}

}  // namespace ratelimit
