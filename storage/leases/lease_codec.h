#ifndef RATELIMIT_STORAGE_LEASES_LEASE_CODEC_H_
#define RATELIMIT_STORAGE_LEASES_LEASE_CODEC_H_

// The stored form of a LeaseSet (lease.h), the same on every store that keeps it as bytes:
//   [version: u8 = 1] [leases: u32] then per lease, in the set's order:
//   [flags: u8, bit 0 = released, other bits 0] [count: i64] [acquired_at_us: i64]
//   [expires_at_us: i64] [id] [request_id] [holder]
// Numbers little-endian, fixed width; each string a u32 length then its bytes; the id is a string
// of its 32 lowercase hex digits (lease_id.h). An empty set is the 5 bytes 01 00 00 00 00.

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/leases/lease.h"

namespace ratelimit {

inline constexpr uint8_t kLeaseCodecVersion = 1;

// The stored bytes of `set`. REQUIRES: every string of every lease is shorter than 4 GiB.
std::string EncodeLeaseSet(const LeaseSet& set);
// The same bytes appended to `out` (a store that prefixes them with a header of its own builds
// the whole value in one string), and their number.
void AppendLeaseSet(const LeaseSet& set, std::string* out);
size_t EncodedLeaseSetSize(const LeaseSet& set);

// The set stored as `bytes`; DATA_LOSS for bytes that EncodeLeaseSet did not make (an unknown
// version, a truncated or overlong encoding, unknown flags, a count outside 1..kMaxSlots, an id
// that is not 32 lowercase hex digits, not all zeros). Never
// crashes, whatever the bytes.
absl::StatusOr<LeaseSet> DecodeLeaseSet(absl::string_view bytes);

// One lease alone, encoded as a lease of a set is (from its flags to its holder), for a store
// that keeps each lease in a record of its own (the RocksDB store: storage/rocksdb/
// lease_record.h).
void AppendLeaseEntry(const Lease& lease, std::string* out);
size_t EncodedLeaseEntrySize(const Lease& lease);
// The lease stored as `bytes`; DATA_LOSS as DecodeLeaseSet. Never crashes, whatever the bytes.
absl::StatusOr<Lease> DecodeLeaseEntry(absl::string_view bytes);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_LEASE_CODEC_H_
