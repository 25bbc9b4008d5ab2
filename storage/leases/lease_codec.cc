#include "storage/leases/lease_codec.h"

#include <cassert>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

// The fixed part of one lease: flags, three i64 and three string lengths.
constexpr size_t kFixedLeaseBytes = 1 + 3 * 8 + 3 * 4;

// Writes little-endian numbers and length-prefixed strings at a cursor into a buffer sized for
// them beforehand (EncodedLeaseSetSize).
class Writer {
 public:
  explicit Writer(char* at) : at_(at) {}
  void U8(uint8_t v) { *at_++ = static_cast<char>(v); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) *at_++ = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void I64(int64_t value) {
    const uint64_t v = static_cast<uint64_t>(value);
    for (int i = 0; i < 8; ++i) *at_++ = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void String(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(at_, s.data(), s.size());
    at_ += s.size();
  }
  char* at() const { return at_; }

 private:
  char* at_;
};

// Reads from the front of `in`; every read fails (false) instead of reading past the end.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}

  bool U8(uint8_t& v) {
    if (in_.empty()) return false;
    v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t& v) {
    if (in_.size() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    in_.remove_prefix(4);
    return true;
  }
  bool I64(int64_t& value) {
    if (in_.size() < 8) return false;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    value = static_cast<int64_t>(v);
    in_.remove_prefix(8);
    return true;
  }
  bool String(std::string& s) {
    uint32_t n = 0;
    if (!U32(n) || in_.size() < n) return false;
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  size_t left() const { return in_.size(); }

 private:
  absl::string_view in_;
};

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed lease set: ", what));
}

// The fields of a lease after its flags and before its id, and its strings after the id.
void WriteHead(Writer& w, const Lease& l) {
  w.U8(l.released ? 1 : 0);
  w.I64(l.count);
  w.I64(l.acquired_at_us);
  w.I64(l.expires_at_us);
}

absl::Status ReadHead(Reader& in, Lease& l) {
  uint8_t flags = 0;
  if (!in.U8(flags) || !in.I64(l.count) || !in.I64(l.acquired_at_us) || !in.I64(l.expires_at_us)) {
    return Malformed("truncated lease");
  }
  if ((flags & ~uint8_t{1}) != 0) return Malformed("unknown flags");
  if (l.count < 1 || l.count > static_cast<int64_t>(kMaxSlots)) {
    return Malformed("a lease of no slots or more than 1e9");
  }
  l.released = (flags & 1) != 0;
  return absl::OkStatus();
}

}  // namespace

size_t EncodedLeaseSetSize(const LeaseSet& set) {
  size_t size = 5;
  for (const Lease& l : set.leases) size += EncodedLeaseEntrySize(l);
  return size;
}

void AppendLeaseSet(const LeaseSet& set, std::string* out) {
  const size_t begin = out->size();
  const size_t size = EncodedLeaseSetSize(set);
  out->resize(begin + size);
  Writer w(out->data() + begin);
  w.U8(kLeaseCodecVersion);
  w.U32(static_cast<uint32_t>(set.leases.size()));
  for (const Lease& l : set.leases) {
    WriteHead(w, l);
    w.String(l.id);
    w.String(l.request_id);
    w.String(l.holder);
  }
  assert(w.at() == out->data() + out->size());
}

std::string EncodeLeaseSet(const LeaseSet& set) {
  std::string out;
  AppendLeaseSet(set, &out);
  return out;
}

absl::StatusOr<LeaseSet> DecodeLeaseSet(absl::string_view bytes) {
  Reader in(bytes);
  uint8_t version = 0;
  uint32_t n = 0;
  if (!in.U8(version)) return Malformed("empty");
  if (version != kLeaseCodecVersion) return Malformed(absl::StrCat("unknown version ", version));
  if (!in.U32(n)) return Malformed("truncated header");
  // Each lease takes at least its fixed bytes: a count the bytes cannot hold is refused before
  // anything is allocated for it.
  if (n > in.left() / kFixedLeaseBytes) return Malformed("more leases than bytes");
  LeaseSet set;
  set.leases.resize(n);
  for (Lease& l : set.leases) {
    if (absl::Status s = ReadHead(in, l); !s.ok()) return s;
    if (!in.String(l.id) || !in.String(l.request_id) || !in.String(l.holder)) {
      return Malformed("truncated lease");
    }
  }
  if (in.left() != 0) return Malformed("trailing bytes");
  return set;
}

size_t EncodedLeaseEntrySize(const Lease& l) {
  return kFixedLeaseBytes + l.id.size() + l.request_id.size() + l.holder.size();
}

void AppendLeaseEntry(const Lease& lease, std::string* out) {
  const size_t begin = out->size();
  out->resize(begin + EncodedLeaseEntrySize(lease));
  Writer w(out->data() + begin);
  WriteHead(w, lease);
  w.String(lease.id);
  w.String(lease.request_id);
  w.String(lease.holder);
  assert(w.at() == out->data() + out->size());
}

absl::StatusOr<Lease> DecodeLeaseEntry(absl::string_view bytes) {
  Reader in(bytes);
  Lease l;
  if (absl::Status s = ReadHead(in, l); !s.ok()) return s;
  if (!in.String(l.id) || !in.String(l.request_id) || !in.String(l.holder)) {
    return Malformed("truncated lease");
  }
  if (in.left() != 0) return Malformed("trailing bytes");
  return l;
}

}  // namespace ratelimit
