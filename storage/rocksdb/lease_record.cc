#include "storage/rocksdb/lease_record.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "rocksdb/slice_transform.h"
#include "storage/byte_codec.h"
#include "storage/leases/apply_lease.h"
#include "storage/leases/lease_codec.h"
#include "storage/leases/lease_id.h"
#include "storage/limit_config.h"
#include "storage/rocksdb/state_codec.h"

namespace ratelimit {
namespace {

constexpr char kEntryTag = kLeaseEntryTag;
constexpr char kPadded = '\xff';
// A lease record of earlier versions: [1] [n: u32] [n bytes: AppendLeaseEntry] [zeros].
constexpr char kLeaseTag = '\x01';
constexpr size_t kEntryHeaderBytes = 8 + 1 + 4;  // its expiry, tag and the lease's length
// The compact lease record this version writes (the layout in lease_record.h).
constexpr char kCompactLeaseTag = '\x02';
constexpr uint8_t kReleasedFlag = 1;
constexpr uint8_t kBinaryIdFlag = 2;  // the id as its 16 bytes (else as its 32 digits)

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
  const std::optional<LimitSource> read = LimitSourceOfByte(in[1]);
  if (!read) return false;
  *source = *read;
  in.remove_prefix(2);
  return ReadPart(in, name);
}

// A lease record's key (LeaseEntryKey) in its parts, the record number's 4 bytes last.
struct LeaseEntryKeyView {
  LimitSource source = LimitSource::kDefined;
  absl::string_view name;
  absl::string_view key;
  absl::string_view number;
};

// `record_key` split into `*out`; false when it is not a lease record's key.
bool SplitLeaseEntryKey(absl::string_view record_key, LeaseEntryKeyView* out) {
  absl::string_view in = record_key;
  if (!ReadLimitPart(in, kEntryTag, &out->source, &out->name) || !ReadPart(in, &out->key) ||
      in.size() != 4) {
    return false;
  }
  out->number = in;
  return true;
}

// The compact record's bytes before its padding.
size_t CompactLeaseBytes(const Lease& l) {
  return 8 + 1 + 1 + VarintBytes(static_cast<uint64_t>(l.count)) + 8 + 8 + LeaseId::kBytes +
         VarintBytes(l.request_id.size()) + l.request_id.size() + VarintBytes(l.holder.size()) +
         l.holder.size();
}

// A record of `compact` bytes padded to its size class: a multiple of 64, at least
// kMinLeaseRecordBytes.
size_t PaddedLeaseRecordBytes(size_t compact) {
  return std::max(kMinLeaseRecordBytes, (compact + 63) / 64 * 64);
}

// A lease record of an earlier version (kLeaseTag).
absl::StatusOr<Lease> DecodeEarlierLeaseEntryRecord(absl::string_view value) {
  if (value.size() < kEntryHeaderBytes) return Malformed("shorter than its header");
  const uint32_t n = LoadFixed32(value.data() + 9);
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
  LeaseEntryKeyView v;
  if (!SplitLeaseEntryKey(record_key, &v)) return std::nullopt;
  uint32_t record = 0;
  for (char c : v.number) record = (record << 8) | static_cast<uint8_t>(c);
  return LeaseEntryKeyParts{StateKey{std::string(v.name), std::string(v.key), v.source}, record};
}

std::optional<size_t> LeaseEntryPrefixLength(absl::string_view record_key) {
  LeaseEntryKeyView v;
  if (!SplitLeaseEntryKey(record_key, &v)) return std::nullopt;
  return record_key.size() - v.number.size();
}

namespace {

class LeaseEntryPrefixExtractor : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "ratelimit.LeaseEntryPrefix"; }
  // Every key has a prefix: a lease record's is its key's LeaseEntryPrefix, any other key's is
  // the whole key. Keys sharing a prefix are contiguous in the family's order, as RocksDB needs:
  // a LeaseEntryPrefix fixes the name's and the key's lengths, so the keys that start with it are
  // its records alone.
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    const std::optional<size_t> n =
        LeaseEntryPrefixLength(absl::string_view(key.data(), key.size()));
    return n ? rocksdb::Slice(key.data(), *n) : key;
  }
  bool InDomain(const rocksdb::Slice&) const override { return true; }
};

}  // namespace

std::shared_ptr<const rocksdb::SliceTransform> NewLeaseEntryPrefixExtractor() {
  return std::make_shared<LeaseEntryPrefixExtractor>();
}

size_t LeaseEntryRecordBytes(const Lease& lease) {
  return PaddedLeaseRecordBytes(CompactLeaseBytes(lease));
}

void EncodeLeaseEntryRecord(const Lease& lease, std::string* out) {
  const size_t compact = CompactLeaseBytes(lease);
  const size_t bytes = PaddedLeaseRecordBytes(compact);
  // The fields, then zeros to its size class (the padding).
  out->resize(bytes);
  std::memset(out->data() + compact, 0, bytes - compact);
  ByteWriter w(out->data());
  w.Fixed64(static_cast<uint64_t>(LeaseRecordExpiry(lease.expires_at_us)));
  w.U8(static_cast<uint8_t>(kCompactLeaseTag));
  w.U8((lease.released ? kReleasedFlag : 0) | kBinaryIdFlag);
  w.Varint(static_cast<uint64_t>(lease.count));
  w.Fixed64(static_cast<uint64_t>(lease.acquired_at_us));
  w.Fixed64(static_cast<uint64_t>(lease.expires_at_us));
  uint8_t id_bytes[LeaseId::kBytes];
  lease.id.ToBytes(id_bytes);
  w.Bytes(absl::string_view(reinterpret_cast<const char*>(id_bytes), sizeof(id_bytes)));
  w.Varint(lease.request_id.size());
  w.Bytes(lease.request_id);
  w.Varint(lease.holder.size());
  w.Bytes(lease.holder);
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
  ByteReader in(value.substr(10));
  Lease l;
  l.released = (flags & kReleasedFlag) != 0;
  uint64_t count = 0;
  uint64_t acquired = 0;
  uint64_t expires = 0;
  if (!in.Varint(count) || !in.Fixed64(acquired) || !in.Fixed64(expires)) {
    return Malformed("truncated lease");
  }
  if (count < 1 || count > static_cast<uint64_t>(kMaxSlots)) return Malformed("count out of range");
  l.count = static_cast<int64_t>(count);
  l.acquired_at_us = static_cast<int64_t>(acquired);
  l.expires_at_us = static_cast<int64_t>(expires);
  if ((flags & kBinaryIdFlag) != 0) {
    absl::string_view id;
    if (!in.Bytes(LeaseId::kBytes, id)) return Malformed("truncated lease");
    l.id = LeaseId::FromBytes(reinterpret_cast<const uint8_t*>(id.data()));
    if (l.id.empty()) return Malformed("an empty lease id");
  } else {
    std::string digits;
    if (!in.VarintString(digits)) return Malformed("truncated lease");
    const std::optional<LeaseId> id = LeaseId::Parse(digits);
    if (!id) return Malformed("a lease id that is not 32 lowercase hex digits");
    l.id = *id;
  }
  if (!in.VarintString(l.request_id) || !in.VarintString(l.holder)) {
    return Malformed("truncated lease");
  }
  if (in.rest().find_first_not_of('\0') != absl::string_view::npos) {
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
    const uint32_t n = LoadFixed32(payload.data() + 1);
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
