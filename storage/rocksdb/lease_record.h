#ifndef RATELIMIT_STORAGE_ROCKSDB_LEASE_RECORD_H_
#define RATELIMIT_STORAGE_ROCKSDB_LEASE_RECORD_H_

// How the RocksDB store keeps a concurrency key's lease set: one record of the records column
// family (state_codec.h: [expires_at_us: i64] then the payload), written by every decision that
// changes the set. The payload is the set's bytes (lease_codec.h) padded to a size class:
//   [0xff] [n: u32] [n bytes: the set] [zero bytes to the record's size]
// so that the key's next record has the size of the one in the memtable and RocksDB writes it
// over that one in place (the records family has in-place updates, rocksdb_state_store.cc)
// instead of adding a memtable entry per decision. For the same reason a set that empties is
// written as an empty set, not deleted; it reads as absent, and expires as every record does.
// A payload that is the set's bytes alone (starting with the codec's version byte, 1) is the form
// earlier versions wrote; it is still read.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/leases/lease.h"

namespace ratelimit {

// The smallest record; 128 bytes hold a set of one lease without a request_id or holder.
inline constexpr size_t kMinLeaseRecordBytes = 128;

// The bytes of the record of `set` before padding.
size_t LeaseRecordNeeds(const LeaseSet& set);

// The size of a key's next record, which must hold `needed` bytes: `current` (the size of the
// key's record now; 0: not known) when that holds them and they are at least a quarter of it, so
// that a set changing by a lease or two keeps its record's size; otherwise the size class of
// `needed`: at least kMinLeaseRecordBytes, above it the next multiple of a quarter of the power
// of two below (at most a quarter of padding).
size_t LeaseRecordBytes(size_t needed, size_t current);

// The record value of `set`, expiring at `expires_at_us`, padded to `record_bytes`.
// REQUIRES: record_bytes >= LeaseRecordNeeds(set).
std::string EncodeLeaseRecord(int64_t expires_at_us, const LeaseSet& set, size_t record_bytes);
// The same into `*out`, replacing its bytes and keeping its capacity (a buffer reused across
// decisions allocates nothing).
void EncodeLeaseRecord(int64_t expires_at_us, const LeaseSet& set, size_t record_bytes,
                       std::string* out);

// A stored record value: its expiry and its set; DATA_LOSS when it is not one EncodeLeaseRecord
// (or an earlier version) wrote. Never crashes, whatever the bytes.
absl::StatusOr<std::pair<int64_t, LeaseSet>> DecodeLeaseRecord(absl::string_view value);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_LEASE_RECORD_H_
