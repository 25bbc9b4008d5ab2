#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: concurrency limits. A key's leases are records of the records column
// family, one per lease (lease_record.h), so a decision writes the one lease it changes; the
// key's set is cached decoded (lease_set_cache.h), decided with the rate limits' states and
// written through the group with them (see ApplyLease in the header).

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/leases/apply_lease.h"
#include "storage/rocksdb/lease_record.h"
#include "storage/rocksdb/lease_writes.h"
#include "storage/rocksdb/rocksdb_recovery.h"
#include "storage/rocksdb/spare_lease_sets.h"
#include "storage/rocksdb/state_codec.h"

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
  // The calls of a burst are concurrent (none is answered before all are decided), so any order
  // of them is one they could have had: every operation but an acquire is decided first, then the
  // acquires, each in the order given. An acquire then finds the slots the burst's releases
  // freed, and on a hot key takes the records they freed (one record written for the two).
  absl::InlinedVector<size_t, 64> order;
  order.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]->lease.action != LeaseAction::kAcquire) order.push_back(i);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]->lease.action == LeaseAction::kAcquire) order.push_back(i);
  }
  std::vector<Pending> pending(ops.size());
  for (size_t at = 0; at < order.size();) {
    // Valid operations on one key without rate limits that follow one another in that order (a
    // hot key's burst, or one alone) are decided as a run, under one hold of the key's stripe; an
    // operation with rate limits (or an invalid one) alone.
    const LeaseOperation& first = *ops[order[at]];
    size_t run = 0;
    while (at + run < order.size() && ops[order[at + run]]->limits.empty() &&
           ops[order[at + run]]->lease.key == first.lease.key &&
           ValidateLeaseOperation(*ops[order[at + run]]).ok()) {
      ++run;
    }
    if (run > 0) {
      const absl::Span<const size_t> which = absl::MakeConstSpan(order).subspan(at, run);
      absl::StatusOr<Pending> queued =
          DecideLeaseRunLocked(ops, which, clock, absl::MakeSpan(results));
      for (const size_t k : which) {
        if (queued.ok()) {
          pending[k] = *queued;
        } else {
          results[k] = queued.status();
        }
      }
      at += run;
      continue;
    }
    const size_t i = order[at];
    LeaseOutcome outcome;
    absl::StatusOr<Pending> queued = DecideLeaseLocked(first, clock, outcome);
    if (queued.ok()) {
      pending[i] = *queued;
      results[i] = std::move(outcome);
    } else {
      results[i] = queued.status();
    }
    ++at;
  }
  // The first wait writes every decision queued above, in one group.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!results[i].ok()) continue;
    if (absl::Status s = WaitLocked(pending[i]); !s.ok()) results[i] = s;
  }
  return results;
}

namespace {

// The smallest key above every key starting with `prefix` ("" when there is none).
std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

// A thread's spare set objects (spare_lease_sets.h): decisions run on the calling thread.
thread_local SpareLeaseSets spare_sets;

// What the decisions on the set of `read` start from: its entry's book when the set is the cached
// one (`had_set`), else that of an empty set (a spare object: nothing held, nothing to expire).
LeaseSetBook BookOf(const LeaseSetCache::Entry& read, bool had_set) {
  if (had_set) return read.book;
  LeaseSetBook empty;
  empty.summary.known = true;
  empty.summary.held = 0;
  empty.summary.expires_from_us = INT64_MAX;
  empty.strings_known = true;
  return empty;
}

// Decides `op` on `set` into `outcome` with the summary `book` carries, and keeps `book` true of
// the set the decision leaves (its `next`), whether or not the decision read every lease.
void DecideOnBook(const LeaseOperation& op, const OperationKeys& keys, LeaseSet set,
                  absl::Span<const std::optional<State>> current, int64_t now_us,
                  absl::Span<std::optional<State>> writes, LeaseSetBook& book,
                  LeaseOutcome& outcome) {
  DecideLeaseOperation(op, keys, std::move(set), current, now_us, writes, book.summary, outcome);
  AccountLeaseDecision(op.lease, outcome.lease, book);
}

}  // namespace

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideLeaseLocked(
    const LeaseOperation& op, const Clock& clock, LeaseOutcome& outcome) {
  if (absl::Status s = ValidateLeaseOperation(op); !s.ok()) return s;
  if (op.limits.empty()) {  // a run of one
    const LeaseOperation* const one = &op;
    const size_t first = 0;
    absl::StatusOr<LeaseOutcome> decided;
    absl::StatusOr<Pending> pending =
        DecideLeaseRunLocked(absl::MakeConstSpan(&one, 1), absl::MakeConstSpan(&first, 1), clock,
                             absl::MakeSpan(&decided, 1));
    if (pending.ok()) outcome = *std::move(decided);
    return pending;
  }
  const OperationKeys keys = DistinctKeys(op.limits);
  // The cache's key for the set, and the stripe it is decided under: the key of its set record
  // in earlier versions.
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
  if (absl::Status s =
          ReadLeaseSetLocked(op.lease.key, record.key, pending.epoch, now, &read, &pending.ticket);
      !s.ok()) {
    return s;
  }
  const absl::InlinedVector<FreedRecord, 1> freed = RecordsFreedBy(op.lease, read.set.get());
  // The decision takes the leases of the cached set (moved, never copied): under the key's stripe
  // nothing else reads that set, and before the stripe is freed it holds the set after the
  // decision and its entry is put again (or, when the group refused the write below, the entry
  // is of an epoch no decision reads any more).
  const bool had_set = read.set != nullptr;
  if (!had_set) read.set = spare_sets.Take();
  LeaseSetBook book = BookOf(read, had_set);
  LeaseSet taken = std::move(*read.set);
  DecideOnBook(op, keys, std::move(taken), current, now, absl::MakeSpan(writes), book, outcome);
  LeaseDecision& d = outcome.lease;
  d.seq = NextLeaseDecisionSeq();  // under the key's stripe
  // The records to write: the leases the decision changed. Reused by this thread's decisions:
  // the batch copies them before the next one.
  static thread_local LeaseWrites lease_writes;
  lease_writes.Clear();
  LeaseWritesOf(op.lease, d, d.write ? LeaseEntryPrefix(op.lease.key) : std::string(), freed,
                lease_writes);
  LeaseSet next = std::move(d.next);
  d.next = LeaseSet();
  absl::StatusOr<uint64_t> ticket =
      QueueLeaseSetLocked(record.key, pending.epoch, read, had_set, std::move(next), book, d.write,
                          encoded, writes, lease_writes);
  if (!ticket.ok()) return ticket.status();
  pending.ticket = std::max(pending.ticket, *ticket);
  return pending;
}

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideLeaseRunLocked(
    absl::Span<const LeaseOperation* const> ops, absl::Span<const size_t> run, const Clock& clock,
    absl::Span<absl::StatusOr<LeaseOutcome>> outcomes) {
  const StateKey& key = ops[run[0]]->lease.key;
  const RecordSpec record{LeaseRecordKey(key), 0};
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, {}, absl::MakeConstSpan(&record, 1), stripes, encoded);

  StripeLocks locked(stripes_, stripes);
  Pending pending;
  pending.epoch = group_.epoch();
  const int64_t now = clock.NowMicros();
  LeaseSetCache::Entry read;
  if (absl::Status s =
          ReadLeaseSetLocked(key, record.key, pending.epoch, now, &read, &pending.ticket);
      !s.ok()) {
    return s;
  }
  // Each decision takes the set the one before left (the cached object's leases, moved).
  const bool had_set = read.set != nullptr;
  if (!had_set) read.set = spare_sets.Take();
  // Carried from each decision to the next, and from the run before through the cache: a decision
  // reads the set only when one of its leases may have expired (lease.h).
  LeaseSetBook book = BookOf(read, had_set);
  LeaseSet set = std::move(*read.set);
  static thread_local LeaseWrites lease_writes;
  lease_writes.Clear();
  std::string prefix;
  bool wrote = false;
  const OperationKeys no_rates;
  // Numbered under the key's stripe, in the order decided.
  uint64_t seq = NextLeaseDecisionSeq(run.size());
  for (const size_t k : run) {
    const absl::InlinedVector<FreedRecord, 1> freed = RecordsFreedBy(ops[k]->lease, &set);
    // Decided in its place among the outcomes (an outcome is large: not moved).
    DecideOnBook(*ops[k], no_rates, std::move(set), {}, now, {}, book, outcomes[k].emplace());
    LeaseDecision& d = outcomes[k]->lease;
    d.seq = seq++;
    if (d.write && prefix.empty()) prefix = LeaseEntryPrefix(key);
    LeaseWritesOf(ops[k]->lease, d, prefix, freed, lease_writes);
    wrote = wrote || d.write;
    set = std::move(d.next);
    d.next = LeaseSet();
  }
  absl::StatusOr<uint64_t> ticket = QueueLeaseSetLocked(
      record.key, pending.epoch, read, had_set, std::move(set), book, wrote, {}, {}, lease_writes);
  if (!ticket.ok()) return ticket.status();
  pending.ticket = std::max(pending.ticket, *ticket);
  return pending;
}

absl::StatusOr<uint64_t> RocksDbStateStore::QueueLeaseSetLocked(
    const std::string& record_key, uint64_t epoch, LeaseSetCache::Entry& read, bool had_set,
    LeaseSet next, const LeaseSetBook& book, bool wrote, absl::Span<const std::string> encoded,
    absl::Span<const std::optional<State>> states, LeaseWrites& lease_writes) {
  // When every record of the key has expired, at the latest: those read, and those written now
  // (a bound, not a pass over the leases: an extend that shortened a lease, or a release, leaves
  // it later than it needs to be, and the algebra drops expired leases itself).
  const int64_t expires_at_us =
      wrote ? std::max(had_set ? read.expires_at_us : 0, lease_writes.latest_record_expiry())
            : read.expires_at_us;
  // The set after the decisions, for the cache: in the object the first took its leases from.
  std::shared_ptr<LeaseSet> cached = std::move(read.set);
  *cached = std::move(next);
  absl::StatusOr<uint64_t> ticket =
      QueueLocked(epoch, encoded, states, [&](rocksdb::WriteBatch& batch) {
        lease_writes.AddTo(batch, records_);
        lease_record_writes_.fetch_add(lease_writes.size(), std::memory_order_relaxed);
        lease_writes.Trim();
      });
  if (ticket.ok() && (wrote || had_set || !cached->leases.empty())) {
    // Nothing written: the same records (expiry and ticket as read), its set as read (lease.h:
    // LeaseDecision::next). A set of no leases is not kept (Make).
    lease_cache_->Put(
        record_key, LeaseSetCache::Make(cached, expires_at_us, wrote ? *ticket : read.ticket, book),
        epoch);
  }
  spare_sets.GiveBack(std::move(cached));
  return ticket;
}

absl::Status RocksDbStateStore::ReadLeaseSetLocked(const StateKey& key,
                                                   const std::string& record_key, uint64_t epoch,
                                                   int64_t now_us, LeaseSetCache::Entry* read,
                                                   uint64_t* depends_on, bool cache_it) {
  if (std::optional<LeaseSetCache::Entry> hit = lease_cache_->Lookup(record_key, epoch)) {
    *depends_on = std::max(*depends_on, hit->ticket);
    *read = *std::move(hit);
    if (read->expires_at_us <= now_us) read->set = nullptr;
    return absl::OkStatus();
  }
  auto set = std::make_shared<LeaseSet>();
  int64_t expires_at_us = 0;
  // The key's lease records. Under the key's stripe no decision writes them: the group has
  // written every one queued (a queued set stays in the cache until its ticket resolves).
  const std::string prefix = LeaseEntryPrefix(key);
  const std::string end = PrefixEnd(prefix);
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  if (!end.empty()) ro.iterate_upper_bound = &upper;
  // One key's records: their prefix under the family's extractor (lease_record.h) is `prefix`,
  // which the extractor maps to itself (it is no record's key).
  ro.prefix_same_as_start = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, records_));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    const absl::string_view k(it->key().data(), it->key().size());
    const absl::string_view bytes(it->value().data(), it->value().size());
    const auto expiry = DecodeRecordValue(bytes);
    if (expiry && expiry->first <= now_us) continue;  // free, or expired: reads as absent
    std::optional<LeaseEntryKeyParts> parts = ParseLeaseEntryKey(k);
    if (!parts || parts->record == 0) {
      return absl::DataLossError("malformed lease record: an unknown key under a lease prefix");
    }
    absl::StatusOr<Lease> lease = DecodeLeaseEntryRecord(bytes);
    if (!lease.ok()) return lease.status();
    lease->record = parts->record;
    lease->record_bytes = RecordBytesOf(bytes.size());
    expires_at_us = std::max(expires_at_us, expiry->first);
    set->leases.push_back(*std::move(lease));
  }
  if (absl::Status st = FromRocks(it->status(), "read lease records"); !st.ok()) return st;
  *read = LeaseSetCache::Make(set->leases.empty() ? nullptr : std::move(set), expires_at_us, 0);
  if (cache_it) lease_cache_->Put(record_key, *read, epoch);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RocksDbStateStore::DeleteAllLeases(LimitSource source,
                                                            absl::string_view name,
                                                            int64_t now_us) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  // Key by key, in batches, each batch under its keys' stripes (the stripes a decision on the
  // key takes) until its deletes are in the WAL: a decision on one of these keys lands either
  // before its delete or after it. The keys are found by scanning the limit's lease records;
  // under the stripe, the key's set (the cache's, or read again) names the leases to delete
  // beside those the scan found.
  constexpr size_t kBatch = 256;
  const int64_t now = now_us;
  uint64_t deleted = 0;
  const std::string prefix = LeaseEntryLimitPrefix(source, name);
  const std::string end = PrefixEnd(prefix);
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  if (!end.empty()) ro.iterate_upper_bound = &upper;
  ro.total_order_seek = true;  // across the limit's keys, whose records have prefixes each
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, records_));
  it->Seek(prefix);
  while (it->Valid()) {
    // The batch's keys, each with the record keys the scan found for it.
    std::vector<std::pair<StateKey, std::vector<std::string>>> keys;
    for (; it->Valid() && keys.size() < kBatch; it->Next()) {
      const absl::string_view k(it->key().data(), it->key().size());
      std::optional<LeaseEntryKeyParts> parts = ParseLeaseEntryKey(k);
      if (!parts) continue;
      if (keys.empty() || !(keys.back().first == parts->key)) {
        keys.push_back({std::move(parts->key), {}});
      }
      keys.back().second.emplace_back(k);
    }
    absl::StatusOr<uint64_t> ended = DeleteLeaseKeysLocked(keys, now);
    if (!ended.ok()) return ended.status();
    deleted += *ended;
  }
  if (absl::Status s = FromRocks(it->status(), "iterate lease records"); !s.ok()) return s;
  return deleted;
}

absl::StatusOr<StateStore::LeakedLeaseKeys> RocksDbStateStore::FindLeakedLeaseKeys(
    absl::string_view cursor, int64_t now_us) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  const std::string prefix(1, kLeaseEntryTag);
  const std::string end = PrefixEnd(prefix);
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  ro.total_order_seek = true;  // across keys, whose records have prefixes each
  ro.fill_cache = false;       // a pass over every lease must not evict what decisions read
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, records_));
  it->Seek(cursor.empty() ? rocksdb::Slice(prefix) : rocksdb::Slice(cursor.data(), cursor.size()));
  // The page's keys, from the records' keys only.
  std::vector<StateKey> keys;
  LeakedLeaseKeys page;
  for (size_t read = 0; it->Valid(); it->Next(), ++read) {
    const absl::string_view k(it->key().data(), it->key().size());
    if (read == kLeakPageRecords) {
      page.next = std::string(k);
      break;
    }
    std::optional<LeaseEntryKeyParts> parts = ParseLeaseEntryKey(k);
    if (!parts) continue;
    if (keys.empty() || !(keys.back() == parts->key)) keys.push_back(std::move(parts->key));
  }
  if (absl::Status s = FromRocks(it->status(), "iterate lease records"); !s.ok()) return s;
  it.reset();
  for (StateKey& key : keys) {
    absl::StatusOr<bool> leak = HoldsLeakLocked(key, now_us);
    // A set that does not read is named: the decision on its key reports it.
    if (!leak.ok() || *leak) page.keys.push_back(std::move(key));
  }
  return page;
}

absl::StatusOr<bool> RocksDbStateStore::HoldsLeakLocked(const StateKey& key, int64_t now_us) {
  const std::string record_key = LeaseRecordKey(key);
  const size_t stripe = stripes_.StripeOf(StableKeyHash("", record_key));
  StripeLocks locked(stripes_, absl::MakeConstSpan(&stripe, 1));
  LeaseSetCache::Entry read;
  uint64_t depends_on = 0;
  if (absl::Status s = ReadLeaseSetLocked(key, record_key, group_.epoch(), now_us, &read,
                                          &depends_on, /*cache_it=*/false);
      !s.ok()) {
    return s;
  }
  return read.set != nullptr && LeaseSetHoldsKeptLeak(*read.set, now_us);
}

absl::StatusOr<uint64_t> RocksDbStateStore::DeleteLeaseKeysLocked(
    const std::vector<std::pair<StateKey, std::vector<std::string>>>& keys, int64_t now_us) {
  std::vector<std::string> set_keys;
  std::vector<size_t> stripes;
  for (const auto& [key, found] : keys) {
    set_keys.push_back(LeaseRecordKey(key));
    stripes.push_back(stripes_.StripeOf(StableKeyHash("", set_keys.back())));
  }
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
  StripeLocks locked(stripes_, stripes);
  Pending pending;
  pending.epoch = group_.epoch();
  uint64_t ended = 0;
  LeaseWrites deletes;
  for (size_t i = 0; i < keys.size(); ++i) {
    // Read again under the stripe: a decision may have changed the set since the scan (its
    // leases may be queued, in the cache only).
    LeaseSetCache::Entry read;
    uint64_t depends_on = 0;
    if (absl::Status s = ReadLeaseSetLocked(keys[i].first, set_keys[i], pending.epoch, now_us,
                                            &read, &depends_on);
        !s.ok()) {
      return s;
    }
    if (read.set != nullptr &&
        std::any_of(read.set->leases.begin(), read.set->leases.end(),
                    [now_us](const Lease& l) { return !l.released && l.expires_at_us > now_us; })) {
      ++ended;
    }
    const std::string prefix = LeaseEntryPrefix(keys[i].first);
    for (const std::string& k : keys[i].second) deletes.Delete(k);
    if (read.set != nullptr) {
      std::string k;
      for (const Lease& l : read.set->leases) {
        if (l.record == 0) continue;
        LeaseEntryKey(prefix, l.record, &k);
        deletes.Delete(k);
      }
    }
  }
  absl::StatusOr<uint64_t> ticket = group_.Append(
      pending.epoch, [&](rocksdb::WriteBatch& batch) { deletes.AddTo(batch, records_); });
  if (!ticket.ok()) return ticket.status();
  pending.ticket = *ticket;
  for (const std::string& k : set_keys) {
    lease_cache_->Put(k, LeaseSetCache::Make(nullptr, 0, *ticket), pending.epoch);
  }
  if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  return ended;
}

absl::Status RocksDbStateStore::MigrateLeaseSetsLocked() {
  const std::string prefix(1, 'L');
  const std::string end = PrefixEnd(prefix);
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  ro.total_order_seek = true;  // every set record: a prefix each
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, records_));
  rocksdb::WriteOptions sync_write;
  sync_write.sync = true;
  constexpr size_t kBatch = 256;
  it->Seek(prefix);
  while (it->Valid()) {
    rocksdb::WriteBatch batch;
    std::string key;
    std::string value;
    for (size_t n = 0; it->Valid() && n < kBatch; it->Next(), ++n) {
      const absl::string_view k(it->key().data(), it->key().size());
      std::optional<StateKey> set_key = ParseLeaseRecordKey(k);
      absl::StatusOr<std::pair<int64_t, LeaseSet>> set =
          DecodeLeaseSetRecord(absl::string_view(it->value().data(), it->value().size()));
      if (!set_key || !set.ok()) {
        return absl::DataLossError(absl::StrCat(
            "lease set record \"", absl::CEscape(k), "\" of an earlier version does not decode",
            set.ok() ? "" : absl::StrCat(": ", set.status().message()),
            "; nothing was changed for it"));
      }
      const std::string entry_prefix = LeaseEntryPrefix(*set_key);
      uint32_t record = 0;
      for (Lease& l : set->second.leases) {
        l.record = ++record;
        LeaseEntryKey(entry_prefix, l.record, &key);
        EncodeLeaseEntryRecord(l, &value);
        batch.Put(records_, key, value).PermitUncheckedError();
      }
      batch.Delete(records_, it->key()).PermitUncheckedError();
    }
    if (absl::Status s = FromRocks(db_->Write(sync_write, &batch), "move lease sets"); !s.ok()) {
      return s;
    }
  }
  return FromRocks(it->status(), "iterate lease sets");
}

}  // namespace ratelimit
