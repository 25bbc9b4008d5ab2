#ifndef RATELIMIT_STORAGE_STATE_CODEC_H_
#define RATELIMIT_STORAGE_STATE_CODEC_H_

// The on-disk encoding of states (format version 1).
//
// Key:   [name length: uint16 big-endian][name bytes][key bytes]
//        The length prefix makes every key of one name a contiguous range that no other name's
//        keys fall inside (a name that is a prefix of another sorts in its own range).
// Value: [value: IEEE-754 double, little-endian][ts_us: int64 LE][full_at_us: int64 LE]

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "storage/algebra.h"

namespace ratelimit {

inline constexpr int kStateFormatVersion = 1;
inline constexpr size_t kEncodedStateBytes = 24;

// REQUIRES: name.size() <= 65535.
std::string EncodeStateKey(absl::string_view name, absl::string_view key);

// [begin, end) covering every encoded key of `name`.
std::string NameRangeBegin(absl::string_view name);
std::string NameRangeEnd(absl::string_view name);

std::string EncodeState(const State& state);
// nullopt when `bytes` is not a valid encoding.
std::optional<State> DecodeState(absl::string_view bytes);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STATE_CODEC_H_
