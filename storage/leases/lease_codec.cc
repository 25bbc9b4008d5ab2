#include "storage/leases/lease_codec.h"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "storage/byte_codec.h"

namespace ratelimit {
namespace {

// The fixed part of one lease: flags, three i64 and three string lengths.
constexpr size_t kFixedLeaseBytes = 1 + 3 * 8 + 3 * 4;

// A string of the set's layout: its length as a u32, then its bytes.
void WriteString(ByteWriter& w, absl::string_view s) {
  w.Fixed32(static_cast<uint32_t>(s.size()));
  w.Bytes(s);
}

void WriteId(ByteWriter& w, const LeaseId& id) {
  char digits[LeaseId::kDigits];
  id.WriteDigits(digits);
  WriteString(w, absl::string_view(digits, sizeof(digits)));
}

bool ReadString(ByteReader& in, std::string& s) {
  ByteReader at = in;
  uint32_t n = 0;
  absl::string_view bytes;
  if (!at.Fixed32(n) || !at.Bytes(n, bytes)) return false;
  s.assign(bytes.data(), bytes.size());
  in = at;
  return true;
}

// An id: its digits as a string.
bool ReadId(ByteReader& in, LeaseId& id) {
  ByteReader at = in;
  uint32_t n = 0;
  absl::string_view digits;
  if (!at.Fixed32(n) || !at.Bytes(n, digits)) return false;
  const std::optional<LeaseId> parsed = LeaseId::Parse(digits);
  if (!parsed) return false;
  id = *parsed;
  in = at;
  return true;
}

bool ReadI64(ByteReader& in, int64_t& v) {
  uint64_t u = 0;
  if (!in.Fixed64(u)) return false;
  v = static_cast<int64_t>(u);
  return true;
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed lease set: ", what));
}

// The fields of a lease after its flags and before its id, and its strings after the id.
void WriteHead(ByteWriter& w, const Lease& l) {
  w.U8(l.released ? 1 : 0);
  w.Fixed64(static_cast<uint64_t>(l.count));
  w.Fixed64(static_cast<uint64_t>(l.acquired_at_us));
  w.Fixed64(static_cast<uint64_t>(l.expires_at_us));
}

absl::Status ReadHead(ByteReader& in, Lease& l) {
  uint8_t flags = 0;
  if (!in.U8(flags) || !ReadI64(in, l.count) || !ReadI64(in, l.acquired_at_us) ||
      !ReadI64(in, l.expires_at_us)) {
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
  ByteWriter w(out->data() + begin);
  w.U8(kLeaseCodecVersion);
  w.Fixed32(static_cast<uint32_t>(set.leases.size()));
  for (const Lease& l : set.leases) {
    WriteHead(w, l);
    WriteId(w, l.id);
    WriteString(w, l.request_id);
    WriteString(w, l.holder);
  }
  assert(w.at() == out->data() + out->size());
}

std::string EncodeLeaseSet(const LeaseSet& set) {
  std::string out;
  AppendLeaseSet(set, &out);
  return out;
}

absl::StatusOr<LeaseSet> DecodeLeaseSet(absl::string_view bytes) {
  ByteReader in(bytes);
  uint8_t version = 0;
  uint32_t n = 0;
  if (!in.U8(version)) return Malformed("empty");
  if (version != kLeaseCodecVersion) return Malformed(absl::StrCat("unknown version ", version));
  if (!in.Fixed32(n)) return Malformed("truncated header");
  // Each lease takes at least its fixed bytes: a count the bytes cannot hold is refused before
  // anything is allocated for it.
  if (n > in.left() / kFixedLeaseBytes) return Malformed("more leases than bytes");
  LeaseSet set;
  set.leases.resize(n);
  for (Lease& l : set.leases) {
    if (absl::Status s = ReadHead(in, l); !s.ok()) return s;
    if (!ReadId(in, l.id)) return Malformed("truncated lease or an id not of 32 hex digits");
    if (!ReadString(in, l.request_id) || !ReadString(in, l.holder)) {
      return Malformed("truncated lease");
    }
  }
  if (in.left() != 0) return Malformed("trailing bytes");
  return set;
}

size_t EncodedLeaseEntrySize(const Lease& l) {
  return kFixedLeaseBytes + LeaseId::kDigits + l.request_id.size() + l.holder.size();
}

void AppendLeaseEntry(const Lease& lease, std::string* out) {
  const size_t begin = out->size();
  out->resize(begin + EncodedLeaseEntrySize(lease));
  ByteWriter w(out->data() + begin);
  WriteHead(w, lease);
  WriteId(w, lease.id);
  WriteString(w, lease.request_id);
  WriteString(w, lease.holder);
  assert(w.at() == out->data() + out->size());
}

absl::StatusOr<Lease> DecodeLeaseEntry(absl::string_view bytes) {
  ByteReader in(bytes);
  Lease l;
  if (absl::Status s = ReadHead(in, l); !s.ok()) return s;
  if (!ReadId(in, l.id)) return Malformed("truncated lease or an id not of 32 hex digits");
  if (!ReadString(in, l.request_id) || !ReadString(in, l.holder)) {
    return Malformed("truncated lease");
  }
  if (in.left() != 0) return Malformed("trailing bytes");
  return l;
}

}  // namespace ratelimit
