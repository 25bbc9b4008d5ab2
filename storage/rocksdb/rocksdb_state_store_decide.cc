#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: the decision path. Read the states under the keys' stripes (from the cache
// of hot states, else RocksDB), decide, queue the writes for the next group write, release the
// stripes, wait for (or hand over) the WAL write. See the class comment.

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/rocksdb/rocksdb_recovery.h"
#include "storage/rocksdb/state_codec.h"
#include "storage/rocksdb/stripe_locks.h"
#include "storage/rocksdb/write_coalesce.h"

namespace ratelimit {
namespace {

// Operations of a batch decided under one set of stripe locks and queued with one Append: large
// enough to spread the locking and the queueing over many decisions, small enough that other
// callers wait for the stripes only briefly.
constexpr size_t kBatchChunk = 32;

}  // namespace

void RocksDbStateStore::StripesAndNames(const StripedMutex& stripes,
                                        absl::Span<const StateKey> keys,
                                        absl::Span<const RecordSpec> records,
                                        absl::InlinedVector<size_t, 4>& out,
                                        absl::InlinedVector<std::string, 4>& encoded) {
  for (const StateKey& k : keys) {
    out.push_back(stripes.StripeOf(StableKeyHash(k.name, k.key)));
    encoded.push_back(EncodeStateKey(k.source, k.name, k.key));
  }
  // A record's stripe serializes two operations naming the same record on different states.
  for (const RecordSpec& r : records) out.push_back(stripes.StripeOf(StableKeyHash("", r.key)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

absl::Status RocksDbStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  // Stripes to lock, in increasing order and each once, so concurrent multi-key updates cannot
  // deadlock.
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys, {}, stripes, encoded);

  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  absl::StatusOr<Pending> pending;
  {
    StripeLocks locked(stripes_, stripes);
    pending = DecideLocked(keys, encoded, decide);
  }
  // The stripes are free again: later decisions on these keys read the queued states from the
  // cache while this one waits for the WAL.
  if (!pending.ok()) return pending.status();
  return WaitLocked(*pending);
}

std::vector<absl::StatusOr<Outcome>> RocksDbStateStore::ApplyBatch(absl::Span<const Operation> ops,
                                                                   const Clock& clock) {
  std::vector<absl::StatusOr<Outcome>> results;
  results.reserve(ops.size());
  absl::ReaderMutexLock db_lock(&db_mu_);
  absl::Status refused = db_ ? WritesAllowed() : NotOpenLocked();
  if (!refused.ok()) {
    results.assign(ops.size(), refused);
    return results;
  }
  // Decide and queue the operations a chunk at a time, each chunk under the stripes of all its
  // keys, then wait: the chunks queued meanwhile usually go to the WAL in one write.
  results.resize(ops.size());
  std::vector<Pending> pending(ops.size());
  for (size_t first = 0; first < ops.size(); first += kBatchChunk) {
    const size_t n = std::min(kBatchChunk, ops.size() - first);
    DecideChunkLocked(ops.subspan(first, n), clock, absl::MakeSpan(results).subspan(first, n),
                      absl::MakeSpan(pending).subspan(first, n));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!results[i].ok()) continue;
    if (absl::Status s = WaitLocked(pending[i]); !s.ok()) results[i] = s;
  }
  return results;
}

void RocksDbStateStore::DecideChunkLocked(absl::Span<const Operation> ops, const Clock& clock,
                                          absl::Span<absl::StatusOr<Outcome>> results,
                                          absl::Span<Pending> pending) {
  struct Planned {
    OperationKeys keys;
    absl::InlinedVector<std::string, 4> encoded;
  };
  std::vector<Planned> planned(ops.size());
  absl::InlinedVector<size_t, 4> stripes;
  for (size_t i = 0; i < ops.size(); ++i) {
    planned[i].keys = DistinctKeys(ops[i].limits);
    absl::InlinedVector<size_t, 4> op_stripes;
    StripesAndNames(stripes_, planned[i].keys.keys, {}, op_stripes, planned[i].encoded);
    stripes.insert(stripes.end(), op_stripes.begin(), op_stripes.end());
  }
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());

  StripeLocks locked(stripes_, stripes);
  const uint64_t epoch = group_.epoch();
  // One time for the chunk, read under its stripes: its operations happen one after the other
  // with no time between them, after every decision that held these stripes before.
  const int64_t now_us = clock.NowMicros();
  // The newest state the chunk decided for each key it wrote: what a later operation of the
  // chunk reads, and what the chunk queues (one write per key, the last).
  absl::flat_hash_map<absl::string_view, State> latest;
  uint64_t depends_on = 0;  // the newest queued group a state read came from
  for (size_t i = 0; i < ops.size(); ++i) {
    const Planned& p = planned[i];
    const size_t n = p.keys.keys.size();
    absl::InlinedVector<std::optional<State>, 4> current(n);
    absl::InlinedVector<std::optional<State>, 4> writes(n);
    for (size_t k = 0; k < n; ++k) {
      if (auto it = latest.find(p.encoded[k]); it != latest.end()) current[k] = it->second;
    }
    if (absl::Status s =
            ReadStatesLocked(p.keys.keys, p.encoded, epoch, absl::MakeSpan(current), &depends_on);
        !s.ok()) {
      results[i] = s;
      continue;
    }
    results[i] = DecideOperation(ops[i], p.keys, current, now_us, absl::MakeSpan(writes));
    for (size_t k = 0; k < n; ++k) {
      if (writes[k]) latest.insert_or_assign(absl::string_view(p.encoded[k]), *writes[k]);
    }
  }
  std::vector<std::string> keys;
  absl::InlinedVector<std::optional<State>, 4> writes;
  keys.reserve(latest.size());
  writes.reserve(latest.size());
  for (const auto& [key, state] : latest) {
    keys.emplace_back(key);
    writes.emplace_back(state);
  }
  absl::StatusOr<uint64_t> ticket = QueueLocked(epoch, keys, writes, [](rocksdb::WriteBatch&) {});
  // Every decision of the chunk waits for the chunk's group (and what it read): a later one may
  // have read an earlier one's state. Nothing queued: none of the chunk's decisions happened.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!results[i].ok()) continue;
    if (ticket.ok()) {
      pending[i] = Pending{std::max(*ticket, depends_on), epoch};
    } else {
      results[i] = ticket.status();
    }
  }
}

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideOperationLocked(
    const Operation& op, const Clock& clock, Outcome& outcome) {
  const OperationKeys keys = DistinctKeys(op.limits);
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys.keys, {}, stripes, encoded);
  auto decide = [&](absl::Span<const std::optional<State>> current,
                    absl::Span<std::optional<State>> writes) -> absl::Status {
    outcome = DecideOperation(op, keys, current, clock.NowMicros(), writes);
    return absl::OkStatus();
  };
  DecideFn decide_fn(decide);
  StripeLocks locked(stripes_, stripes);
  return DecideLocked(keys.keys, encoded, decide_fn);
}

void RocksDbStateStore::ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) {
  DecideThenAnswer<Outcome>(
      [&](Outcome& outcome) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under db_mu_
        return DecideOperationLocked(op, clock, outcome);
      },
      std::move(done));
}

absl::StatusOr<uint64_t> RocksDbStateStore::DecideQueued(
    absl::FunctionRef<absl::StatusOr<Pending>()> decide) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (absl::Status refused = db_ ? WritesAllowed() : NotOpenLocked(); !refused.ok()) {
    return refused;
  }
  absl::StatusOr<Pending> queued = decide();
  if (!queued.ok()) return queued.status();
  return DurableLocked(*queued) ? 0 : queued->ticket;
}

void RocksDbStateStore::AnswerWhenWritten(uint64_t ticket, GroupCommit::Done answer) {
  // The stripes are free. Under a WritesHereScope this thread writes the pending group itself
  // unless a write is in progress; otherwise the writer thread writes this decision with
  // whatever else is queued meanwhile, then answers.
  if (!StateStore::WritesHereScope::Active()) {
    group_.OnResolved(ticket, std::move(answer));
    return;
  }
  GroupCommit::Completions ready;
  {
    absl::ReaderMutexLock db_lock(&db_mu_);
    group_.OnResolvedWriteHere(
        ticket, std::move(answer),
        [this](rocksdb::WriteBatch& batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          // db_mu_ is held (above). Closing fails every queued ticket under db_mu_ held
          // exclusively, so a ticket pending here has a database to be written to.
          return db_ ? WriteGroupLocked(batch) : NotOpenLocked();
        },
        &ready);
  }
  GroupCommit::RunCompletions(ready);  // outside every lock
}

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideLocked(
    absl::Span<const StateKey> keys, absl::Span<const std::string> encoded, DecideFn& decide) {
  const size_t n = keys.size();
  Pending pending;
  pending.epoch = group_.epoch();
  absl::InlinedVector<std::optional<State>, 4> current(n);
  absl::InlinedVector<std::optional<State>, 4> writes(n);
  if (absl::Status s =
          ReadStatesLocked(keys, encoded, pending.epoch, absl::MakeSpan(current), &pending.ticket);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = decide(current, absl::MakeSpan(writes)); !s.ok()) return s;
  absl::StatusOr<uint64_t> ticket =
      QueueLocked(pending.epoch, encoded, writes, [](rocksdb::WriteBatch&) {});
  if (!ticket.ok()) return ticket.status();
  pending.ticket = std::max(pending.ticket, *ticket);
  return pending;
}

absl::StatusOr<uint64_t> RocksDbStateStore::QueueLocked(
    uint64_t epoch, absl::Span<const std::string> encoded,
    absl::Span<const std::optional<State>> writes,
    absl::FunctionRef<void(rocksdb::WriteBatch&)> fill_more) {
  // Encoded outside the group's lock, which every reactor's decisions share.
  absl::InlinedVector<EncodedState, 4> values(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    if (writes[i]) values[i] = EncodeStateBytes(*writes[i]);
  }
  absl::StatusOr<uint64_t> ticket = group_.Append(epoch, [&](rocksdb::WriteBatch& batch) {
    for (size_t i = 0; i < writes.size(); ++i) {
      if (writes[i]) {
        batch.Put(states_, encoded[i], rocksdb::Slice(values[i].data(), values[i].size()))
            .PermitUncheckedError();
      }
    }
    fill_more(batch);
  });
  if (!ticket.ok() || *ticket == 0) return ticket;
  for (size_t i = 0; i < writes.size(); ++i) {
    if (writes[i]) cache_->Put(encoded[i], StateCache::Entry{writes[i], *ticket}, epoch);
  }
  return ticket;
}

bool RocksDbStateStore::DurableLocked(const Pending& pending) {
  return pending.ticket == 0 ||
         (group_.resolved() >= pending.ticket && group_.epoch() == pending.epoch);
}

absl::Status RocksDbStateStore::WaitLocked(const Pending& pending) {
  // Written already, and no write failed since this decision read its states.
  if (DurableLocked(pending)) return absl::OkStatus();
  return group_.Wait(pending.ticket,
                     [this](rocksdb::WriteBatch& batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                       return WriteGroupLocked(batch);  // db_mu_ is held
                     });
}

absl::Status RocksDbStateStore::WriteGroupLocked(rocksdb::WriteBatch& batch) {
  if (options_.before_group_write) options_.before_group_write();
  // Only the last write of a key repeated in the group goes to the WAL (the group is written
  // all or nothing, so the earlier ones are never seen). Each Append writes a key once (a
  // decision, a chunk's last state of each key, a lease run's records), so a group of one is
  // written as it is; it is a saving, not a rule: a key written twice is applied in order.
  if (group_.writing_appends() > 1) {
    if (const size_t dropped = CoalesceRepeatedKeys(handles_, batch); dropped > 0) {
      coalesced_.fetch_add(dropped, std::memory_order_relaxed);
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (s.ok()) return absl::OkStatus();
  // Nothing of the group was applied: the queued states and lease sets in the caches are dropped
  // (the group commit's epoch moves on, so none of them is read again) and writes stop.
  cache_->Clear();
  lease_cache_->Clear();
  return WriteFailed(FromRocks(s, "write"));
}

absl::Status RocksDbStateStore::ReadStatesLocked(absl::Span<const StateKey> keys,
                                                 absl::Span<const std::string> encoded,
                                                 uint64_t epoch,
                                                 absl::Span<std::optional<State>> current,
                                                 uint64_t* depends_on) {
  const size_t n = keys.size();
  rocksdb::PinnableSlice value;
  for (size_t i = 0; i < n; ++i) {
    if (current[i]) continue;  // the caller's own newer state
    if (std::optional<StateCache::Entry> hit = cache_->Lookup(encoded[i], epoch)) {
      current[i] = std::move(hit->state);
      *depends_on = std::max(*depends_on, hit->ticket);
      continue;
    }
    value.Reset();
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), states_, encoded[i], &value);
    if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "get");
    if (s.ok()) {
      current[i] = DecodeState(absl::string_view(value.data(), value.size()));
      if (!current[i]) {
        return absl::DataLossError(
            absl::StrCat("state of ", keys[i].name, " has a malformed encoding"));
      }
    }
    cache_->Put(encoded[i], StateCache::Entry{current[i], 0}, epoch);
  }
  return absl::OkStatus();
}

absl::Status RocksDbStateStore::UpdateWithRecords(absl::Span<const StateKey> keys,
                                                  absl::Span<const RecordSpec> records,
                                                  const Clock& clock, RecordDecideFn decide) {
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys, records, stripes, encoded);

  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  StripeLocks locked(stripes_, stripes);
  return DecideWithRecordsLocked(keys, encoded, records, clock, decide);
}

absl::Status RocksDbStateStore::DecideWithRecordsLocked(absl::Span<const StateKey> keys,
                                                        absl::Span<const std::string> encoded,
                                                        absl::Span<const RecordSpec> records,
                                                        const Clock& clock,
                                                        RecordDecideFn& decide) {
  const size_t n = keys.size();
  Pending pending;
  pending.epoch = group_.epoch();
  absl::InlinedVector<std::optional<State>, 4> current(n);
  absl::InlinedVector<std::optional<State>, 4> writes(n);
  absl::InlinedVector<std::optional<std::string>, 4> found(records.size());
  absl::InlinedVector<std::optional<std::string>, 4> record_writes(records.size());
  if (absl::Status s =
          ReadStatesLocked(keys, encoded, pending.epoch, absl::MakeSpan(current), &pending.ticket);
      !s.ok()) {
    return s;
  }
  rocksdb::PinnableSlice value;
  const int64_t now = clock.NowMicros();
  for (size_t r = 0; r < records.size(); ++r) {
    value.Reset();
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, records[r].key, &value);
    if (s.IsNotFound()) continue;
    if (!s.ok()) return FromRocks(s, "get record");
    const auto record = DecodeRecordValue(absl::string_view(value.data(), value.size()));
    if (!record) return absl::DataLossError("idempotency record has a malformed encoding");
    if (record->first > now) found[r] = std::string(record->second);
  }

  absl::Status status =
      decide(current, found, absl::MakeSpan(writes), absl::MakeSpan(record_writes));
  if (!status.ok()) return status;
  absl::InlinedVector<std::string, 4> record_values(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    if (record_writes[r]) {
      record_values[r] = EncodeRecordValue(records[r].expires_at_us, *record_writes[r]);
    }
  }
  absl::StatusOr<uint64_t> ticket =
      QueueLocked(pending.epoch, encoded, writes, [&](rocksdb::WriteBatch& batch) {
        for (size_t r = 0; r < records.size(); ++r) {
          if (record_writes[r]) {
            batch.Put(records_, records[r].key, record_values[r]).PermitUncheckedError();
          }
        }
      });
  if (!ticket.ok()) return ticket.status();
  pending.ticket = std::max(pending.ticket, *ticket);
  // Records are read from RocksDB only, so the stripes (the records' too) stay held until the
  // write is in the WAL: a retry naming the same record then finds it.
  return WaitLocked(pending);
}

}  // namespace ratelimit
