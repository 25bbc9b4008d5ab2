// The RocksDB store under a full disk, a corrupted WAL, file permissions and idle garbage.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/faulty_file_system.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

namespace fs = std::filesystem;
using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FaultyFileSystem;
using ::ratelimit::testing::GetOrDie;
using ::ratelimit::testing::kMinute;
using ::ratelimit::testing::NewestWal;
using ::ratelimit::testing::OpenRocksDbStore;
using ::ratelimit::testing::OpenRocksDbStoreStatus;
using ::ratelimit::testing::Put;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WalRecordBytes;

class StoreHardeningTest : public ::testing::Test {
 protected:
  std::unique_ptr<RocksDbStateStore> Open(const std::string& path, bool salvage = false,
                                          std::shared_ptr<rocksdb::FileSystem> fs = nullptr,
                                          bool map_wal = true) {
    return OpenRocksDbStore(path, clock_, std::move(fs), salvage, map_wal);
  }
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> OpenStatus(
      const std::string& path, bool salvage = false,
      std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
    return OpenRocksDbStoreStatus(path, clock_, std::move(fs), salvage);
  }

  TempDir dir_;
  FakeClock clock_;
};

// --- A full disk: writes stop, health says so, and both come back with the space. ---

// With a write(2) per write group, the first write after the disk fills fails. (A mapped WAL
// writes into space reserved before: mapped_wal_file_system_test covers it.)
TEST_F(StoreHardeningTest, FullDiskStopsWritesReportsUnhealthyAndResumesWhenSpaceReturns) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, false, faulty, /*map_wal=*/false);
  ASSERT_NE(store, nullptr);
  const State acknowledged{5, clock_.NowMicros(), clock_.NowMicros() + kMinute};
  ASSERT_OK(Put(*store, {"api", "before"}, acknowledged));
  ASSERT_OK(store->Health());

  faulty->SetFull(true);
  absl::Status failed = Put(*store, {"api", "during"}, State{1, 2, 3});
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  absl::Status health = store->Health();
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable) << health;

  // Writes are refused without reaching the WAL, however many come. (RocksDB's own background
  // recovery may try a new WAL file once or twice meanwhile; a decision that wrote would add one
  // refused WAL write each.)
  const int64_t refused = faulty->refused_wal_writes();
  for (int i = 0; i < 2000; ++i) {
    absl::Status s = Put(*store, {"api", absl::StrCat("k", i)}, State{1, 2, 3});
    ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  EXPECT_LT(faulty->refused_wal_writes() - refused, 10);
  EXPECT_EQ(store->Delete({"api", "before"}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->Health().code(), absl::StatusCode::kUnavailable);  // still full
  EXPECT_EQ(GetOrDie(*store, {"api", "before"}), acknowledged);       // reads still work

  // Space returns: the next health check resumes the store.
  faulty->SetFull(false);
  ASSERT_TRUE(Eventually([&] { return store->Health().ok(); }));
  ASSERT_OK(Put(*store, {"api", "after"}, State{7, 8, 9}));
  EXPECT_EQ(GetOrDie(*store, {"api", "before"}), acknowledged);
  EXPECT_EQ(GetOrDie(*store, {"api", "during"}), std::nullopt);  // refused, so never applied
  ASSERT_OK(store->Close());

  // Everything acknowledged is on disk.
  store = Open(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetOrDie(*store, {"api", "before"}), acknowledged);
  EXPECT_EQ(GetOrDie(*store, {"api", "after"}), (State{7, 8, 9}));
  EXPECT_EQ(GetOrDie(*store, {"api", "during"}), std::nullopt);
}

TEST_F(StoreHardeningTest, HealthProbeWriteDetectsAFullDiskBeforeAnyDecisionFails) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  auto store = Open(dir_.path() + "/db", false, faulty);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Health());
  faulty->SetFull(true);
  EXPECT_EQ(store->Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Put(*store, {"api", "k"}, State{1, 2, 3}).code(), absl::StatusCode::kUnavailable);
  faulty->SetFull(false);
  ASSERT_TRUE(Eventually([&] { return store->Health().ok(); }));
  ASSERT_OK(Put(*store, {"api", "k"}, State{1, 2, 3}));
}

TEST_F(StoreHardeningTest, FullDiskDuringSyncedWritesAndFlushesIsSurvived) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  RocksDbStateStoreOptions o;
  o.path = dir_.path() + "/db";
  o.clock = &clock_;
  o.sync = true;
  o.file_system = faulty;
  auto opened = RocksDbStateStore::Open(o);
  ASSERT_OK(opened);
  RocksDbStateStore& store = **opened;
  const int64_t full_at = clock_.NowMicros() + kMinute;  // not garbage yet
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(Put(store, {"api", absl::StrCat("a", i)}, State{1, i, full_at}));
  }
  faulty->SetFull(true);
  // A flush and compaction on a full disk fail as a status, and writes stay stopped.
  EXPECT_FALSE(store.CollectGarbage().ok());
  EXPECT_EQ(Put(store, {"api", "x"}, State{1, 2, 3}).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(store.Health().ok());
  faulty->SetFull(false);
  ASSERT_TRUE(Eventually([&] { return store.Health().ok(); })) << store.Health();
  ASSERT_OK(store.CollectGarbage());
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(GetOrDie(store, {"api", absl::StrCat("a", i)}), (State{1, i, full_at}));
  }
}

// After a WAL write failed, RocksDB's WAL writer must never be used again (RocksDB asserts, and
// Debian builds it with assertions): garbage collection's flush would reuse it, so it is refused
// while the store is failing, as every write is.
TEST_F(StoreHardeningTest, CollectGarbageAfterAFailedWriteIsRefusedWithoutTouchingRocksDb) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  auto store = Open(dir_.path() + "/db", false, faulty, /*map_wal=*/false);
  ASSERT_NE(store, nullptr);
  const int64_t full_at = clock_.NowMicros() + kMinute;
  ASSERT_OK(Put(*store, {"api", "before"}, State{1, 2, full_at}));  // a non-empty memtable
  faulty->SetFull(true);
  ASSERT_EQ(Put(*store, {"api", "during"}, State{1, 2, 3}).code(), absl::StatusCode::kUnavailable);
  // RocksDB's own threads keep writing meanwhile (its info log; its recovery from the failed
  // write, retrying on a new WAL), refused while the disk is full: the writes of this thread, which
  // a flush started by the call would make (switching to a new WAL), are counted.
  const std::thread::id self = std::this_thread::get_id();
  const int64_t refused = faulty->refused_database_writes_by(self);
  absl::Status gc = store->CollectGarbage();
  EXPECT_EQ(gc.code(), absl::StatusCode::kUnavailable) << gc;
  EXPECT_NE(gc.message().find("writes are stopped"), std::string::npos) << gc;
  EXPECT_EQ(faulty->refused_database_writes_by(self), refused)  // the call wrote no file
      << "refused writes:\n"
      << faulty->refused_files();
  faulty->SetFull(false);
  ASSERT_TRUE(Eventually([&] { return store->Health().ok(); })) << store->Health();
  ASSERT_OK(store->CollectGarbage());
  EXPECT_EQ(GetOrDie(*store, {"api", "before"}), (State{1, 2, full_at}));
}

// RocksDB logs to its info log (LOG) through the same file system: on a full disk a line is
// refused, and RocksDB's own logger asserts on the next one. Closing a failing store on a full
// disk logs several (the options it sets, the shutdown), so it aborted the process; the store's
// logger drops them instead, and everything acknowledged is there after the reopen.
TEST_F(StoreHardeningTest, ClosingAFailingStoreOnAFullDiskIsSurvived) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, false, faulty, /*map_wal=*/false);
  ASSERT_NE(store, nullptr);
  const State acknowledged{5, clock_.NowMicros(), clock_.NowMicros() + kMinute};
  ASSERT_OK(Put(*store, {"api", "before"}, acknowledged));
  faulty->SetFull(true);
  ASSERT_EQ(Put(*store, {"api", "during"}, State{1, 2, 3}).code(), absl::StatusCode::kUnavailable);
  // RocksDB logged the background error at once; the disk refused the line.
  EXPECT_GE(store->info_log_lines_dropped(), 1u);
  EXPECT_FALSE(store->Close().ok());  // the failure it closed with
  store.reset();
  faulty->SetFull(false);
  store = Open(path, false, faulty, /*map_wal=*/false);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetOrDie(*store, {"api", "before"}), acknowledged);
  EXPECT_EQ(GetOrDie(*store, {"api", "during"}), std::nullopt);
}

TEST_F(StoreHardeningTest, ConcurrentWritersThroughAFullDiskLoseNoAcknowledgedWrite) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, false, faulty);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  const int64_t full_at = clock_.NowMicros() + kMinute;
  std::vector<std::vector<std::string>> acked(kThreads);
  std::vector<std::atomic<int64_t>> acks(kThreads), failures(kThreads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = absl::StrCat(t, "-", i);
        absl::Status s = Put(*store, {"api", key}, State{double(i), i, full_at});
        if (s.ok()) {
          acked[t].push_back(key);
          acks[t].fetch_add(1);
        } else {
          EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
          failures[t].fetch_add(1);
        }
      }
    });
  }
  auto every = [&](std::vector<std::atomic<int64_t>>& counts, int64_t at_least) {
    for (auto& c : counts) {
      if (c.load() < at_least) return false;
    }
    return true;
  };
  EXPECT_TRUE(Eventually([&] { return every(acks, 100); }));
  faulty->SetFull(true);
  EXPECT_TRUE(Eventually([&] { return every(failures, 500); }));
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(store->Health().ok());
  faulty->SetFull(false);
  EXPECT_TRUE(Eventually([&] { return store->Health().ok(); }));
  std::vector<int64_t> before(kThreads);
  for (int t = 0; t < kThreads; ++t) before[t] = acks[t].load();
  EXPECT_TRUE(Eventually([&] {
    for (int t = 0; t < kThreads; ++t) {
      if (acks[t].load() < before[t] + 100) return false;
    }
    return true;
  }));
  stop = true;
  for (std::thread& w : writers) w.join();
  ASSERT_OK(store->Close());

  store = Open(path);
  ASSERT_NE(store, nullptr);
  for (int t = 0; t < kThreads; ++t) {
    for (const std::string& key : acked[t]) {
      ASSERT_TRUE(GetOrDie(*store, {"api", key}).has_value()) << key;
    }
  }
}

// --- A corrupted WAL refuses to open unless salvaged. ---

class CorruptWalTest : public StoreHardeningTest {
 protected:
  // Writes states with the store open, then copies its directory as a crash would leave it
  // (the WAL holds the states; nothing was flushed).
  void WriteAndCrash(const std::string& crashed) {
    auto store = Open(dir_.path() + "/live");
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 50; ++i) {
      ASSERT_OK(Put(*store, {"api", absl::StrCat("k", i)}, State{double(i), i, 1 + i}));
    }
    fs::copy(dir_.path() + "/live", crashed, fs::copy_options::recursive);
    wal_ = NewestWal(crashed);
    ASSERT_FALSE(wal_.empty());
  }
  std::string wal_;
};

TEST_F(CorruptWalTest, ACleanCrashOpensWithEveryAcknowledgedState) {
  const std::string crashed = dir_.path() + "/crashed";
  WriteAndCrash(crashed);
  auto store = Open(crashed);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->open_report().salvaged);
  EXPECT_TRUE(absl::StrContains(store->open_report().recovery, ".log"))
      << store->open_report().recovery;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(GetOrDie(*store, {"api", absl::StrCat("k", i)}), (State{double(i), i, 1 + i}));
  }
}

TEST_F(CorruptWalTest, AFlippedByteRefusesToOpenAndSalvageOpens) {
  const std::string crashed = dir_.path() + "/crashed";
  WriteAndCrash(crashed);
  {
    std::fstream f(wal_, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff middle = static_cast<std::streamoff>(WalRecordBytes(wal_) / 2);
    f.seekg(middle);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(middle);
    f.write(&c, 1);
  }
  auto refused = OpenStatus(crashed);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "orrupt")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "salvage")) << refused.status();

  auto salvaged = Open(crashed, /*salvage=*/true);
  ASSERT_NE(salvaged, nullptr);
  EXPECT_TRUE(salvaged->open_report().salvaged);
  ASSERT_FALSE(salvaged->open_report().warnings.empty());
  EXPECT_TRUE(absl::StrContains(salvaged->open_report().warnings[0], "lost"));
  // The records before the corruption point survive.
  EXPECT_EQ(GetOrDie(*salvaged, {"api", "k0"}), (State{0, 0, 1}));
}

TEST_F(CorruptWalTest, ATruncatedRecordRefusesToOpenAndSalvageOpens) {
  const std::string crashed = dir_.path() + "/crashed";
  WriteAndCrash(crashed);
  fs::resize_file(wal_, WalRecordBytes(wal_) - 7);  // cuts the last record in the middle
  auto refused = OpenStatus(crashed);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();

  auto salvaged = Open(crashed, /*salvage=*/true);
  ASSERT_NE(salvaged, nullptr);
  EXPECT_TRUE(salvaged->open_report().salvaged);
  EXPECT_EQ(GetOrDie(*salvaged, {"api", "k0"}), (State{0, 0, 1}));
  EXPECT_EQ(GetOrDie(*salvaged, {"api", "k49"}), std::nullopt);  // the cut record
}

// --- Permissions ---

mode_t Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(StoreHardeningTest, CreatesTheDataDirectoryPrivate) {
  const mode_t old = ::umask(022);
  const std::string path = dir_.path() + "/parent/db";
  auto store = Open(path);
  ::umask(old);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Mode(path), 0700u);
  EXPECT_TRUE(store->open_report().warnings.empty());
}

TEST_F(StoreHardeningTest, WarnsAboutAnExistingDirectoryOthersCanRead) {
  const std::string path = dir_.path() + "/db";
  fs::create_directory(path);
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  auto store = Open(path);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->open_report().warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(store->open_report().warnings[0], "0755"));
  EXPECT_TRUE(absl::StrContains(store->open_report().warnings[0], path));
  store.reset();

  ASSERT_EQ(::chmod(path.c_str(), 0700), 0);
  store = Open(path);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->open_report().warnings.empty());
}

// --- Garbage collection without writes ---

TEST_F(StoreHardeningTest, CollectGarbageDropsRefilledStatesWithoutAnyWrite) {
  auto store = Open(dir_.path() + "/db");
  ASSERT_NE(store, nullptr);
  const int64_t now = clock_.NowMicros();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_OK(Put(*store, {"api", absl::StrCat("k", i)}, State{1, now, now + kMinute}));
  }
  ASSERT_OK(store->CollectGarbage());  // nothing has refilled yet
  EXPECT_EQ(GetOrDie(*store, {"api", "k0"}), (State{1, now, now + kMinute}));
  clock_.Advance(2 * kMinute);
  ASSERT_OK(store->CollectGarbage());
  EXPECT_EQ(store->EstimateNumStates(), 0u);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(GetOrDie(*store, {"api", absl::StrCat("k", i)}), std::nullopt) << i;
  }
}

}  // namespace
}  // namespace ratelimit
