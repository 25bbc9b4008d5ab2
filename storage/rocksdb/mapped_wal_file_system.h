#ifndef RATELIMIT_STORAGE_ROCKSDB_MAPPED_WAL_FILE_SYSTEM_H_
#define RATELIMIT_STORAGE_ROCKSDB_MAPPED_WAL_FILE_SYSTEM_H_

// A RocksDB file system that writes WAL files (`*.log`) through a shared memory mapping instead
// of one write(2) per write group.
//
// Why it is as durable as write(2). A decision is acknowledged once its WAL record is in the
// operating system's page cache: a killed process loses nothing, a power failure may (unless
// --sync). Stores into a MAP_SHARED mapping of a file land in that same page cache the moment
// they are made, so the guarantee is unchanged; what is saved is the system call, which was
// the largest single cost of a decision on the hot path.
//
// Why a full disk cannot crash the process. Storing into a mapped page whose disk blocks do
// not exist (a sparse file on a full disk) kills the process with SIGBUS. So the file is never
// extended by mapping alone: it grows by whole chunks of zeros appended with the wrapped file
// system's ordinary Append, which allocates the blocks or fails with NoSpace, and only then is
// the chunk mapped. An append that does not fit in the chunks reserved so far reserves more
// first, and fails as a whole (nothing copied) when it cannot.
//
// Why RocksDB reads it back. A file closed cleanly is truncated to the bytes written. After a
// crash the file ends in zeros up to its last chunk; RocksDB's log reader skips zero-filled
// blocks without reporting corruption (they are what preallocated WAL space looks like), so
// recovery, even with kAbsoluteConsistency, replays every record and stops at the zeros. A
// process killed in the middle of copying a record must not leave it half there (its checksum
// would fail, and the store refuse to open without salvage): each append's record headers get
// their length and type with the append's last stores, one instruction each, so until then the
// records read as zeros too. (write(2) needed no such care: a kill cannot interrupt the copy of
// a write of one page.)
//
// Files that are not WAL files, and WAL files the wrapped file system does not keep on the
// local file system (a path this process cannot open), are passed through unchanged.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "rocksdb/file_system.h"

namespace ratelimit {

class MappedWalFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  // How much a mapped WAL file grows at a time (rounded up to whole pages).
  static constexpr size_t kDefaultChunkBytes = size_t{1} << 20;

  explicit MappedWalFileSystem(std::shared_ptr<rocksdb::FileSystem> target,
                               size_t chunk_bytes = kDefaultChunkBytes);

  static const char* kClassName() { return "MappedWalFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;

  size_t chunk_bytes() const { return chunk_bytes_; }
  // WAL files opened mapped, and passed through because they could not be.
  uint64_t mapped_files() const { return mapped_files_.load(std::memory_order_relaxed); }
  uint64_t unmapped_files() const { return unmapped_files_.load(std::memory_order_relaxed); }
  // Bytes of WAL files mapped now: each open file maps only the chunk being appended to (and
  // those reserved past it); a chunk written to its end is unmapped.
  int64_t mapped_bytes() const { return mapped_bytes_->load(std::memory_order_relaxed); }

  // Whether `fname` names a WAL file.
  static bool IsWal(const std::string& fname);

  // For tests: `(*hook)(begin, end)` is called by every append to a mapped WAL file, of the
  // file's bytes [begin, end), at the instant a kill leaves the most of it copied (every byte
  // but those of its last stores); nullptr: none. The caller keeps `*hook` alive until it sets
  // another.
  static void SetBeforeCommitHookForTesting(std::function<void(uint64_t, uint64_t)>* hook);

 private:
  const size_t chunk_bytes_;
  std::atomic<uint64_t> mapped_files_{0};
  std::atomic<uint64_t> unmapped_files_{0};
  // Shared with the open files, which may outlive this object inside RocksDB.
  const std::shared_ptr<std::atomic<int64_t>> mapped_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_MAPPED_WAL_FILE_SYSTEM_H_
