#include "storage/rocksdb/rocksdb_recovery.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "storage/rocksdb/rocksdb_state_store.h"

namespace ratelimit {
namespace {

constexpr char kHealthProbeKey[] = "health_probe";

}  // namespace

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("rocksdb ", what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(msg);
  return absl::UnavailableError(msg);
}

void RocksDbErrorTracker::OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                                            rocksdb::Status* bg_error) {
  if (bg_error != nullptr && !bg_error->ok()) Set(FromRocks(*bg_error, "background error"));
}

void RocksDbErrorTracker::Set(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = error;
}

void RocksDbErrorTracker::Reset() {
  absl::MutexLock lock(&mu_);
  error_ = absl::OkStatus();
}

absl::Status RocksDbErrorTracker::Get() {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::Status DiskWritable(rocksdb::FileSystem& fs, const std::string& dir, bool sync) {
  const std::string probe = dir + "/DISK_PROBE.tmp";
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = fs.NewWritableFile(probe, rocksdb::FileOptions(), &file, nullptr);
  if (s.ok()) s = file->Append(std::string(4096, '\0'), rocksdb::IOOptions(), nullptr);
  if (s.ok() && sync) s = file->Sync(rocksdb::IOOptions(), nullptr);
  if (file) file->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  fs.DeleteFile(probe, rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  return s.ok() ? absl::OkStatus() : FromRocks(s, "disk probe");
}

// ---- RocksDbStateStore: stopping writes after a failure, probing, reopening ----------------

absl::Status RocksDbStateStore::WritesAllowed() {
  absl::Status error = errors_->Get();
  if (error.ok()) return error;
  return absl::UnavailableError(absl::StrCat(
      "state store is failing, writes are stopped until it recovers: ", error.message()));
}

absl::Status RocksDbStateStore::WriteFailed(const absl::Status& error) {
  errors_->Set(error);
  return absl::UnavailableError(error.message());
}

absl::Status RocksDbStateStore::NotOpenLocked() {
  if (closed_) return absl::UnavailableError("state store is closed");
  return absl::UnavailableError(
      absl::StrCat("state store is failing and not open, reopening it on the next health check: ",
                   errors_->Get().message()));
}

absl::Status RocksDbStateStore::Health() {
  {
    absl::ReaderMutexLock db_lock(&db_mu_);
    if (closed_) return NotOpenLocked();
    if (db_) {
      const absl::Status error = errors_->Get();
      if (error.ok()) return ProbeWriteLocked();
      // Until the disk takes writes again, keep the database open for reads.
      if (absl::Status disk = DiskWritable(*file_system_, options_.path); !disk.ok()) {
        return absl::UnavailableError(absl::StrCat(error.message(), "; ", disk.message()));
      }
    }
  }
  // The disk takes writes again. Not DB::Resume(): it never succeeds after errors RocksDB
  // deems unrecoverable (a failed WAL switch), and RocksDB asserts if a WAL writer that failed
  // is used again. So the database is closed without touching its WAL and reopened; the reopen
  // replays the WAL (every acknowledged write is in it).
  absl::MutexLock lock(&db_mu_);
  if (closed_) return NotOpenLocked();
  if (db_ && errors_->Get().ok()) return absl::OkStatus();  // reopened meanwhile
  const absl::Status error = errors_->Get();
  CloseLocked().IgnoreError();
  if (absl::Status s = OpenDbLocked(/*after_failure=*/true); !s.ok()) {
    CloseLocked().IgnoreError();
    return absl::UnavailableError(
        absl::StrCat(error.message(), "; reopening the state store failed: ", s.message()));
  }
  errors_->Reset();
  return ProbeWriteLocked();
}

absl::Status RocksDbStateStore::ProbeWriteLocked() {
  // With the WAL mapped, decisions write into space reserved earlier and meet a full disk only
  // when that space runs out. So the probe asks the disk itself for a block too: writes stop,
  // and health says so, within a probe of the disk filling, as they do when every write group
  // is a write(2). (Unsynced: allocating the block is what fails on a full disk.)
  if (options_.map_wal) {
    if (absl::Status disk = DiskWritable(*file_system_, options_.path, /*sync=*/false);
        !disk.ok()) {
      return WriteFailed(disk);
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  rocksdb::Status s =
      db_->Put(wo, meta_, kHealthProbeKey, std::to_string(options_.clock->NowMicros()));
  return s.ok() ? absl::OkStatus() : WriteFailed(FromRocks(s, "health probe write"));
}

}  // namespace ratelimit
