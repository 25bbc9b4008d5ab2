#include "storage/rocksdb/mapped_wal_file_system.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace ratelimit {

namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// madvise(2)'s MADV_POPULATE_WRITE (Linux 5.14), named here for older headers.
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;
#endif

// RocksDB's WAL format (its db/log_format.h): the file is a sequence of 32 KiB blocks; a record
// (or a fragment of one) is a 7-byte header, [crc32c: 4] [payload length: u16 LE] [type: u8],
// then its payload, and never starts in the last 6 bytes of a block (the writer fills them with
// zeros and starts the record in the next block). Recycled WAL files have longer headers; the
// store never recycles them.
constexpr uint64_t kWalBlockBytes = 32768;
constexpr uint64_t kWalHeaderBytes = 7;
// The bytes of a header stored last, in one 4-byte store: the crc's last byte, the length and
// the type. Until they are stored, the header's length and type read as 0: RocksDB's log reader
// takes that for preallocated space and skips the rest of the block, so the record is absent,
// not corrupt.
constexpr uint64_t kCommitOffset = 3;
constexpr uint64_t kCommitBytes = 4;

std::atomic<std::function<void(uint64_t, uint64_t)>*> before_commit_hook{nullptr};

rocksdb::IOStatus ErrnoStatus(const std::string& what, const std::string& fname, int err) {
  const std::string message = absl::StrCat(what, " ", fname, ": ", std::strerror(err));
  if (err == ENOSPC) return rocksdb::IOStatus::NoSpace(message);
  return rocksdb::IOStatus::IOError(message);
}

// A WAL file written through mappings of its chunks. The wrapped file (`file_`) is kept open to
// grow the file: every chunk is appended through it as zeros before it is mapped, so every
// mapped byte has its disk block.
//
// Thread safety: RocksDB appends from one thread at a time; a sync may come from another
// thread, so the mappings and sizes are guarded.
class MappedWalFile final : public rocksdb::FSWritableFile {
 public:
  MappedWalFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string fname, int fd,
                size_t chunk_bytes, std::shared_ptr<std::atomic<int64_t>> mapped_bytes)
      : file_(std::move(file)),
        fname_(std::move(fname)),
        fd_(fd),
        chunk_bytes_(chunk_bytes),
        mapped_bytes_(std::move(mapped_bytes)) {}

  ~MappedWalFile() override {
    if (!closed_) (void)Close(rocksdb::IOOptions(), nullptr);
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    absl::MutexLock lock(&mu_);
    if (closed_) return rocksdb::IOStatus::IOError(absl::StrCat("append to closed ", fname_));
    const uint64_t end = size_ + data.size();
    while (reserved_ < end) {
      if (rocksdb::IOStatus s = ReserveChunkLocked(options, dbg); !s.ok()) return s;
    }
    // The append's records are made readable by its last stores (kCommitOffset): a process
    // killed while copying leaves the WAL as if the append had not begun, where a copy in order
    // would leave a record whose checksum fails, and a store that refuses to open. Held back:
    // the first header's commit bytes, and those of the header at the start of each block the
    // append reaches (the fragments of a record across blocks), stored in order before the
    // first's, so that only a kill in the few instructions between them can tear the append.
    // An append that starts inside a record (RocksDB splits only records larger than its write
    // buffer) holds back 4 of its bytes for nothing: such a record can be torn, as a write(2)
    // of several pages can.
    absl::InlinedVector<uint64_t, 4> commits;
    uint64_t header = size_;
    const uint64_t left_in_block = kWalBlockBytes - header % kWalBlockBytes;
    if (left_in_block < kWalHeaderBytes) header += left_in_block;
    for (; header + kWalHeaderBytes <= end;
         header = (header / kWalBlockBytes + 1) * kWalBlockBytes) {
      commits.push_back(header + kCommitOffset);
    }
    uint64_t at = size_;
    for (uint64_t commit : commits) {
      CopyLocked(at, data.data() + (at - size_), static_cast<size_t>(commit - at));
      at = commit + kCommitBytes;
    }
    CopyLocked(at, data.data() + (at - size_), static_cast<size_t>(end - at));
    if (!commits.empty()) {
      if (auto* hook = before_commit_hook.load(std::memory_order_acquire)) (*hook)(size_, end);
      // The compiler keeps the stores above before the commits (the CPU stores in order).
      std::atomic_signal_fence(std::memory_order_seq_cst);
      for (size_t i = 1; i < commits.size(); ++i) {
        StoreCommitLocked(commits[i], data.data() + (commits[i] - size_));
      }
      StoreCommitLocked(commits[0], data.data() + (commits[0] - size_));
    }
    size_ = end;
    RetireWrittenChunksLocked();
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& /*data*/, uint64_t /*offset*/,
                                     const rocksdb::IOOptions& /*options*/,
                                     rocksdb::IODebugContext* /*dbg*/) override {
    return rocksdb::IOStatus::NotSupported("positioned append to a mapped WAL file");
  }

  // Forgets the bytes past `size` (zeroing them, so that a crash cannot bring them back).
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& /*options*/,
                             rocksdb::IODebugContext* /*dbg*/) override {
    absl::MutexLock lock(&mu_);
    if (size > size_) return rocksdb::IOStatus::InvalidArgument("truncate beyond the end");
    // Appends go on from `size`: its chunk and those after it are mapped again.
    while (retired_ > size / chunk_bytes_) {
      if (rocksdb::IOStatus s = MapLocked(retired_ - 1, &maps_[retired_ - 1]); !s.ok()) return s;
      --retired_;
    }
    ZeroLocked(size, size_ - size);
    size_ = size;
    synced_ = std::min(synced_, size_);
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus Close(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    absl::MutexLock lock(&mu_);
    if (closed_) return rocksdb::IOStatus::OK();
    closed_ = true;
    for (size_t i = retired_; i < maps_.size(); ++i) UnmapLocked(i);
    maps_.clear();
    rocksdb::IOStatus s = file_->Close(options, dbg);
    // Drop the zeros past the last record: a file closed cleanly holds its records only.
    if (ftruncate(fd_, static_cast<off_t>(size_)) != 0 && s.ok()) {
      s = ErrnoStatus("truncate", fname_, errno);
    }
    close(fd_);
    return s;
  }

  // The bytes are in the page cache once copied: nothing to flush.
  rocksdb::IOStatus Flush(const rocksdb::IOOptions& /*options*/,
                          rocksdb::IODebugContext* /*dbg*/) override {
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus Sync(const rocksdb::IOOptions& /*options*/,
                         rocksdb::IODebugContext* /*dbg*/) override {
    absl::MutexLock lock(&mu_);
    return SyncLocked();
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    return Sync(options, dbg);
  }

  // Sync takes the file's lock, so RocksDB may sync while another thread appends (SyncWAL
  // requires it).
  bool IsSyncThreadSafe() const override { return true; }

  uint64_t GetFileSize(const rocksdb::IOOptions& /*options*/,
                       rocksdb::IODebugContext* /*dbg*/) override {
    absl::MutexLock lock(&mu_);
    return size_;
  }

  // Space is reserved chunk by chunk by Append itself.
  rocksdb::IOStatus Allocate(uint64_t /*offset*/, uint64_t /*len*/,
                             const rocksdb::IOOptions& /*options*/,
                             rocksdb::IODebugContext* /*dbg*/) override {
    return rocksdb::IOStatus::OK();
  }
  void PrepareWrite(size_t /*offset*/, size_t /*len*/, const rocksdb::IOOptions& /*options*/,
                    rocksdb::IODebugContext* /*dbg*/) override {}

  size_t GetUniqueId(char* id, size_t max_size) const override {
    return file_->GetUniqueId(id, max_size);
  }

 private:
  // Appends one chunk of zeros through the wrapped file (allocating its blocks, or failing
  // with NoSpace on a full disk) and maps it.
  rocksdb::IOStatus ReserveChunkLocked(const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string zeros(chunk_bytes_, '\0');
    if (rocksdb::IOStatus s = file_->Append(zeros, options, dbg); !s.ok()) return s;
    if (rocksdb::IOStatus s = file_->Flush(options, dbg); !s.ok()) return s;
    char* map = nullptr;
    if (rocksdb::IOStatus s = MapLocked(maps_.size(), &map); !s.ok()) return s;
    maps_.push_back(map);
    reserved_ += chunk_bytes_;
    return rocksdb::IOStatus::OK();
  }

  // Maps chunk `chunk` of the file into `*map`, every page of it made writable now, in one call,
  // instead of by a page fault at the first store into each (kernels before 5.14 refuse it: then
  // the faults do it).
  rocksdb::IOStatus MapLocked(size_t chunk, char** map) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    void* at = mmap(nullptr, chunk_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                    static_cast<off_t>(chunk * chunk_bytes_));
    if (at == MAP_FAILED) return ErrnoStatus("map", fname_, errno);
    (void)madvise(at, chunk_bytes_, kPopulateWrite);
    *map = static_cast<char*>(at);
    mapped_bytes_->fetch_add(static_cast<int64_t>(chunk_bytes_), std::memory_order_relaxed);
    return rocksdb::IOStatus::OK();
  }

  // Calls `f(mapped, length)` for each piece of the mapped bytes [offset, offset + n), in order,
  // one piece per chunk they touch; stops at, and returns, the first piece for which f is false.
  template <typename F>
  bool ForEachPieceLocked(uint64_t offset, uint64_t n, F f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (n > 0) {
      const size_t within = offset % chunk_bytes_;
      const size_t take = std::min<uint64_t>(n, chunk_bytes_ - within);
      if (!f(maps_[offset / chunk_bytes_] + within, take)) return false;
      offset += take;
      n -= take;
    }
    return true;
  }

  void CopyLocked(uint64_t offset, const char* data, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ForEachPieceLocked(offset, n, [&data](char* to, size_t take) {
      std::memcpy(to, data, take);
      data += take;
      return true;
    });
  }

  // The kCommitBytes at `from` to the file at `offset`, in one store when they are in one chunk
  // (a 4-byte copy is one instruction: a killed process stored all of it or none). Across two
  // chunks (two mappings: 3 of every page's offsets), in two stores, the only place a kill can
  // still tear a record that starts a write.
  void StoreCommitLocked(uint64_t offset, const char* from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (offset % chunk_bytes_ + kCommitBytes > chunk_bytes_) {
      CopyLocked(offset, from, kCommitBytes);
      return;
    }
    uint32_t bytes;
    std::memcpy(&bytes, from, sizeof(bytes));
    std::memcpy(maps_[offset / chunk_bytes_] + offset % chunk_bytes_, &bytes, sizeof(bytes));
  }

  void ZeroLocked(uint64_t offset, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ForEachPieceLocked(offset, n, [](char* to, size_t take) {
      std::memset(to, 0, take);
      return true;
    });
  }

  // msync of the pages written since the last sync: for a file mapping, the same as fdatasync
  // of that range (the file's size was made durable-ready by the appends that reserved it).
  // When some of them are in retired chunks (no longer mapped), fdatasync of the file.
  rocksdb::IOStatus SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_) return rocksdb::IOStatus::OK();
    const uint64_t from = synced_ - synced_ % PageSize();
    if (from < retired_ * chunk_bytes_) {
      if (fdatasync(fd_) != 0) return ErrnoStatus("sync", fname_, errno);
      synced_ = size_;
      return rocksdb::IOStatus::OK();
    }
    int err = 0;
    if (!ForEachPieceLocked(from, size_ - from, [&err](char* at, size_t take) {
          if (msync(at, take, MS_SYNC) == 0) return true;
          err = errno;
          return false;
        })) {
      return ErrnoStatus("sync", fname_, err);
    }
    synced_ = size_;
    return rocksdb::IOStatus::OK();
  }

  // Unmaps the chunks below the one `size_` is in: appends never write them again, so their
  // pages stay in the page cache without this process's page tables. Writing them back (the
  // kernel's flusher, or a sync such as the one of every WAL RocksDB closes before a flush) then
  // has no mapping to write-protect page by page, each protection a TLB shootdown.
  void RetireWrittenChunksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t written = static_cast<size_t>(size_ / chunk_bytes_);
    while (retired_ < written) UnmapLocked(retired_++);
  }

  void UnmapLocked(size_t chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    munmap(maps_[chunk], chunk_bytes_);
    maps_[chunk] = nullptr;
    mapped_bytes_->fetch_sub(static_cast<int64_t>(chunk_bytes_), std::memory_order_relaxed);
  }

  const std::unique_ptr<rocksdb::FSWritableFile> file_;
  const std::string fname_;
  const int fd_;
  const size_t chunk_bytes_;
  absl::Mutex mu_;
  std::vector<char*> maps_ ABSL_GUARDED_BY(mu_);  // maps_[i]: bytes [i, i + 1) * chunk_bytes_
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;    // bytes in chunks (maps_.size() of them)
  uint64_t size_ ABSL_GUARDED_BY(mu_) = 0;        // bytes appended
  uint64_t synced_ ABSL_GUARDED_BY(mu_) = 0;      // bytes synced
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  size_t retired_ ABSL_GUARDED_BY(mu_) = 0;  // maps_[0, retired_) are unmapped (null)
  const std::shared_ptr<std::atomic<int64_t>> mapped_bytes_;  // the file system's gauge
};

}  // namespace

MappedWalFileSystem::MappedWalFileSystem(std::shared_ptr<rocksdb::FileSystem> target,
                                         size_t chunk_bytes)
    : FileSystemWrapper(std::move(target)),
      chunk_bytes_(
          std::max<size_t>(PageSize(), (chunk_bytes + PageSize() - 1) / PageSize() * PageSize())) {}

void MappedWalFileSystem::SetBeforeCommitHookForTesting(
    std::function<void(uint64_t, uint64_t)>* hook) {
  before_commit_hook.store(hook, std::memory_order_release);
}

bool MappedWalFileSystem::IsWal(const std::string& fname) {
  return fname.size() > 4 && absl::EndsWith(fname, ".log");
}

rocksdb::IOStatus MappedWalFileSystem::NewWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, &file, dbg);
  if (!s.ok() || !IsWal(fname) || opts.use_direct_writes) {
    if (s.ok()) {
      if (IsWal(fname)) unmapped_files_.fetch_add(1, std::memory_order_relaxed);
      *result = std::move(file);
    }
    return s;
  }
  // The wrapped file system created the file; map it through a descriptor of our own. A file
  // this process cannot open by its name (not on the local file system) is written as is.
  const int fd = open(fname.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    unmapped_files_.fetch_add(1, std::memory_order_relaxed);
    *result = std::move(file);
    return s;
  }
  mapped_files_.fetch_add(1, std::memory_order_relaxed);
  *result =
      std::make_unique<MappedWalFile>(std::move(file), fname, fd, chunk_bytes_, mapped_bytes_);
  return s;
}

}  // namespace ratelimit
