#ifndef RATELIMIT_SERVER_OBSERVABILITY_PROTOWIRE_H_
#define RATELIMIT_SERVER_OBSERVABILITY_PROTOWIRE_H_

// Appending protobuf wire-format fields to a string (varints, fixed-width numbers and
// length-delimited bytes). Used to write OTLP spans without building message objects.

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "storage/byte_codec.h"

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
  ByteWriter w(buf);
  w.Varint(v);
  out.append(buf, static_cast<size_t>(w.at() - buf));
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
  StoreFixed64(buf, v);
  out.append(buf, 8);
}

inline void PutFixed32(std::string& out, int field, uint32_t v) {
  PutTag(out, field, kFixed32);
  char buf[4];
  StoreFixed32(buf, v);
  out.append(buf, 4);
}

inline void PutDouble(std::string& out, int field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  PutFixed64(out, field, bits);
}

// Bytes PutVarint(v) appends.
inline size_t VarintSize(uint64_t v) { return VarintBytes(v); }

}  // namespace ratelimit::protowire

#endif  // RATELIMIT_SERVER_OBSERVABILITY_PROTOWIRE_H_
