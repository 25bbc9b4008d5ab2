#ifndef RATELIMIT_SERVER_OBSERVABILITY_PROTOWIRE_H_
#define RATELIMIT_SERVER_OBSERVABILITY_PROTOWIRE_H_

// Appending protobuf wire-format fields to a string (varints, fixed-width numbers and
// length-delimited bytes). Used to write OTLP spans without building message objects.

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace ratelimit::protowire {

// Thread safety: stateless inline functions appending to a caller-owned string; safe to call
// from any thread on distinct strings.

inline constexpr int kVarint = 0;
inline constexpr int kFixed64 = 1;
inline constexpr int kLen = 2;
inline constexpr int kFixed32 = 5;

inline void PutVarint(std::string& out, uint64_t v) {
  if (v < 0x80) {  // tags, small lengths and flags: one byte
    out.push_back(static_cast<char>(v));
    return;
  }
  char buf[10];  // a 64-bit varint takes at most 10 bytes
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out.append(buf, n);
}

inline void PutTag(std::string& out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | wire_type);
}

inline void PutBytes(std::string& out, int field, absl::string_view bytes) {
  PutTag(out, field, kLen);
  PutVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

inline void PutUint(std::string& out, int field, uint64_t v) {
  PutTag(out, field, kVarint);
  PutVarint(out, v);
}

inline void PutFixed64(std::string& out, int field, uint64_t v) {
  PutTag(out, field, kFixed64);
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
  out.append(buf, 8);
}

inline void PutFixed32(std::string& out, int field, uint32_t v) {
  PutTag(out, field, kFixed32);
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(v >> (8 * i));
  out.append(buf, 4);
}

inline void PutDouble(std::string& out, int field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  PutFixed64(out, field, bits);
}

// Bytes PutVarint(v) appends.
inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

}  // namespace ratelimit::protowire

#endif  // RATELIMIT_SERVER_OBSERVABILITY_PROTOWIRE_H_
