#ifndef RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_INFO_LOG_H_
#define RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_INFO_LOG_H_

// RocksDB's info log (the LOG file of the data directory), written so that a full disk costs
// lines, never the process.
//
// RocksDB's own info log buffers lines in a file writer that, once one of its writes has failed
// (ENOSPC), must not be written again: the next line asserts (Debian builds RocksDB with its
// assertions) and the server aborts minutes into a full disk. This logger writes each line
// with one append of its own; a line that cannot be written is dropped and counted, the next
// one is tried as if nothing happened, and the first line written after drops says how many
// were lost. The file is kept under `max_bytes`: past it, LOG becomes LOG.old (one generation)
// and a new LOG is started, as it is at each open.

#include <cstdarg>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace ratelimit {

class RocksDbInfoLog final : public rocksdb::Logger {
 public:
  // Opens `dir`/LOG on `fs` (the previous one, if any, becomes LOG.old). When the file cannot
  // be created (a full disk), lines are dropped and counted until it can.
  static std::shared_ptr<RocksDbInfoLog> Open(std::shared_ptr<rocksdb::FileSystem> fs,
                                              const std::string& dir,
                                              uint64_t max_bytes = 16 << 20);

  ~RocksDbInfoLog() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;

  // Lines dropped because they could not be written, since the logger was opened.
  uint64_t dropped() const;

 private:
  RocksDbInfoLog(std::shared_ptr<rocksdb::FileSystem> fs, std::string dir, uint64_t max_bytes);
  // (Re)creates LOG, moving an existing one to LOG.old. False (and no file) when it cannot be
  // created.
  bool StartFileLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One append of `line`: false when it failed (the line is lost).
  bool AppendLocked(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  rocksdb::Status CloseImpl() override;

  const std::shared_ptr<rocksdb::FileSystem> fs_;
  const std::string dir_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::unique_ptr<rocksdb::FSWritableFile> file_ ABSL_GUARDED_BY(mu_);  // null: none open
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unreported_ ABSL_GUARDED_BY(mu_) = 0;  // dropped since the last line written
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_INFO_LOG_H_
