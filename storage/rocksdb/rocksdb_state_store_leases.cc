#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: concurrency limits. A key's lease set is a record of the records column
// family (lease_record.h: padded, so that it is rewritten in place), cached decoded
// (lease_set_cache.h), decided with the rate limits' states and written through the group with
// them (see ApplyLease in the header).

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/leases/apply_lease.h"
#include "storage/rocksdb/lease_record.h"
#include "storage/rocksdb/rocksdb_recovery.h"

namespace ratelimit {

absl::StatusOr<LeaseOutcome> RocksDbStateStore::ApplyLease(const LeaseOperation& op,
                                                           const Clock& clock) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  LeaseOutcome outcome;
  absl::StatusOr<Pending> pending = DecideLeaseLocked(op, clock, outcome);
  // The stripes are free again: later decisions on the key read the queued set from the cache
  // while this one waits for the WAL.
  if (!pending.ok()) return pending.status();
  if (absl::Status s = WaitLocked(*pending); !s.ok()) return s;
  return outcome;
}

void RocksDbStateStore::ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock,
                                        LeaseDone done) {
  DecideThenAnswer<LeaseOutcome>(
      [&](LeaseOutcome& outcome) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under db_mu_
        return DecideLeaseLocked(op, clock, outcome);
      },
      std::move(done));
}

std::vector<absl::StatusOr<LeaseOutcome>> RocksDbStateStore::ApplyLeaseBatch(
    absl::Span<const LeaseOperation* const> ops, const Clock& clock) {
  std::vector<absl::StatusOr<LeaseOutcome>> results(ops.size());
  absl::ReaderMutexLock db_lock(&db_mu_);
  absl::Status refused = db_ ? WritesAllowed() : NotOpenLocked();
  if (!refused.ok()) {
    results.assign(ops.size(), refused);
    return results;
  }
  std::vector<Pending> pending(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    LeaseOutcome outcome;
    absl::StatusOr<Pending> queued = DecideLeaseLocked(*ops[i], clock, outcome);
    if (queued.ok()) {
      pending[i] = *queued;
      results[i] = std::move(outcome);
    } else {
      results[i] = queued.status();
    }
  }
  // The first wait writes every decision queued above, in one group.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!results[i].ok()) continue;
    if (absl::Status s = WaitLocked(pending[i]); !s.ok()) results[i] = s;
  }
  return results;
}

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideLeaseLocked(
    const LeaseOperation& op, const Clock& clock, LeaseOutcome& outcome) {
  if (absl::Status s = ValidateLeaseOperation(op); !s.ok()) return s;
  const OperationKeys keys = DistinctKeys(op.limits);
  const RecordSpec record{LeaseRecordKey(op.lease.key), 0};
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys.keys, absl::MakeConstSpan(&record, 1), stripes, encoded);
  const size_t n = keys.keys.size();
  absl::InlinedVector<std::optional<State>, 4> current(n);
  absl::InlinedVector<std::optional<State>, 4> writes(n);

  StripeLocks locked(stripes_, stripes);
  Pending pending;
  pending.epoch = group_.epoch();
  if (absl::Status s = ReadStatesLocked(keys.keys, encoded, pending.epoch, absl::MakeSpan(current),
                                        &pending.ticket);
      !s.ok()) {
    return s;
  }
  // The time is read under the stripes: the decision comes after every one that held them.
  const int64_t now = clock.NowMicros();
  LeaseSetCache::Entry read;
  if (absl::Status s = ReadLeaseSetLocked(record.key, pending.epoch, now, &read, &pending.ticket);
      !s.ok()) {
    return s;
  }
  // The decision takes the leases of the cached set (moved, never copied): under the key's stripe
  // nothing else reads that set, and before the stripe is freed it holds the set after the
  // decision and its entry is put again (or, when the group refused the write below, the entry
  // is of an epoch no decision reads any more).
  LeaseSet taken;
  if (read.set != nullptr) taken = std::move(*read.set);
  outcome = DecideLeaseOperation(op, keys, std::move(taken), current, now, absl::MakeSpan(writes));
  LeaseDecision& d = outcome.lease;
  // The record to write (an empty set too: lease_record.h).
  int64_t expires_at_us = read.expires_at_us;
  size_t record_bytes = read.record_bytes;
  // Reused by this thread's decisions: the batch below copies it before the next one.
  static thread_local std::string value;
  if (d.write) {
    expires_at_us = LeaseRecordExpiresAt(op.lease, d.next, now);
    record_bytes = LeaseRecordBytes(LeaseRecordNeeds(d.next), read.record_bytes);
    EncodeLeaseRecord(expires_at_us, d.next, record_bytes, &value);
  }
  // The set after the decision, for the cache: in the object the decision took its leases from.
  std::shared_ptr<LeaseSet> next;
  if (read.set != nullptr || !d.next.leases.empty()) {
    next = read.set != nullptr ? std::move(read.set) : std::make_shared<LeaseSet>();
    *next = std::move(d.next);
  }
  d.next = LeaseSet();
  absl::StatusOr<uint64_t> ticket =
      QueueLocked(pending.epoch, encoded, writes, [&](rocksdb::WriteBatch& batch) {
        if (d.write) batch.Put(records_, record.key, value).PermitUncheckedError();
      });
  // A thread keeps a buffer of a common record's size, not of the largest set it ever wrote.
  constexpr size_t kKeptBufferBytes = 64 << 10;
  if (value.capacity() > kKeptBufferBytes) std::string().swap(value);
  if (!ticket.ok()) return ticket.status();
  // Nothing written: the same record (expiry, size and ticket as read), its set as read (lease.h:
  // LeaseDecision::next).
  if (d.write || next != nullptr) {
    lease_cache_->Put(record.key,
                      LeaseSetCache::Make(std::move(next), expires_at_us,
                                          d.write ? *ticket : read.ticket, record_bytes),
                      pending.epoch);
  }
  pending.ticket = std::max(pending.ticket, *ticket);
  return pending;
}

absl::Status RocksDbStateStore::ReadLeaseSetLocked(const std::string& record_key, uint64_t epoch,
                                                   int64_t now_us, LeaseSetCache::Entry* read,
                                                   uint64_t* depends_on) {
  if (std::optional<LeaseSetCache::Entry> hit = lease_cache_->Lookup(record_key, epoch)) {
    *depends_on = std::max(*depends_on, hit->ticket);
    *read = *std::move(hit);
    if (read->expires_at_us <= now_us) read->set = nullptr;
    return absl::OkStatus();
  }
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, record_key, &value);
  if (s.IsNotFound()) {
    *read = LeaseSetCache::Make(nullptr, 0, 0);
    lease_cache_->Put(record_key, *read, epoch);
    return absl::OkStatus();
  }
  if (!s.ok()) return FromRocks(s, "get lease set");
  absl::StatusOr<std::pair<int64_t, LeaseSet>> record =
      DecodeLeaseRecord(absl::string_view(value.data(), value.size()));
  if (!record.ok()) return record.status();
  *read = LeaseSetCache::Make(std::make_shared<LeaseSet>(std::move(record->second)), record->first,
                              0, value.size());
  lease_cache_->Put(record_key, *read, epoch);
  if (read->expires_at_us <= now_us) read->set = nullptr;
  return absl::OkStatus();
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
      // Read again under the stripe: a decision may have changed the set since the scan (its set
      // may be queued, in the cache only).
      if (std::optional<LeaseSetCache::Entry> hit = lease_cache_->Lookup(k, pending.epoch)) {
        if (hit->set != nullptr && hit->expires_at_us > now) ++deleted;
        continue;
      }
      rocksdb::PinnableSlice value;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, k, &value);
      if (s.IsNotFound()) continue;
      if (!s.ok()) return FromRocks(s, "get lease set");
      absl::StatusOr<std::pair<int64_t, LeaseSet>> record =
          DecodeLeaseRecord(absl::string_view(value.data(), value.size()));
      if (!record.ok() || (record->first > now && !record->second.leases.empty())) ++deleted;
    }
    absl::StatusOr<uint64_t> ticket = group_.Append(pending.epoch, [&](rocksdb::WriteBatch& batch) {
      for (const std::string& k : keys) batch.Delete(records_, k).PermitUncheckedError();
    });
    if (!ticket.ok()) return ticket.status();
    pending.ticket = *ticket;
    for (const std::string& k : keys) {
      lease_cache_->Put(k, LeaseSetCache::Make(nullptr, 0, *ticket), pending.epoch);
    }
    if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  }
  if (absl::Status s = FromRocks(it->status(), "iterate lease sets"); !s.ok()) return s;
  return deleted;
}

}  // namespace ratelimit
