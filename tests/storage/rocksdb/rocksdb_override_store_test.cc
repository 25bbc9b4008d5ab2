// The overrides of the RocksDB store: the OverrideStore contract (tests/storage/
// override_store_contract.h) in its column family, durability across a restart, and a closed
// store's refusal.
#include "storage/rocksdb/rocksdb_override_store.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/storage/override_store_contract.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's suite and helpers

// A temporary directory in memory (/dev/shm) when the machine has one, else on disk: a synced
// write to memory costs no disk flush, so the trim test's 10,007 synced changes take about a
// second instead of about forty.
class MemoryDir {
 public:
  MemoryDir() {
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec)) {
      char tmpl[] = "/dev/shm/ratelimit-test-XXXXXX";
      if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
    }
    if (path_.empty()) {
      disk_.emplace();
      path_ = disk_->path();
    }
  }
  ~MemoryDir() {
    std::error_code ec;
    if (!disk_) std::filesystem::remove_all(path_, ec);
  }
  MemoryDir(const MemoryDir&) = delete;
  MemoryDir& operator=(const MemoryDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::optional<TempDir> disk_;
  std::string path_;
};

// A RocksDB store in a temporary directory, with the production audit bound.
class RocksDbOverrideEnv {
 public:
  void Open() {
    store_ = OpenRocksDbStore(dir_.path(), clock_);
    ASSERT_NE(store_, nullptr);
    ASSERT_NE(store_->overrides(), nullptr);
  }
  OverrideStore& store() { return *store_->overrides(); }
  uint64_t audit_bound() const { return kMaxOverrideAuditEntries; }

 private:
  FakeClock clock_;
  MemoryDir dir_;
  std::unique_ptr<RocksDbStateStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(RocksDb, OverrideStoreContractTest, RocksDbOverrideEnv);

class RocksDbOverrideStoreTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  TempDir dir_;
};

TEST_F(RocksDbOverrideStoreTest, OverridesAndAuditSurviveARestart) {
  {
    auto store = OpenRocksDbStore(dir_.path(), clock_);
    ASSERT_NE(store, nullptr);
    ASSERT_OK(ChangeOverride(*store->overrides(), OverrideTargetOf("api", "k1"), 10));
    ASSERT_OK(ChangeOverride(*store->overrides(), OverrideTargetOf("api", "k*", true), 20));
  }
  auto store = OpenRocksDbStore(dir_.path(), clock_);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<OverrideStore::Snapshot> all = store->overrides()->LoadAll();
  ASSERT_OK(all);
  EXPECT_EQ(all->version, 2u);
  EXPECT_EQ(all->overrides.size(), 2u);
  EXPECT_EQ(store->overrides()->ListAudit(0, "", 10)->size(), 2u);
  // The sequence goes on from the last entry.
  EXPECT_EQ(ChangeOverride(*store->overrides(), OverrideTargetOf("api", "k2"), 1)->sequence, 3u);
}

TEST_F(RocksDbOverrideStoreTest, AClosedStoreRefusesWithUnavailable) {
  auto store = OpenRocksDbStore(dir_.path(), clock_);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Close());
  EXPECT_EQ(store->overrides()->Version().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ChangeOverride(*store->overrides(), OverrideTargetOf("api", "k"), 1).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ratelimit
