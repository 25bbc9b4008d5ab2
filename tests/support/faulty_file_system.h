#ifndef RATELIMIT_TESTS_SUPPORT_FAULTY_FILE_SYSTEM_H_
#define RATELIMIT_TESTS_SUPPORT_FAULTY_FILE_SYSTEM_H_

// A RocksDB file system over the real one that can be told the disk is full: while it is, every
// file creation, append and sync fails with IOStatus::NoSpace (as ENOSPC would).

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rocksdb/file_system.h"

namespace ratelimit::testing {

class FaultyFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FaultyFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  static const char* kClassName() { return "FaultyFileSystem"; }
  const char* Name() const override { return kClassName(); }

  void SetFull(bool full) { full_.store(full); }
  bool full() const { return full_.load(); }
  // Writes refused so far because the disk was full: all of them, and those to a WAL file
  // (`*.log`).
  int64_t refused_writes() const { return refused_.load(); }
  int64_t refused_wal_writes() const { return refused_wal_.load(); }
  // Those to the database's files (every file but RocksDB's info log, `LOG*`: WALs, SST,
  // MANIFEST) made on thread `thread`. While the disk is full RocksDB's own threads write on their
  // own schedule (its info log, and its recovery from the failed write, which switches to a new
  // WAL and retries), so a test that asserts a call wrote nothing counts the writes of the
  // calling thread: a flush the call started would switch the memtable, and create its new WAL,
  // there.
  int64_t refused_database_writes_by(std::thread::id thread) const {
    std::lock_guard<std::mutex> lock(names_mu_);
    auto it = refused_database_by_thread_.find(thread);
    return it == refused_database_by_thread_.end() ? 0 : it->second;
  }
  // The names of the files of the refused writes, in order (for a failing test's message).
  std::string refused_files() const {
    std::lock_guard<std::mutex> lock(names_mu_);
    return refused_names_;
  }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = Check(fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), *this, fname);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = Check(fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->ReopenWritableFile(fname, opts, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), *this, fname);
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = Check(fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->ReuseWritableFile(fname, old_fname, opts, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), *this, fname);
    return s;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, FaultyFileSystem& fs, std::string name)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), name_(std::move(name)) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(name_); !s.ok()) return s;
      return target()->Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(name_); !s.ok()) return s;
      return target()->Append(data, o, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(name_); !s.ok()) return s;
      return target()->PositionedAppend(data, offset, o, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(name_); !s.ok()) return s;
      return target()->PositionedAppend(data, offset, o, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(name_); !s.ok()) return s;
      return target()->Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(name_); !s.ok()) return s;
      return target()->Fsync(o, dbg);
    }

   private:
    FaultyFileSystem& fs_;
    const std::string name_;
  };

  static bool IsWal(const std::string& fname) {
    return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".log") == 0;
  }

  static bool IsInfoLog(const std::string& fname) {
    const size_t slash = fname.rfind('/');
    const size_t base = slash == std::string::npos ? 0 : slash + 1;
    return fname.compare(base, 3, "LOG") == 0;
  }

  rocksdb::IOStatus Check(const std::string& fname) {
    if (!full_.load()) return rocksdb::IOStatus::OK();
    refused_.fetch_add(1);
    if (IsWal(fname)) refused_wal_.fetch_add(1);
    std::lock_guard<std::mutex> lock(names_mu_);
    if (!IsInfoLog(fname)) ++refused_database_by_thread_[std::this_thread::get_id()];
    if (refused_names_.size() < 4096) refused_names_.append(fname).append("\n");
    return rocksdb::IOStatus::NoSpace("No space left on device (injected)");
  }

  std::atomic<bool> full_{false};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> refused_wal_{0};
  mutable std::mutex names_mu_;
  std::map<std::thread::id, int64_t> refused_database_by_thread_;
  std::string refused_names_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_FAULTY_FILE_SYSTEM_H_
