#ifndef RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_RECOVERY_H_
#define RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_RECOVERY_H_

// How the RocksDB store notices write failures and background errors, and what it checks before
// it reopens the database: the pieces of RocksDbStateStore's failure handling that need none of
// its state. The store's own part (stopping writes, the health probe write, the reopen) is
// defined in rocksdb_recovery.cc too.

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"
#include "rocksdb/listener.h"
#include "rocksdb/status.h"

namespace ratelimit {

// `s` as an absl::Status: OK, DATA_LOSS for a corruption, else UNAVAILABLE; the message names
// `what` ("rocksdb <what>: <RocksDB's message>").
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what);

// Remembers the first write failure or background error until Reset() (after the store has
// reopened the database). RocksDB calls OnBackgroundError from its own threads, possibly holding
// its mutex: it only records.
//
// Ownership: shared by the store and every DB it opens (as a listener).
// Thread safety: thread-safe.
class RocksDbErrorTracker final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* bg_error) override;

  // Records `error` unless an error is recorded already.
  void Set(const absl::Status& error);
  // Forgets the recorded error.
  void Reset();
  // The recorded error; OK when there is none.
  absl::Status Get();

 private:
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// OK when a small file can be written (and, with `sync`, synced) in `dir` through `fs` (the
// file is removed again); else UNAVAILABLE with the reason. A store that stopped writing waits
// for this before it reopens its database; with its WAL mapped, its health probe checks it
// unsynced.
absl::Status DiskWritable(rocksdb::FileSystem& fs, const std::string& dir, bool sync = true);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_RECOVERY_H_
