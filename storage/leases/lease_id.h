#ifndef RATELIMIT_STORAGE_LEASES_LEASE_ID_H_
#define RATELIMIT_STORAGE_LEASES_LEASE_ID_H_

// The ids the server gives leases: 32 lowercase hex digits, 128 random bits. The RocksDB store
// keeps such an id as its 16 bytes (storage/rocksdb/lease_record.h); the service refuses any
// other id in a Release or Extend (server/v1/lease_convert.h), which also makes them. Both check
// an id on every lease call, so the check is a table, not comparisons: the digits of a random id
// would mispredict a branch on every few.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ratelimit {

inline constexpr size_t kServerLeaseIdDigits = 32;
inline constexpr size_t kServerLeaseIdBytes = kServerLeaseIdDigits / 2;

namespace lease_id_internal {
// The value of each lowercase hex digit; 0x10 for every other byte.
inline constexpr std::array<uint8_t, 256> kHexValue = [] {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = 0x10;
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<uint8_t>(c - 'a' + 10);
  return t;
}();
inline uint8_t HexValue(char c) { return kHexValue[static_cast<uint8_t>(c)]; }
}  // namespace lease_id_internal

// The 16 bytes of `id` into `out`, in one pass over its digits, when IsServerLeaseId(id); false
// otherwise (`out` then holds no meaning).
inline bool ServerLeaseIdBytes(absl::string_view id, uint8_t (&out)[kServerLeaseIdBytes]) {
  if (id.size() != kServerLeaseIdDigits) return false;
  uint8_t any = 0;
  for (size_t i = 0; i < kServerLeaseIdBytes; ++i) {
    const uint8_t high = lease_id_internal::HexValue(id[2 * i]);
    const uint8_t low = lease_id_internal::HexValue(id[2 * i + 1]);
    any |= high | low;
    out[i] = static_cast<uint8_t>(high << 4 | (low & 0x0f));
  }
  return (any & 0x10) == 0;
}

// Whether `id` is an id the server makes: 32 lowercase hex digits.
inline bool IsServerLeaseId(absl::string_view id) {
  uint8_t bytes[kServerLeaseIdBytes];
  return ServerLeaseIdBytes(id, bytes);
}

// The id whose bytes are the kServerLeaseIdBytes at `bytes`, into `*out`: the inverse of
// ServerLeaseIdBytes.
inline void ServerLeaseIdOfBytes(const uint8_t* bytes, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out->resize(kServerLeaseIdDigits);
  for (size_t i = 0; i < kServerLeaseIdBytes; ++i) {
    (*out)[2 * i] = kDigits[bytes[i] >> 4];
    (*out)[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
}

// A new lease id: 128 random bits (the CSPRNG's) as 32 lowercase hex digits. Thread-safe.
std::string NewLeaseId();

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LEASES_LEASE_ID_H_
