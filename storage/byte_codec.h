#ifndef RATELIMIT_STORAGE_BYTE_CODEC_H_
#define RATELIMIT_STORAGE_BYTE_CODEC_H_

// The byte-level pieces the stores' value codecs are made of: little-endian fixed-width numbers
// and base-128 varints (7 bits a byte, low groups first, the high bit set on every byte but the
// last), written at a cursor into a buffer sized beforehand and read from the front of a view
// that every read checks its length against. One implementation for the state values
// (rocksdb/state_codec.h), the lease sets (leases/lease_codec.h) and the lease records
// (rocksdb/lease_record.h), whose layouts are written in those headers.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace ratelimit {

// Bytes the varint of `v` takes: 1..10.
inline size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline void StoreFixed64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

inline uint64_t LoadFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

inline void StoreFixed32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

inline uint32_t LoadFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// Writes at a cursor into a buffer the caller sized for everything written (nothing is
// checked: the encoders compute their sizes first, and tests compare them with what was written).
class ByteWriter {
 public:
  explicit ByteWriter(char* at) : at_(at) {}
  void U8(uint8_t v) { *at_++ = static_cast<char>(v); }
  void Fixed32(uint32_t v) {
    StoreFixed32(at_, v);
    at_ += 4;
  }
  void Fixed64(uint64_t v) {
    StoreFixed64(at_, v);
    at_ += 8;
  }
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      *at_++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *at_++ = static_cast<char>(v);
  }
  void Bytes(absl::string_view s) {
    if (!s.empty()) std::memcpy(at_, s.data(), s.size());
    at_ += s.size();
  }
  char* at() const { return at_; }

 private:
  char* at_;
};

// Reads from the front of a view; a read that would pass its end (or a varint longer than 10
// bytes) fails, returning false, and leaves the view as it was.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view in) : in_(in) {}

  bool U8(uint8_t& v) {
    if (in_.empty()) return false;
    v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool Fixed32(uint32_t& v) {
    if (in_.size() < 4) return false;
    v = LoadFixed32(in_.data());
    in_.remove_prefix(4);
    return true;
  }
  bool Fixed64(uint64_t& v) {
    if (in_.size() < 8) return false;
    v = LoadFixed64(in_.data());
    in_.remove_prefix(8);
    return true;
  }
  bool Varint(uint64_t& v) {
    uint64_t result = 0;
    for (size_t i = 0; i < 10 && i < in_.size(); ++i) {
      const uint8_t b = static_cast<uint8_t>(in_[i]);
      result |= uint64_t{b & 0x7fu} << (7 * i);
      if ((b & 0x80) == 0) {
        v = result;
        in_.remove_prefix(i + 1);
        return true;
      }
    }
    return false;
  }
  // The next `n` bytes, as a view into the input.
  bool Bytes(size_t n, absl::string_view& out) {
    if (in_.size() < n) return false;
    out = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  // A varint length, then that many bytes, copied into `out`.
  bool VarintString(std::string& out) {
    ByteReader at = *this;
    uint64_t n = 0;
    absl::string_view bytes;
    if (!at.Varint(n) || n > at.left() || !at.Bytes(static_cast<size_t>(n), bytes)) return false;
    out.assign(bytes.data(), bytes.size());
    *this = at;
    return true;
  }
  size_t left() const { return in_.size(); }
  absl::string_view rest() const { return in_; }

 private:
  absl::string_view in_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_BYTE_CODEC_H_
