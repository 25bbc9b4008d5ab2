#ifndef RATELIMIT_TESTS_SUPPORT_ROCKSDB_TEST_SUPPORT_H_
#define RATELIMIT_TESTS_SUPPORT_ROCKSDB_TEST_SUPPORT_H_

// Opening a RocksDB state store in a test: a fake clock, and optionally a file system that fails
// on command (tests/support/faulty_file_system.h); holding a group write back (WriteGate).

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/rocksdb/rocksdb_state_store.h"

namespace ratelimit::testing {

// Holds back the first group write until Release(): the thread writing it has taken every
// decision queued before it, and the decisions queued meanwhile wait for the next write.
// For RocksDbStateStoreOptions::before_group_write (call BeforeWrite from it).
class WriteGate {
 public:
  void BeforeWrite() {
    if (calls_.fetch_add(1) != 0) return;
    entered_.Notify();
    release_.WaitForNotification();
  }
  void WaitUntilHeld() { entered_.WaitForNotification(); }
  void Release() { release_.Notify(); }

 private:
  std::atomic<int> calls_{0};
  absl::Notification entered_;
  absl::Notification release_;
};

// Opens the store at `path` on `clock` (not owned; must outlive the store), over `file_system`
// when given, salvaging a WAL that does not replay when `salvage_wal`, writing the WAL through a
// mapping when `map_wal` (the default) and with a write(2) per group otherwise.
inline absl::StatusOr<std::unique_ptr<RocksDbStateStore>> OpenRocksDbStoreStatus(
    const std::string& path, const Clock& clock,
    std::shared_ptr<rocksdb::FileSystem> file_system = nullptr, bool salvage_wal = false,
    bool map_wal = true) {
  RocksDbStateStoreOptions o;
  o.path = path;
  o.clock = &clock;
  o.salvage_wal = salvage_wal;
  o.file_system = std::move(file_system);
  o.map_wal = map_wal;
  return RocksDbStateStore::Open(o);
}

// The same; a store that does not open fails the test and gives null.
inline std::unique_ptr<RocksDbStateStore> OpenRocksDbStore(
    const std::string& path, const Clock& clock,
    std::shared_ptr<rocksdb::FileSystem> file_system = nullptr, bool salvage_wal = false,
    bool map_wal = true) {
  auto opened = OpenRocksDbStoreStatus(path, clock, std::move(file_system), salvage_wal, map_wal);
  EXPECT_TRUE(opened.ok()) << opened.status();
  return opened.ok() ? *std::move(opened) : nullptr;
}

// Writes `s` as the state of `k` (one write group).
inline absl::Status Put(StateStore& store, const StateKey& k, State s) {
  return store.Update({k}, [&](auto, absl::Span<std::optional<State>> w) {
    w[0] = s;
    return absl::OkStatus();
  });
}

// The state of `k`; a failed read fails the test and gives nullopt.
inline std::optional<State> GetOrDie(StateStore& store, const StateKey& k) {
  auto got = store.Get(k);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : std::nullopt;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_ROCKSDB_TEST_SUPPORT_H_
