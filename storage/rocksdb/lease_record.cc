#include "storage/rocksdb/lease_record.h"

#include <algorithm>
#include <cassert>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "storage/leases/lease_codec.h"
#include "storage/rocksdb/state_codec.h"

namespace ratelimit {
namespace {

constexpr char kPadded = '\xff';
// The record's expiry, the marker and the set's length.
constexpr size_t kHeaderBytes = 8 + 1 + 4;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed lease set record: ", what));
}

}  // namespace

size_t LeaseRecordNeeds(const LeaseSet& set) { return kHeaderBytes + EncodedLeaseSetSize(set); }

size_t LeaseRecordBytes(size_t needed, size_t current) {
  if (current >= needed && needed >= current / 4) return current;
  if (needed <= kMinLeaseRecordBytes) return kMinLeaseRecordBytes;
  // The power of two below `needed`, and the next multiple of its quarter.
  const size_t below = size_t{1} << (absl::bit_width(needed - 1) - 1);
  const size_t step = below / 4;
  return (needed + step - 1) / step * step;
}

void EncodeLeaseRecord(int64_t expires_at_us, const LeaseSet& set, size_t record_bytes,
                       std::string* out) {
  out->clear();
  out->reserve(record_bytes);
  out->append(EncodeRecordValue(expires_at_us, {}));
  out->push_back(kPadded);
  out->append(4, '\0');  // the set's length, known once it is appended
  AppendLeaseSet(set, out);
  const size_t set_bytes = out->size() - kHeaderBytes;
  for (int i = 0; i < 4; ++i) {
    (*out)[kHeaderBytes - 4 + i] = static_cast<char>((set_bytes >> (8 * i)) & 0xff);
  }
  assert(record_bytes >= out->size());
  out->resize(std::max(record_bytes, out->size()), '\0');
}

std::string EncodeLeaseRecord(int64_t expires_at_us, const LeaseSet& set, size_t record_bytes) {
  std::string out;
  EncodeLeaseRecord(expires_at_us, set, record_bytes, &out);
  return out;
}

absl::StatusOr<std::pair<int64_t, LeaseSet>> DecodeLeaseRecord(absl::string_view value) {
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
