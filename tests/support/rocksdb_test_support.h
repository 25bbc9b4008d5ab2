#ifndef RATELIMIT_TESTS_SUPPORT_ROCKSDB_TEST_SUPPORT_H_
#define RATELIMIT_TESTS_SUPPORT_ROCKSDB_TEST_SUPPORT_H_

// Opening a RocksDB state store in a test: a fake clock, and optionally a file system that fails
// on command (tests/support/faulty_file_system.h).

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/rocksdb_state_store.h"

namespace ratelimit::testing {

// Opens the store at `path` on `clock` (not owned; must outlive the store), over `file_system`
// when given, salvaging a WAL that does not replay when `salvage_wal`.
inline absl::StatusOr<std::unique_ptr<RocksDbStateStore>> OpenRocksDbStoreStatus(
    const std::string& path, const Clock& clock,
    std::shared_ptr<rocksdb::FileSystem> file_system = nullptr, bool salvage_wal = false) {
  RocksDbStateStoreOptions o;
  o.path = path;
  o.clock = &clock;
  o.salvage_wal = salvage_wal;
  o.file_system = std::move(file_system);
  return RocksDbStateStore::Open(o);
}

// The same; a store that does not open fails the test and gives null.
inline std::unique_ptr<RocksDbStateStore> OpenRocksDbStore(
    const std::string& path, const Clock& clock,
    std::shared_ptr<rocksdb::FileSystem> file_system = nullptr, bool salvage_wal = false) {
  auto opened = OpenRocksDbStoreStatus(path, clock, std::move(file_system), salvage_wal);
  EXPECT_TRUE(opened.ok()) << opened.status();
  return opened.ok() ? *std::move(opened) : nullptr;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_ROCKSDB_TEST_SUPPORT_H_
