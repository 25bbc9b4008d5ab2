#include "storage/rocksdb/state_codec.h"

#include <cstring>

#include "storage/byte_codec.h"

namespace ratelimit {
namespace {

// The encoded key prefix of (`source`, `name`), with room reserved for `key_size` more bytes.
std::string KeyPrefix(LimitSource source, absl::string_view name, size_t key_size) {
  std::string out;
  out.reserve(3 + name.size() + key_size);
  out.push_back(static_cast<char>(source));
  out.push_back(static_cast<char>((name.size() >> 8) & 0xff));
  out.push_back(static_cast<char>(name.size() & 0xff));
  out.append(name.data(), name.size());
  return out;
}

}  // namespace

std::string NameRangeBegin(LimitSource source, absl::string_view name) {
  return KeyPrefix(source, name, 0);
}

std::string NameRangeEnd(LimitSource source, absl::string_view name) {
  // The smallest string greater than every string that starts with the prefix. The source
  // byte is never 0xff, so the prefix never consists of 0xff bytes only.
  std::string end = NameRangeBegin(source, name);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

std::string EncodeStateKey(LimitSource source, absl::string_view name, absl::string_view key) {
  // One allocation at most (none when it fits the string's inline buffer).
  std::string out = KeyPrefix(source, name, key.size());
  out.append(key.data(), key.size());
  return out;
}

std::string UpgradeV1StateKey(absl::string_view v1_key) {
  std::string out;
  out.reserve(1 + v1_key.size());
  out.push_back(static_cast<char>(LimitSource::kDefined));
  out.append(v1_key.data(), v1_key.size());
  return out;
}

EncodedState EncodeStateBytes(const State& s) {
  EncodedState out;
  uint64_t bits;
  std::memcpy(&bits, &s.value, sizeof bits);
  StoreFixed64(out.data(), bits);
  StoreFixed64(out.data() + 8, static_cast<uint64_t>(s.ts_us));
  StoreFixed64(out.data() + 16, static_cast<uint64_t>(s.full_at_us));
  if (s.counted_against != 0) {
    std::memcpy(&bits, &s.counted_against, sizeof bits);
    StoreFixed64(out.data() + 24, bits);
    out.set_size(kEncodedCountedStateBytes);
  }
  return out;
}

std::string EncodeState(const State& s) {
  const EncodedState bytes = EncodeStateBytes(s);
  return std::string(bytes.data(), bytes.size());
}

std::optional<State> DecodeState(absl::string_view bytes) {
  if (bytes.size() != kEncodedStateBytes && bytes.size() != kEncodedCountedStateBytes) {
    return std::nullopt;
  }
  State s;
  uint64_t bits = LoadFixed64(bytes.data());
  std::memcpy(&s.value, &bits, sizeof bits);
  s.ts_us = static_cast<int64_t>(LoadFixed64(bytes.data() + 8));
  s.full_at_us = static_cast<int64_t>(LoadFixed64(bytes.data() + 16));
  if (bytes.size() == kEncodedCountedStateBytes) {
    bits = LoadFixed64(bytes.data() + 24);
    std::memcpy(&s.counted_against, &bits, sizeof bits);
    // Only a positive, finite capacity is ever written.
    if (!(s.counted_against > 0 && s.counted_against <= 1e300)) return std::nullopt;
  }
  return s;
}

std::string EncodeRecordValue(int64_t expires_at_us, absl::string_view value) {
  std::string out(8, '\0');
  StoreFixed64(out.data(), static_cast<uint64_t>(expires_at_us));
  out.append(value.data(), value.size());
  return out;
}

std::optional<std::pair<int64_t, absl::string_view>> DecodeRecordValue(absl::string_view bytes) {
  if (bytes.size() < 8) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(LoadFixed64(bytes.data())), bytes.substr(8));
}

}  // namespace ratelimit
