#include "storage/rocksdb/rocksdb_override_store.h"

#include <memory>

#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/overrides/override_codec.h"
#include "storage/rocksdb/rocksdb_recovery.h"

namespace ratelimit {
namespace {

absl::string_view View(const rocksdb::Slice& s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

// The methods below reach into the store's database under its lock (shared: the database stays
// open meanwhile), as its own methods do.

absl::StatusOr<std::optional<Override>> RocksDbOverrideStore::Get(const OverrideTarget& target)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::ReaderMutexLock db_lock(&store_.db_mu_);
  if (!store_.db_) return store_.NotOpenLocked();
  std::string value;
  rocksdb::Status s =
      store_.db_->Get(rocksdb::ReadOptions(), store_.overrides_, EncodeOverrideKey(target), &value);
  if (s.IsNotFound()) return std::optional<Override>();
  if (!s.ok()) return FromRocks(s, "read override");
  std::optional<Override> o = DecodeOverride(value);
  if (!o) return absl::DataLossError("malformed override record");
  return o;
}

absl::StatusOr<uint64_t> RocksDbOverrideStore::Version() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::ReaderMutexLock db_lock(&store_.db_mu_);
  if (!store_.db_) return store_.NotOpenLocked();
  std::string value;
  rocksdb::Status s =
      store_.db_->Get(rocksdb::ReadOptions(), store_.overrides_, kOverrideVersionKey, &value);
  if (s.IsNotFound()) return uint64_t{0};
  if (!s.ok()) return FromRocks(s, "read override version");
  std::optional<uint64_t> v = DecodeU64(value);
  if (!v) return absl::DataLossError("malformed override version");
  return *v;
}

absl::StatusOr<OverrideStore::Snapshot> RocksDbOverrideStore::LoadAll()
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::ReaderMutexLock db_lock(&store_.db_mu_);
  if (!store_.db_) return store_.NotOpenLocked();
  // One RocksDB snapshot: the version and the records agree.
  const rocksdb::Snapshot* snap = store_.db_->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snap;
    ~Release() { db->ReleaseSnapshot(snap); }
  } release{store_.db_.get(), snap};
  rocksdb::ReadOptions read;
  read.snapshot = snap;
  Snapshot out;
  std::string value;
  rocksdb::Status s = store_.db_->Get(read, store_.overrides_, kOverrideVersionKey, &value);
  if (s.ok()) {
    std::optional<uint64_t> v = DecodeU64(value);
    if (!v) return absl::DataLossError("malformed override version");
    out.version = *v;
  } else if (!s.IsNotFound()) {
    return FromRocks(s, "read override version");
  }
  std::unique_ptr<rocksdb::Iterator> it(store_.db_->NewIterator(read, store_.overrides_));
  for (it->Seek(kOverrideKeyPrefix); it->Valid() && it->key().starts_with(kOverrideKeyPrefix);
       it->Next()) {
    std::optional<Override> o = DecodeOverride(View(it->value()));
    if (!o) return absl::DataLossError("malformed override record");
    out.overrides.push_back(*std::move(o));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "read overrides");
  return out;
}

absl::StatusOr<uint64_t> RocksDbOverrideStore::LastSequence() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::unique_ptr<rocksdb::Iterator> it(
      store_.db_->NewIterator(rocksdb::ReadOptions(), store_.overrides_));
  it->SeekForPrev(EncodeAuditKey(~uint64_t{0}));
  if (!it->Valid())
    return it->status().ok() ? absl::StatusOr<uint64_t>(0) : FromRocks(it->status(), "read audit");
  if (!it->key().starts_with(kAuditKeyPrefix)) return uint64_t{0};
  std::optional<OverrideAuditEntry> e = DecodeAuditEntry(View(it->value()));
  if (!e) return absl::DataLossError("malformed override audit entry");
  return e->sequence;
}

absl::StatusOr<OverrideAuditEntry> RocksDbOverrideStore::Modify(
    const OverrideTarget& target, ChangeFn change) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::MutexLock modify_lock(&modify_mu_);
  absl::StatusOr<std::optional<Override>> current = Get(target);
  if (!current.ok()) return current.status();
  absl::StatusOr<Change> made = change(*current);
  if (!made.ok()) return made.status();
  absl::StatusOr<uint64_t> version = Version();
  if (!version.ok()) return version.status();

  absl::ReaderMutexLock db_lock(&store_.db_mu_);
  if (!store_.db_) return store_.NotOpenLocked();
  if (absl::Status w = store_.WritesAllowed(); !w.ok()) return w;
  absl::StatusOr<uint64_t> last = LastSequence();
  if (!last.ok()) return last.status();
  OverrideAuditEntry audit = std::move(made->audit);
  audit.sequence = *last + 1;
  audit.target = made->record.target;
  rocksdb::WriteBatch batch;
  rocksdb::ColumnFamilyHandle* cf = store_.overrides_;
  batch.Put(cf, EncodeOverrideKey(made->record.target), EncodeOverride(made->record));
  batch.Put(cf, EncodeAuditKey(audit.sequence), EncodeAuditEntry(audit));
  if (audit.sequence > kMaxOverrideAuditEntries) {
    batch.Delete(cf, EncodeAuditKey(audit.sequence - kMaxOverrideAuditEntries));
  }
  batch.Put(cf, kOverrideVersionKey, EncodeU64(*version + 1));
  rocksdb::WriteOptions sync_write;
  sync_write.sync = true;
  if (rocksdb::Status s = store_.db_->Write(sync_write, &batch); !s.ok()) {
    return store_.WriteFailed(FromRocks(s, "write override"));
  }
  // Not flushed here: the WAL's bound (max_total_wal_size) flushes a family this rarely written
  // once the WAL files it pins grow past it, and Close flushes it.
  return audit;
}

absl::StatusOr<std::optional<OverrideStore::Changes>> RocksDbOverrideStore::ChangesSince(
    uint64_t version) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::ReaderMutexLock db_lock(&store_.db_mu_);
  if (!store_.db_) return store_.NotOpenLocked();
  // One RocksDB snapshot: the version, the audit entries and the records agree.
  const rocksdb::Snapshot* snap = store_.db_->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snap;
    ~Release() { db->ReleaseSnapshot(snap); }
  } release{store_.db_.get(), snap};
  rocksdb::ReadOptions read;
  read.snapshot = snap;
  std::string value;
  Changes out;
  rocksdb::Status s = store_.db_->Get(read, store_.overrides_, kOverrideVersionKey, &value);
  if (s.ok()) {
    std::optional<uint64_t> v = DecodeU64(value);
    if (!v) return absl::DataLossError("malformed override version");
    out.version = *v;
  } else if (!s.IsNotFound()) {
    return FromRocks(s, "read override version");
  }
  if (version > out.version) return std::optional<Changes>();
  if (version == out.version) return std::optional<Changes>(std::move(out));
  // The entries version + 1 .. out.version, each target at its latest change.
  std::vector<OverrideAuditEntry> entries;
  uint64_t expected = version + 1;
  std::unique_ptr<rocksdb::Iterator> it(store_.db_->NewIterator(read, store_.overrides_));
  for (it->Seek(EncodeAuditKey(expected)); it->Valid() && it->key().starts_with(kAuditKeyPrefix);
       it->Next()) {
    std::optional<OverrideAuditEntry> e = DecodeAuditEntry(View(it->value()));
    if (!e) return absl::DataLossError("malformed override audit entry");
    if (e->sequence != expected || !e->target) return std::optional<Changes>();  // trimmed
    entries.push_back(*std::move(e));
    ++expected;
  }
  if (!it->status().ok()) return FromRocks(it->status(), "read audit");
  if (expected != out.version + 1) return std::optional<Changes>();
  out.changed = LatestPerTarget(std::move(entries));
  for (ChangedTarget& c : out.changed) {
    s = store_.db_->Get(read, store_.overrides_, EncodeOverrideKey(c.target), &value);
    if (s.IsNotFound()) continue;
    if (!s.ok()) return FromRocks(s, "read override");
    c.record = DecodeOverride(value);
    if (!c.record) return absl::DataLossError("malformed override record");
  }
  return std::optional<Changes>(std::move(out));
}

absl::StatusOr<std::vector<OverrideAuditEntry>> RocksDbOverrideStore::ListAudit(
    uint64_t before, absl::string_view name, size_t limit) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::ReaderMutexLock db_lock(&store_.db_mu_);
  if (!store_.db_) return store_.NotOpenLocked();
  std::vector<OverrideAuditEntry> out;
  std::unique_ptr<rocksdb::Iterator> it(
      store_.db_->NewIterator(rocksdb::ReadOptions(), store_.overrides_));
  it->SeekForPrev(EncodeAuditKey(before == 0 ? ~uint64_t{0} : before - 1));
  for (; it->Valid() && it->key().starts_with(kAuditKeyPrefix) && out.size() < limit; it->Prev()) {
    std::optional<OverrideAuditEntry> e = DecodeAuditEntry(View(it->value()));
    if (!e) return absl::DataLossError("malformed override audit entry");
    const Override* any = e->after ? &*e->after : e->before ? &*e->before : nullptr;
    if (!name.empty() && (any == nullptr || any->target.name != name)) continue;
    out.push_back(*std::move(e));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "read audit");
  return out;
}

}  // namespace ratelimit
