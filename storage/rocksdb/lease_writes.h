#ifndef RATELIMIT_STORAGE_ROCKSDB_LEASE_WRITES_H_
#define RATELIMIT_STORAGE_ROCKSDB_LEASE_WRITES_H_

// The lease records a decision of the RocksDB store writes (lease_record.h): which records a
// release or reset frees, the number a new lease's record takes, and the writes of a run of
// decisions on one key, each record once.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "rocksdb/write_batch.h"
#include "storage/leases/apply_lease.h"
#include "storage/leases/lease.h"
#include "storage/rocksdb/lease_record.h"

namespace ratelimit {

// The records a lease decision writes, encoded before the group's lock is taken. A thread reuses
// one for its decisions (the batch copies what it is given).
class LeaseWrites {
 public:
  void Clear() {
    size_ = 0;
    latest_record_expiry_ = 0;
  }
  // The writes of records are for one key's records (one `prefix`) between two Clears: a record
  // written again (a hot key's run frees a lease's record and numbers the next acquire's lease
  // with it) replaces its earlier write, so the group gets each record once and has nothing to
  // coalesce (write_coalesce.h) for it.
  //
  // The record of `lease` (lease.record is its number); lease.record_bytes becomes its size.
  void Put(absl::string_view prefix, Lease& lease) {
    Write& w = RecordWrite(prefix, lease.record);
    EncodeLeaseEntryRecord(lease, &w.value);
    w.free = false;
    lease.record_bytes = RecordBytesOf(w.value.size());
    latest_record_expiry_ = std::max(latest_record_expiry_, LeaseRecordExpiry(lease.expires_at_us));
  }
  // The latest expiry of the records Put since the last Clear (0: none).
  int64_t latest_record_expiry() const { return latest_record_expiry_; }
  // Record `record` written free, `bytes` long (the size of the one it replaces).
  void Free(absl::string_view prefix, uint32_t record, size_t bytes) {
    Write& w = RecordWrite(prefix, record);
    EncodeFreeLeaseRecord(bytes, &w.value);
    w.free = true;
  }
  // A record this run wrote free and no later decision of the run took, or 0. A new lease
  // numbered with it is written once, over that write (a hot key's run of releases and acquires
  // then writes about one record per pair, not two).
  uint32_t FreeRecordOfRun() const {
    for (size_t i = size_; i-- > 0;) {
      if (writes_[i].free) return writes_[i].record;
    }
    return 0;
  }
  void Delete(absl::string_view key) {
    Write& w = Next();
    w.key.assign(key.data(), key.size());
    w.record = 0;
    w.erase = true;
    w.free = false;
  }
  size_t size() const { return size_; }
  void AddTo(rocksdb::WriteBatch& batch, rocksdb::ColumnFamilyHandle* records) const {
    for (size_t i = 0; i < size_; ++i) {
      const Write& w = writes_[i];
      if (w.erase) {
        batch.Delete(records, w.key).PermitUncheckedError();
      } else {
        batch.Put(records, w.key, w.value).PermitUncheckedError();
      }
    }
  }
  // A thread keeps the buffers of a burst's writes (a hot key's run), not of the largest reset
  // or conversion it made.
  void Trim() {
    constexpr size_t kKept = 64;
    if (writes_.size() > kKept) writes_.resize(kKept);
  }

 private:
  struct Write {
    std::string key;
    std::string value;
    uint32_t record = 0;  // the record number of a Put or Free; 0: a Delete
    bool erase = false;
    bool free = false;  // a Free
  };
  // The write of record `record` under `prefix`: the earlier one of this record, or a new one.
  Write& RecordWrite(absl::string_view prefix, uint32_t record) {
    for (size_t i = 0; i < size_; ++i) {
      if (writes_[i].record == record) return writes_[i];
    }
    Write& w = Next();
    LeaseEntryKey(prefix, record, &w.key);
    w.record = record;
    w.erase = false;
    return w;
  }
  Write& Next() {
    if (size_ == writes_.size()) writes_.emplace_back();
    return writes_[size_++];
  }
  std::vector<Write> writes_;
  size_t size_ = 0;
  int64_t latest_record_expiry_ = 0;
};

// A record a reset frees: its number and the size of its value.
struct FreedRecord {
  uint32_t record = 0;
  size_t bytes = 0;
};

// The records a reset of `op` frees, from the set as read (before the decision takes its leases):
// every lease's. Nothing for any other action (a release's lease is its decision's `released`).
absl::InlinedVector<FreedRecord, 1> RecordsFreedBy(const LeaseOp& op, const LeaseSet* read);

// The writes of decision `d` on a key whose records are under `prefix`, added to `out`: the
// records of the leases it changed (lease.h says which, by action), numbering a new lease's in
// d.next. `freed`: what RecordsFreedBy found before the decision.
void LeaseWritesOf(const LeaseOp& op, LeaseDecision& d, absl::string_view prefix,
                   absl::Span<const FreedRecord> freed, LeaseWrites& out);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_LEASE_WRITES_H_
