#include "storage/rocksdb/lease_record.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "storage/leases/apply_lease.h"
#include "storage/leases/lease_codec.h"
#include "storage/limit_config.h"
#include "storage/rocksdb/state_codec.h"

namespace ratelimit {
namespace {

constexpr char kEntryTag = 'M';
constexpr char kPadded = '\xff';
// A lease record of earlier versions: [1] [n: u32] [n bytes: AppendLeaseEntry] [zeros].
constexpr char kLeaseTag = '\x01';
constexpr size_t kEntryHeaderBytes = 8 + 1 + 4;  // its expiry, tag and the lease's length
// The compact lease record this version writes (the layout in lease_record.h).
constexpr char kCompactLeaseTag = '\x02';
constexpr uint8_t kReleasedFlag = 1;
constexpr uint8_t kBinaryIdFlag = 2;  // the id is 32 lowercase hex digits, kept as 16 bytes
constexpr size_t kHexIdDigits = 32;
constexpr char kHexDigits[] = "0123456789abcdef";

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed lease record: ", what));
}

void AppendLength(size_t n, std::string* out) {
  out->push_back(static_cast<char>((n >> 8) & 0xff));
  out->push_back(static_cast<char>(n & 0xff));
}

// Reads a u16 big-endian length and that many bytes from the front of `in`.
bool ReadPart(absl::string_view& in, absl::string_view* part) {
  if (in.size() < 2) return false;
  const size_t n = (size_t{static_cast<uint8_t>(in[0])} << 8) | static_cast<uint8_t>(in[1]);
  in.remove_prefix(2);
  if (in.size() < n) return false;
  *part = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

// The head both kinds of lease keys share, `tag` [source: u8] [name length: u16 BE] [name]
// (LeaseRecordPrefix's layout), read from the front of `in`.
bool ReadLimitPart(absl::string_view& in, char tag, LimitSource* source, absl::string_view* name) {
  if (in.size() < 2 || in[0] != tag) return false;
  *source = static_cast<LimitSource>(in[1]);
  if (*source != LimitSource::kDefined && *source != LimitSource::kEnvoy &&
      *source != LimitSource::kInline) {
    return false;
  }
  in.remove_prefix(2);
  return ReadPart(in, name);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool IsServerLeaseId(absl::string_view id) {
  if (id.size() != kHexIdDigits) return false;
  for (char c : id) {
    if (HexValue(c) < 0) return false;
  }
  return true;
}

size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void AppendFixed64(int64_t value, std::string* out) {
  const uint64_t v = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Readers of the compact record's fields from the front of `in`; false when `in` is too short
// or (a varint) longer than 10 bytes.
bool ReadVarint(absl::string_view& in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 70 && !in.empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in[0]);
    in.remove_prefix(1);
    *v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

bool ReadFixed64(absl::string_view& in, int64_t* value) {
  if (in.size() < 8) return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  in.remove_prefix(8);
  *value = static_cast<int64_t>(v);
  return true;
}

bool ReadString(absl::string_view& in, std::string* out) {
  uint64_t n = 0;
  if (!ReadVarint(in, &n) || n > in.size()) return false;
  out->assign(in.data(), static_cast<size_t>(n));
  in.remove_prefix(static_cast<size_t>(n));
  return true;
}

// The compact record's bytes before its padding.
size_t CompactLeaseBytes(const Lease& l) {
  const size_t id =
      IsServerLeaseId(l.id) ? kHexIdDigits / 2 : VarintBytes(l.id.size()) + l.id.size();
  return 8 + 1 + 1 + VarintBytes(static_cast<uint64_t>(l.count)) + 8 + 8 + id +
         VarintBytes(l.request_id.size()) + l.request_id.size() + VarintBytes(l.holder.size()) +
         l.holder.size();
}

// A lease record of an earlier version (kLeaseTag).
absl::StatusOr<Lease> DecodeEarlierLeaseEntryRecord(absl::string_view value) {
  if (value.size() < kEntryHeaderBytes) return Malformed("shorter than its header");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(value[9 + i])} << (8 * i);
  absl::string_view rest = value.substr(kEntryHeaderBytes);
  if (n > rest.size()) return Malformed("a lease longer than its record");
  if (rest.substr(n).find_first_not_of('\0') != absl::string_view::npos) {
    return Malformed("padding that is not zeros");
  }
  return DecodeLeaseEntry(rest.substr(0, n));
}

}  // namespace

std::string LeaseEntryLimitPrefix(LimitSource source, absl::string_view name) {
  std::string out = LeaseRecordPrefix(source, name);  // the same layout under another tag
  out[0] = kEntryTag;
  return out;
}

std::string LeaseEntryPrefix(const StateKey& key) {
  std::string out = LeaseEntryLimitPrefix(key.source, key.name);
  out.reserve(out.size() + 2 + key.key.size() + 4);
  AppendLength(key.key.size(), &out);
  out.append(key.key);
  return out;
}

void LeaseEntryKey(absl::string_view prefix, uint32_t record, std::string* out) {
  out->assign(prefix.data(), prefix.size());
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((record >> shift) & 0xff));
  }
}

std::optional<LeaseEntryKeyParts> ParseLeaseEntryKey(absl::string_view record_key) {
  absl::string_view in = record_key;
  LimitSource source;
  absl::string_view name;
  absl::string_view key;
  if (!ReadLimitPart(in, kEntryTag, &source, &name) || !ReadPart(in, &key) || in.size() != 4) {
    return std::nullopt;
  }
  uint32_t record = 0;
  for (char c : in) record = (record << 8) | static_cast<uint8_t>(c);
  return LeaseEntryKeyParts{StateKey{std::string(name), std::string(key), source}, record};
}

std::optional<StateKey> ParseLeaseRecordKey(absl::string_view record_key) {
  absl::string_view in = record_key;
  LimitSource source;
  absl::string_view name;
  if (!ReadLimitPart(in, 'L', &source, &name)) return std::nullopt;
  return StateKey{std::string(name), std::string(in), source};
}

size_t LeaseEntryRecordBytes(const Lease& lease) {
  return std::max(kMinLeaseRecordBytes, (CompactLeaseBytes(lease) + 63) / 64 * 64);
}

void EncodeLeaseEntryRecord(const Lease& lease, std::string* out) {
  const size_t bytes = LeaseEntryRecordBytes(lease);
  const bool binary_id = IsServerLeaseId(lease.id);
  out->clear();
  out->reserve(bytes);
  AppendFixed64(LeaseRecordExpiry(lease.expires_at_us), out);
  out->push_back(kCompactLeaseTag);
  out->push_back(
      static_cast<char>((lease.released ? kReleasedFlag : 0) | (binary_id ? kBinaryIdFlag : 0)));
  AppendVarint(static_cast<uint64_t>(lease.count), out);
  AppendFixed64(lease.acquired_at_us, out);
  AppendFixed64(lease.expires_at_us, out);
  if (binary_id) {
    for (size_t i = 0; i < kHexIdDigits; i += 2) {
      out->push_back(static_cast<char>(HexValue(lease.id[i]) << 4 | HexValue(lease.id[i + 1])));
    }
  } else {
    AppendVarint(lease.id.size(), out);
    out->append(lease.id);
  }
  AppendVarint(lease.request_id.size(), out);
  out->append(lease.request_id);
  AppendVarint(lease.holder.size(), out);
  out->append(lease.holder);
  out->resize(bytes, '\0');
}

void EncodeFreeLeaseRecord(size_t bytes, std::string* out) {
  out->assign(std::max<size_t>(8, bytes), '\0');
}

absl::StatusOr<Lease> DecodeLeaseEntryRecord(absl::string_view value) {
  if (value.size() < 8 + 1 + 1) return Malformed("shorter than its header");
  if (value[8] == kLeaseTag) return DecodeEarlierLeaseEntryRecord(value);
  if (value[8] != kCompactLeaseTag) return Malformed("not a lease");
  const uint8_t flags = static_cast<uint8_t>(value[9]);
  if ((flags & ~(kReleasedFlag | kBinaryIdFlag)) != 0) return Malformed("unknown flags");
  absl::string_view in = value.substr(10);
  Lease l;
  l.released = (flags & kReleasedFlag) != 0;
  uint64_t count = 0;
  if (!ReadVarint(in, &count) || !ReadFixed64(in, &l.acquired_at_us) ||
      !ReadFixed64(in, &l.expires_at_us)) {
    return Malformed("truncated lease");
  }
  if (count < 1 || count > static_cast<uint64_t>(kMaxSlots)) return Malformed("count out of range");
  l.count = static_cast<int64_t>(count);
  if ((flags & kBinaryIdFlag) != 0) {
    if (in.size() < kHexIdDigits / 2) return Malformed("truncated lease");
    l.id.resize(kHexIdDigits);
    for (size_t i = 0; i < kHexIdDigits / 2; ++i) {
      const uint8_t b = static_cast<uint8_t>(in[i]);
      l.id[2 * i] = kHexDigits[b >> 4];
      l.id[2 * i + 1] = kHexDigits[b & 0xf];
    }
    in.remove_prefix(kHexIdDigits / 2);
  } else if (!ReadString(in, &l.id)) {
    return Malformed("truncated lease");
  }
  if (!ReadString(in, &l.request_id) || !ReadString(in, &l.holder)) {
    return Malformed("truncated lease");
  }
  if (in.find_first_not_of('\0') != absl::string_view::npos) {
    return Malformed("padding that is not zeros");
  }
  return l;
}

absl::StatusOr<std::pair<int64_t, LeaseSet>> DecodeLeaseSetRecord(absl::string_view value) {
  const auto record = DecodeRecordValue(value);
  if (!record) return Malformed("shorter than its expiry");
  absl::string_view payload = record->second;
  if (!payload.empty() && payload[0] == kPadded) {
    if (payload.size() < 5) return Malformed("truncated length");
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(payload[1 + i])} << (8 * i);
    payload.remove_prefix(5);
    if (n > payload.size()) return Malformed("a set longer than the record");
    const absl::string_view padding = payload.substr(n);
    if (padding.find_first_not_of('\0') != absl::string_view::npos) {
      return Malformed("padding that is not zeros");
    }
    payload = payload.substr(0, n);
  }
  absl::StatusOr<LeaseSet> set = DecodeLeaseSet(payload);
  if (!set.ok()) return set.status();
  return std::make_pair(record->first, *std::move(set));
}

}  // namespace ratelimit
