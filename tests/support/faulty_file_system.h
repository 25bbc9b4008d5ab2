#ifndef RATELIMIT_TESTS_SUPPORT_FAULTY_FILE_SYSTEM_H_
#define RATELIMIT_TESTS_SUPPORT_FAULTY_FILE_SYSTEM_H_

// A RocksDB file system over the real one that can be told the disk is full: while it is, every
// file creation, append and sync fails with IOStatus::NoSpace (as ENOSPC would).

#include <atomic>
#include <memory>
#include <string>

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
  // (`*.log`; RocksDB's background work and info log write other files on their own schedule).
  int64_t refused_writes() const { return refused_.load(); }
  int64_t refused_wal_writes() const { return refused_wal_.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = Check(IsWal(fname)); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), *this, IsWal(fname));
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = Check(IsWal(fname)); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->ReopenWritableFile(fname, opts, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), *this, IsWal(fname));
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = Check(IsWal(fname)); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->ReuseWritableFile(fname, old_fname, opts, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), *this, IsWal(fname));
    return s;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, FaultyFileSystem& fs, bool wal)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), wal_(wal) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(wal_); !s.ok()) return s;
      return target()->Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(wal_); !s.ok()) return s;
      return target()->Append(data, o, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(wal_); !s.ok()) return s;
      return target()->PositionedAppend(data, offset, o, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(wal_); !s.ok()) return s;
      return target()->PositionedAppend(data, offset, o, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(wal_); !s.ok()) return s;
      return target()->Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = fs_.Check(wal_); !s.ok()) return s;
      return target()->Fsync(o, dbg);
    }

   private:
    FaultyFileSystem& fs_;
    const bool wal_;
  };

  static bool IsWal(const std::string& fname) {
    return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".log") == 0;
  }

  rocksdb::IOStatus Check(bool wal = false) {
    if (!full_.load()) return rocksdb::IOStatus::OK();
    refused_.fetch_add(1);
    if (wal) refused_wal_.fetch_add(1);
    return rocksdb::IOStatus::NoSpace("No space left on device (injected)");
  }

  std::atomic<bool> full_{false};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> refused_wal_{0};
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_FAULTY_FILE_SYSTEM_H_
