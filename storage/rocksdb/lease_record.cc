#include "storage/rocksdb/lease_record.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/leases/apply_lease.h"
#include "storage/leases/lease_codec.h"
#include "storage/rocksdb/state_codec.h"

namespace ratelimit {
namespace {

constexpr char kEntryTag = 'M';
constexpr char kPadded = '\xff';
constexpr char kLeaseTag = '\x01';
// A lease record's expiry, tag and the lease's length.
constexpr size_t kEntryHeaderBytes = 8 + 1 + 4;

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
  const size_t needed = kEntryHeaderBytes + EncodedLeaseEntrySize(lease);
  return std::max(kMinLeaseRecordBytes, (needed + 63) / 64 * 64);
}

void EncodeLeaseEntryRecord(const Lease& lease, std::string* out) {
  const int64_t expires = LeaseRecordExpiry(lease.expires_at_us);
  const size_t bytes = LeaseEntryRecordBytes(lease);
  out->clear();
  out->reserve(bytes);
  const uint64_t v = static_cast<uint64_t>(expires);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  out->push_back(kLeaseTag);
  const uint32_t n = static_cast<uint32_t>(EncodedLeaseEntrySize(lease));
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  AppendLeaseEntry(lease, out);
  out->resize(bytes, '\0');
}

void EncodeFreeLeaseRecord(size_t bytes, std::string* out) {
  out->assign(std::max<size_t>(8, bytes), '\0');
}

absl::StatusOr<Lease> DecodeLeaseEntryRecord(absl::string_view value) {
  if (value.size() < kEntryHeaderBytes) return Malformed("shorter than its header");
  if (value[8] != kLeaseTag) return Malformed("not a lease");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(value[9 + i])} << (8 * i);
  absl::string_view rest = value.substr(kEntryHeaderBytes);
  if (n > rest.size()) return Malformed("a lease longer than its record");
  if (rest.substr(n).find_first_not_of('\0') != absl::string_view::npos) {
    return Malformed("padding that is not zeros");
  }
  return DecodeLeaseEntry(rest.substr(0, n));
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
