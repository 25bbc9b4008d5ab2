#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: concurrency limits. A key's lease set is a record of the records column
// family (storage/leases/apply_lease.h), decided with the rate limits' states in UpdateWithRecords
// and written through the group with them.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/key_hash.h"
#include "storage/leases/apply_lease.h"
#include "storage/rocksdb/rocksdb_recovery.h"
#include "storage/rocksdb/state_codec.h"

namespace ratelimit {

absl::StatusOr<LeaseOutcome> RocksDbStateStore::ApplyLease(const LeaseOperation& op,
                                                           const Clock& clock) {
  return ApplyLeaseWithRecords(*this, op, clock);
}

absl::StatusOr<uint64_t> RocksDbStateStore::DeleteAllLeases(LimitSource source,
                                                            absl::string_view name) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  // Set by set, in batches, each batch under its records' stripes (the stripes UpdateWithRecords
  // takes for them) until its deletes are in the WAL: records are read from RocksDB only, so a
  // decision on one of these keys lands either before its delete or after it.
  constexpr size_t kBatch = 256;
  const std::string prefix = LeaseRecordPrefix(source, name);
  // The upper bound: the smallest key above every key starting with the prefix.
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  if (!end.empty()) ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, records_));
  it->Seek(prefix);
  const int64_t now = options_.clock->NowMicros();
  uint64_t deleted = 0;
  while (it->Valid()) {
    std::vector<std::string> keys;
    std::vector<size_t> stripes;
    for (; it->Valid() && keys.size() < kBatch; it->Next()) {
      keys.push_back(it->key().ToString());
      stripes.push_back(stripes_.StripeOf(StableKeyHash("", keys.back())));
    }
    std::sort(stripes.begin(), stripes.end());
    stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
    StripeLocks locked(stripes_, stripes);
    Pending pending;
    pending.epoch = group_.epoch();
    for (const std::string& k : keys) {
      // Read again under the stripe: a decision may have changed the set since the scan.
      rocksdb::PinnableSlice value;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, k, &value);
      if (s.IsNotFound()) continue;
      if (!s.ok()) return FromRocks(s, "get lease set");
      const auto record = DecodeRecordValue(absl::string_view(value.data(), value.size()));
      if (!record || (record->first > now && LeaseRecordHoldsLeases(record->second))) ++deleted;
    }
    absl::StatusOr<uint64_t> ticket = group_.Append(pending.epoch, [&](rocksdb::WriteBatch& batch) {
      for (const std::string& k : keys) batch.Delete(records_, k).PermitUncheckedError();
    });
    if (!ticket.ok()) return ticket.status();
    pending.ticket = *ticket;
    if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  }
  if (absl::Status s = FromRocks(it->status(), "iterate lease sets"); !s.ok()) return s;
  return deleted;
}

}  // namespace ratelimit
