#ifndef RATELIMIT_STORAGE_ROCKSDB_STATE_CODEC_H_
#define RATELIMIT_STORAGE_ROCKSDB_STATE_CODEC_H_

// The on-disk encoding of states (format version 2).
//
// Key:   [source: 1 byte, the LimitSource value][name length: uint16 big-endian][name bytes]
//        [key bytes]
//        The source byte gives each source of limits its own namespace. The length prefix makes
//        every key of one (source, name) a contiguous range that no other name's keys fall
//        inside (a name that is a prefix of another sorts in its own range).
// Value: [value: IEEE-754 double, little-endian][ts_us: int64 LE][full_at_us: int64 LE]
//
// Records (column family "records", keyed by the record's key): [expires_at_us: int64 LE]
//        [the record's bytes].
//
// Format 1 had no source byte: [name length][name][key]. Its first byte is the high byte of a
// name length (0 or 1, names being at most 256 bytes), below every source byte, so format-1 keys
// sort before every format-2 key and are told apart by their first byte alone.

#include <array>
#include <optional>
#include <string>
#include <utility>
#include "absl/strings/string_view.h"

#include "storage/algebra.h"

namespace ratelimit {

// Format 3 adds a fixed window's counted_against (a 32-byte state); a 24-byte state of format 2
// reads as one without it, so the upgrade rewrites nothing.
inline constexpr int kStateFormatVersion = 3;
inline constexpr size_t kEncodedStateBytes = 24;
inline constexpr size_t kEncodedCountedStateBytes = 32;

// REQUIRES: name.size() <= 65535.
std::string EncodeStateKey(LimitSource source, absl::string_view name, absl::string_view key);

// [begin, end) covering every encoded key of (`source`, `name`).
std::string NameRangeBegin(LimitSource source, absl::string_view name);
std::string NameRangeEnd(LimitSource source, absl::string_view name);

// Format 1 -> 2: every format-1 key lies in [kV1KeysBegin, kV1KeysEnd); its format-2 form is the
// same bytes after the source byte of the limits file, where format 1 kept every state.
inline constexpr absl::string_view kV1KeysBegin = "";
inline constexpr absl::string_view kV1KeysEnd = "\x02";
std::string UpgradeV1StateKey(absl::string_view v1_key);

// The encoding of a state, in a fixed buffer (no allocation on the write path): value, ts_us and
// full_at_us (24 bytes), then counted_against when it is set (32).
class EncodedState {
 public:
  const char* data() const { return bytes_.data(); }
  char* data() { return bytes_.data(); }
  size_t size() const { return size_; }
  void set_size(size_t size) { size_ = size; }

 private:
  std::array<char, kEncodedCountedStateBytes> bytes_;
  size_t size_ = kEncodedStateBytes;
};
EncodedState EncodeStateBytes(const State& state);
std::string EncodeState(const State& state);
// nullopt when `bytes` is not a valid encoding.
std::optional<State> DecodeState(absl::string_view bytes);

// The stored value of an idempotency record.
std::string EncodeRecordValue(int64_t expires_at_us, absl::string_view value);
// The expiry and bytes (a view into `bytes`) of a stored record; nullopt when malformed.
std::optional<std::pair<int64_t, absl::string_view>> DecodeRecordValue(absl::string_view bytes);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_STATE_CODEC_H_
