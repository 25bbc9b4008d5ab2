#ifndef RATELIMIT_STORAGE_ROCKSDB_LEASE_RECORD_H_
#define RATELIMIT_STORAGE_ROCKSDB_LEASE_RECORD_H_

// How the RocksDB store keeps the leases of a concurrency key: one record per lease in the records
// column family, so that a decision writes only the lease it changes, however many the key holds.
// A record is a numbered place of its key (Lease::record, 1 and up), reused: an acquire takes the
// lowest number no lease of the key holds, a release without a request_id writes its place free.
// Records are padded to a size class and a free place keeps its record's size, so that a key's
// next record under a number usually has the size of the one in the memtable and RocksDB writes it
// over that one in place (the records family has in-place updates, rocksdb_state_store.cc): a hot
// key's decisions add no memtable entries, as a hot rate limit's do not.
//   key:   "M" [source: u8] [name length: u16 big-endian] [name] [key length: u16 big-endian]
//          [key] [record number: u32 big-endian]
//   value: [expires_at_us: i64] (state_codec.h), then
//          a lease:  [2] [flags: u8, bit 0 = released, bit 1 = binary id] [count: varint]
//                    [acquired_at_us: i64] [expires_at_us: i64] [id] [request_id: string]
//                    [holder: string] [zeros]
//          free:     zeros (the expiry 0: it reads as absent, and compaction drops it)
// Numbers little-endian; a string is a varint length then its bytes; the id is its 16 bytes
// (binary id set: every record this version writes), or, in a record of an earlier version
// (binary id clear), a string of its 32 lowercase hex digits. A lease
// the server made, without a request_id or holder, takes 45 bytes and its record 64 (half the 128
// bytes earlier versions wrote for each decision). Records of earlier versions,
//                    [1] [n: u32] [n bytes: the lease (lease_codec.h AppendLeaseEntry)] [zeros]
// are still read.
// A lease's record expires kLeaseRecordMarginMicros after the lease, so that it is never dropped
// while a decision whose clock reads earlier may still find it held; the algebra drops the lease
// at its expiry, and its number is free again.
//
// Earlier versions kept a key's whole set as one record under LeaseRecordKey (the "L" keys of
// storage/leases/apply_lease.h), rewritten by every decision. The store moves such records'
// leases to records of their own when it opens (ParseLeaseRecordKey of
// storage/leases/apply_lease.h, DecodeLeaseSetRecord).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/leases/lease.h"

namespace rocksdb {
class SliceTransform;
}  // namespace rocksdb

namespace ratelimit {

// The smallest lease record's value: it holds a lease the server made whose request_id and holder
// are together at most 19 bytes.
inline constexpr size_t kMinLeaseRecordBytes = 64;

// The first byte of every lease record's key, and of no other record's.
inline constexpr char kLeaseEntryTag = 'M';
// The prefix of the lease records of `key`, and of no other key's.
std::string LeaseEntryPrefix(const StateKey& key);
// The prefix of the lease records of every key of limit `name` of `source`, and of no other
// limit's.
std::string LeaseEntryLimitPrefix(LimitSource source, absl::string_view name);
// The key of record `record` of the key whose LeaseEntryPrefix is `prefix`, into `*out` (its
// capacity kept).
void LeaseEntryKey(absl::string_view prefix, uint32_t record, std::string* out);

// A lease record's key split: the concurrency key it belongs to and the record's number. nullopt
// when `record_key` is not a lease record's key.
struct LeaseEntryKeyParts {
  StateKey key;
  uint32_t record = 0;
};
std::optional<LeaseEntryKeyParts> ParseLeaseEntryKey(absl::string_view record_key);
// The length of the LeaseEntryPrefix that `record_key` starts with when it is a lease record's
// key (its size less the record number), else nullopt. Allocates nothing.
std::optional<size_t> LeaseEntryPrefixLength(absl::string_view record_key);
// The records family's prefix extractor: a lease record's key to its LeaseEntryPrefix (the
// records of one concurrency key share it), any other key of the family to itself. With it, the
// family's memtable finds a key's records by a hash of that prefix (rocksdb_state_store.cc), not
// by a search through every key's. Its name is "ratelimit.LeaseEntryPrefix".
std::shared_ptr<const rocksdb::SliceTransform> NewLeaseEntryPrefixExtractor();

// The size of the value of `lease`'s record: its bytes rounded up to a multiple of 64 (so at least
// kMinLeaseRecordBytes).
size_t LeaseEntryRecordBytes(const Lease& lease);
// A record's size as Lease::record_bytes keeps it: 0 (not known) when it does not fit.
inline uint16_t RecordBytesOf(size_t bytes) {
  return bytes <= UINT16_MAX ? static_cast<uint16_t>(bytes) : 0;
}
// The size of the record `lease` was last written to or read from: Lease::record_bytes when
// known, else LeaseEntryRecordBytes(lease) (the size a record of it is written at).
inline size_t KnownLeaseRecordBytes(const Lease& lease) {
  return lease.record_bytes != 0 ? lease.record_bytes : LeaseEntryRecordBytes(lease);
}
// The record value of `lease` into `*out` (its capacity kept), LeaseEntryRecordBytes(lease) long,
// expiring at LeaseRecordExpiry(lease.expires_at_us).
void EncodeLeaseEntryRecord(const Lease& lease, std::string* out);
// The value of a free record `bytes` long (at least 8) into `*out`.
void EncodeFreeLeaseRecord(size_t bytes, std::string* out);
// A lease record's value: the lease (its `record` left 0); DATA_LOSS when it is not one
// EncodeLeaseEntryRecord made (a free record included). Never crashes, whatever the bytes.
absl::StatusOr<Lease> DecodeLeaseEntryRecord(absl::string_view value);

// A key's set record as earlier versions wrote it (under LeaseRecordKey): its expiry and its set.
// Two forms are read: the set's bytes (lease_codec.h) and the padded form
//   [0xff] [n: u32] [n bytes: the set] [zero bytes to the record's size]
// DATA_LOSS for anything else. Never crashes, whatever the bytes.
absl::StatusOr<std::pair<int64_t, LeaseSet>> DecodeLeaseSetRecord(absl::string_view value);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_LEASE_RECORD_H_
