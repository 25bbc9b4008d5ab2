#ifndef RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_SLOT_H_
#define RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_SLOT_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ratelimit::redis {

// The number of hash slots of a Redis Cluster.
inline constexpr int kSlotCount = 16384;

// CRC16 as the Redis Cluster specification defines it (CRC-16/XMODEM: polynomial 0x1021,
// initial value 0, no reflection, no final xor). Crc16("123456789") == 0x31C3.
uint16_t Crc16(absl::string_view data);

// The slot of `key`, 0..kSlotCount-1, by the specification's hash tag rule: if the key contains
// a '{' and, after the first '{', a '}' with at least one character between them, only the
// characters between that first '{' and the first '}' after it are hashed; otherwise (no '{',
// no '}' after it, or "{}") the whole key is hashed.
int KeySlot(absl::string_view key);

// The part of `key` that KeySlot hashes (the hash tag, or the whole key).
absl::string_view HashTagOf(absl::string_view key);

// A short hash tag that lands in `slot`: the smallest decimal number n with KeySlot("{n}") ==
// slot, so "{" + SlotTag(slot) + "}anything" is a key of `slot`. Computed once, on first use.
// REQUIRES: 0 <= slot < kSlotCount. Thread-safe.
absl::string_view SlotTag(int slot);

}  // namespace ratelimit::redis

#endif  // RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_SLOT_H_
