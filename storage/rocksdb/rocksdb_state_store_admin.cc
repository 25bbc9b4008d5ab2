#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: administration. Secrets, reads and resets of states, and garbage collection
// (compactions on demand).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/key_hash.h"
#include "storage/rocksdb/rocksdb_recovery.h"
#include "storage/rocksdb/state_codec.h"
#include "storage/rocksdb/stripe_locks.h"

namespace ratelimit {
namespace {

constexpr char kSecretPrefix[] = "secret/";

}  // namespace

absl::StatusOr<std::string> RocksDbStateStore::Secret(absl::string_view name,
                                                      absl::FunctionRef<std::string()> generate) {
  absl::MutexLock secret_lock(&secret_mu_);
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  const std::string key = absl::StrCat(kSecretPrefix, name);
  std::string stored;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, key, &stored);
  if (s.ok()) return stored;
  if (!s.IsNotFound()) return FromRocks(s, "read secret");
  if (absl::Status w = WritesAllowed(); !w.ok()) return w;
  stored = generate();
  rocksdb::WriteOptions sync_write;
  sync_write.sync = true;
  s = db_->Put(sync_write, meta_, key, stored);
  if (!s.ok()) return WriteFailed(FromRocks(s, "write secret"));
  // Flushed at once, like the format version: the meta family is rarely written again.
  if (s = db_->Flush(rocksdb::FlushOptions(), meta_); !s.ok()) return FromRocks(s, "flush secret");
  return stored;
}

absl::StatusOr<std::optional<State>> RocksDbStateStore::Get(const StateKey& key) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  const std::string encoded = EncodeStateKey(key.source, key.name, key.key);
  // A state queued for the WAL is waited for, then read from RocksDB like any other: RocksDB is
  // the truth (garbage collection may have dropped a refilled state the cache still holds). A
  // read is not cached: without the key's stripe, a decision could queue a newer state meanwhile.
  const uint64_t epoch = group_.epoch();
  if (std::optional<StateCache::Entry> hit = cache_->Lookup(encoded, epoch)) {
    if (absl::Status s = WaitLocked(Pending{hit->ticket, epoch}); !s.ok()) return s;
  }
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), states_, encoded, &value);
  if (s.IsNotFound()) return std::optional<State>();
  if (!s.ok()) return FromRocks(s, "get");
  std::optional<State> state = DecodeState(absl::string_view(value.data(), value.size()));
  if (!state) return absl::DataLossError("malformed state encoding");
  return state;
}

absl::StatusOr<uint64_t> RocksDbStateStore::Delete(const StateKey& key) {
  const size_t stripe = stripes_.StripeOf(StableKeyHash(key.name, key.key));
  const std::string encoded = EncodeStateKey(key.source, key.name, key.key);
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  Pending pending;
  uint64_t deleted = 0;
  {
    // Through the group like a decision, so that it lands after every decision queued before it
    // and before every later one.
    StripeLocks locked(stripes_, absl::MakeConstSpan(&stripe, 1));
    pending.epoch = group_.epoch();
    // Whether there is a state to delete (a queued one included), for the caller's count.
    std::optional<State> current;
    if (absl::Status s =
            ReadStatesLocked(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&encoded, 1),
                             pending.epoch, absl::MakeSpan(&current, 1), &pending.ticket);
        !s.ok()) {
      return s;
    }
    deleted = current.has_value() ? 1 : 0;
    absl::StatusOr<uint64_t> ticket = group_.Append(pending.epoch, [&](rocksdb::WriteBatch& batch) {
      batch.Delete(states_, encoded).PermitUncheckedError();
    });
    if (!ticket.ok()) return ticket.status();
    pending.ticket = *ticket;
    cache_->Put(encoded, StateCache::Entry{std::nullopt, *ticket}, pending.epoch);
  }
  if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  return deleted;
}

absl::StatusOr<uint64_t> RocksDbStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  // Key by key, in batches, each batch under its keys' stripe locks (in increasing order), so
  // that a concurrent decision on a key lands either before its reset or after it. A decision
  // acknowledged before the call is in RocksDB (every decision waits for the WAL), so the
  // iteration sees its key.
  constexpr size_t kBatch = 256;
  const std::string begin = NameRangeBegin(source, name), end = NameRangeEnd(source, name);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, states_));
  it->Seek(begin);
  uint64_t deleted = 0;
  while (it->Valid()) {
    std::vector<std::string> keys;
    std::vector<size_t> stripes;
    for (; it->Valid() && keys.size() < kBatch; it->Next()) {
      keys.push_back(it->key().ToString());
      stripes.push_back(stripes_.StripeOf(
          StableKeyHash(name, absl::string_view(keys.back()).substr(begin.size()))));
    }
    std::sort(stripes.begin(), stripes.end());
    stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
    Pending pending;
    {
      StripeLocks locked(stripes_, stripes);
      pending.epoch = group_.epoch();
      for (const std::string& k : keys) {
        // A state a queued write already deleted is not counted again.
        std::optional<StateCache::Entry> hit = cache_->Lookup(k, pending.epoch);
        if (!hit || hit->state) ++deleted;
      }
      absl::StatusOr<uint64_t> ticket =
          group_.Append(pending.epoch, [&](rocksdb::WriteBatch& batch) {
            for (const std::string& k : keys) batch.Delete(states_, k).PermitUncheckedError();
          });
      if (!ticket.ok()) return ticket.status();
      pending.ticket = *ticket;
      for (const std::string& k : keys) {
        cache_->Put(k, StateCache::Entry{std::nullopt, *ticket}, pending.epoch);
      }
    }
    if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  }
  if (absl::Status s = FromRocks(it->status(), "iterate"); !s.ok()) return s;
  return deleted;
}

absl::Status RocksDbStateStore::CompactAll() { return FlushAndCompact(/*exclusive=*/true); }

absl::Status RocksDbStateStore::CollectGarbage() {
  return FlushAndCompact(/*exclusive=*/false);  // automatic compactions go on meanwhile
}

absl::Status RocksDbStateStore::FlushAndCompact(bool exclusive) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  // A flush switches the memtable, which writes through the WAL writer: after a failed write
  // that writer must not be used again (see Health), so nothing is flushed until the store has
  // recovered.
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  // The cache forgets refilled states first, so that no read returns one from the cache once the
  // compaction has dropped it from RocksDB (and again below, for any cached meanwhile).
  cache_->DropRefilled(options_.clock->NowMicros());
  // Idle states may sit in the memtable: flush them so that the compaction sees them.
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (absl::Status s = FromRocks(db_->Flush(flush, states_), "flush"); !s.ok()) return s;
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  compact.exclusive_manual_compaction = exclusive;
  if (absl::Status s = FromRocks(db_->CompactRange(compact, states_, nullptr, nullptr), "compact");
      !s.ok()) {
    return s;
  }
  cache_->DropRefilled(options_.clock->NowMicros());
  // Expired lease sets read as absent from the cache too; dropping them only frees memory.
  lease_cache_->DropExpired(options_.clock->NowMicros());
  if (absl::Status s = FromRocks(db_->Flush(flush, records_), "flush records"); !s.ok()) return s;
  return FromRocks(db_->CompactRange(compact, records_, nullptr, nullptr), "compact records");
}

}  // namespace ratelimit
