#ifndef RATELIMIT_STORAGE_LEASES_LEASE_ID_H_
#define RATELIMIT_STORAGE_LEASES_LEASE_ID_H_

// A lease's id: 128 bits the server draws from the CSPRNG for each lease it grants (never a
// counter: the id is what a Release or an Extend proves the lease with). Outside the server an id
// is written as 32 lowercase hex digits: Lease.id in the proto, the fields of the Redis library's
// hashes, Envoy's lease tokens, the earlier record formats of the RocksDB store. Inside, it is its
// 16 bytes, held in the value: a lease, an op and every copy of an id carry no heap block, and two
// ids compare as two words.
//
// The all-zero id is no lease's: it is what an op that names no lease carries (a check, a list, a
// reset), New never draws it and Parse refuses its digits.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace ratelimit {

class LeaseId {
 public:
  static constexpr size_t kDigits = 32;
  static constexpr size_t kBytes = 16;

  // The empty id (no lease's).
  constexpr LeaseId() = default;

  // A new id: 128 bits of the CSPRNG, never the empty id. Thread-safe.
  static LeaseId New();

  // The id `digits` write: nullopt unless they are 32 lowercase hex digits, not all zeros. One
  // pass over a table, no branch per digit: a service parses an id on every release and extend,
  // and a random id's digits would mispredict a comparison every few digits.
  static std::optional<LeaseId> Parse(absl::string_view digits);

  // The id of the kBytes at `bytes`, most significant first (the order of its digits).
  static LeaseId FromBytes(const uint8_t* bytes);
  // The id of two 64-bit words, `high` first: ids a test or a benchmark names by number.
  static constexpr LeaseId FromWords(uint64_t high, uint64_t low) {
    LeaseId id;
    id.high_ = high;
    id.low_ = low;
    return id;
  }

  bool empty() const { return (high_ | low_) == 0; }
  uint64_t high() const { return high_; }
  uint64_t low() const { return low_; }

  // Its kBytes into `out`, most significant first: the inverse of FromBytes.
  void ToBytes(uint8_t* out) const;
  // Its kDigits lowercase hex digits into out[0..kDigits).
  void WriteDigits(char* out) const;
  // Its digits; "" for the empty id.
  std::string ToString() const;

  friend bool operator==(const LeaseId& a, const LeaseId& b) {
    return a.high_ == b.high_ && a.low_ == b.low_;
  }
  friend bool operator!=(const LeaseId& a, const LeaseId& b) { return !(a == b); }
  // The order of their digits.
  friend bool operator<(const LeaseId& a, const LeaseId& b) {
    return a.high_ != b.high_ ? a.high_ < b.high_ : a.low_ < b.low_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const LeaseId& id) {
    return H::combine(std::move(h), id.high_, id.low_);
  }
  // Its digits (tests' messages).
  friend std::ostream& operator<<(std::ostream& os, const LeaseId& id);

 private:
  uint64_t high_ = 0;  // bytes 0..7: digits 0..15
  uint64_t low_ = 0;   // bytes 8..15: digits 16..31
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_LEASE_ID_H_
