#include "storage/rocksdb/rocksdb_info_log.h"

#include <cstdio>
#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ratelimit {

std::shared_ptr<RocksDbInfoLog> RocksDbInfoLog::Open(std::shared_ptr<rocksdb::FileSystem> fs,
                                                     const std::string& dir, uint64_t max_bytes) {
  std::shared_ptr<RocksDbInfoLog> log(new RocksDbInfoLog(std::move(fs), dir, max_bytes));
  absl::MutexLock lock(&log->mu_);
  log->StartFileLocked();  // when it fails, the first line that can be written creates the file
  return log;
}

RocksDbInfoLog::RocksDbInfoLog(std::shared_ptr<rocksdb::FileSystem> fs, std::string dir,
                               uint64_t max_bytes)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL),
      fs_(std::move(fs)),
      dir_(std::move(dir)),
      max_bytes_(max_bytes) {}

RocksDbInfoLog::~RocksDbInfoLog() { CloseImpl().PermitUncheckedError(); }

rocksdb::Status RocksDbInfoLog::CloseImpl() {
  absl::MutexLock lock(&mu_);
  if (file_) {
    file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    file_.reset();
  }
  return rocksdb::Status::OK();
}

bool RocksDbInfoLog::StartFileLocked() {
  if (file_) {
    file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    file_.reset();
  }
  const std::string path = dir_ + "/LOG";
  if (fs_->FileExists(path, rocksdb::IOOptions(), nullptr).ok()) {
    fs_->RenameFile(path, path + ".old", rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  }
  bytes_ = 0;
  if (fs_->NewWritableFile(path, rocksdb::FileOptions(), &file_, nullptr).ok()) return true;
  file_.reset();
  return false;
}

bool RocksDbInfoLog::AppendLocked(const std::string& line) {
  // A new file when this one is full, or when none could be created (a full disk at open or at
  // rotation).
  if ((!file_ || bytes_ + line.size() > max_bytes_) && !StartFileLocked()) return false;
  if (!file_->Append(line, rocksdb::IOOptions(), nullptr).ok()) return false;
  bytes_ += line.size();
  return true;
}

void RocksDbInfoLog::Logv(const char* format, va_list ap) {
  char stack[1024];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(stack, sizeof(stack), format, copy);
  va_end(copy);
  if (n < 0) return;
  std::string message;
  if (static_cast<size_t>(n) < sizeof(stack)) {
    message.assign(stack, static_cast<size_t>(n));
  } else {
    message.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(message.data(), message.size(), format, ap);
    message.resize(static_cast<size_t>(n));
  }
  const std::string stamp =
      absl::FormatTime("%Y/%m/%d-%H:%M:%E6S ", absl::Now(), absl::LocalTimeZone());
  std::string line = absl::StrCat(stamp, message);
  if (line.empty() || line.back() != '\n') line.push_back('\n');
  absl::MutexLock lock(&mu_);
  if (unreported_ > 0) {
    const std::string note =
        absl::StrCat(stamp, "(", unreported_, " info log lines lost: the disk refused them)\n");
    if (!AppendLocked(note)) {
      ++dropped_;
      ++unreported_;
      return;
    }
    unreported_ = 0;
  }
  if (!AppendLocked(line)) {
    ++dropped_;
    ++unreported_;
  }
}

uint64_t RocksDbInfoLog::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace ratelimit
