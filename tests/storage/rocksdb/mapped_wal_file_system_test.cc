// The WAL written through a shared memory mapping (storage/mapped_wal_file_system.h): no
// write(2) per write group, a crash image that recovers every acknowledged state under strict
// recovery, records across chunk boundaries, and a full disk met at the probe or when the
// reserved space runs out, never as a crash and never losing an acknowledged write.

#include "storage/rocksdb/mapped_wal_file_system.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/file_system.h"
#include "storage/file_util.h"
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
using ::ratelimit::testing::Put;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WalRecordBytes;

constexpr size_t kPage = 4096;

// Counts the appends RocksDB (or the mapping above it) makes to WAL files of the real file
// system: with a write(2) per group, one per group.
class CountingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  CountingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "CountingFileSystem"; }
  int64_t wal_appends() const { return wal_appends_.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, &file, dbg);
    if (!s.ok()) return s;
    if (MappedWalFileSystem::IsWal(fname)) {
      *result = std::make_unique<File>(std::move(file), wal_appends_);
    } else {
      *result = std::move(file);
    }
    return s;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, std::atomic<int64_t>& appends)
        : FSWritableFileOwnerWrapper(std::move(file)), appends_(appends) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      appends_.fetch_add(1);
      return target()->Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      appends_.fetch_add(1);
      return target()->Append(data, o, info, dbg);
    }

   private:
    std::atomic<int64_t>& appends_;
  };

  std::atomic<int64_t> wal_appends_{0};
};

// The file's bytes; a file that cannot be read fails the test.
std::string ReadAll(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.value_or("");
}

class MappedWalTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> OpenStatus(
      const std::string& path, std::shared_ptr<rocksdb::FileSystem> fs = nullptr,
      bool map_wal = true, size_t chunk = MappedWalFileSystem::kDefaultChunkBytes) {
    RocksDbStateStoreOptions o;
    o.path = path;
    o.clock = &clock_;
    o.file_system = std::move(fs);
    o.map_wal = map_wal;
    o.wal_map_chunk_bytes = chunk;
    return RocksDbStateStore::Open(o);
  }
  std::unique_ptr<RocksDbStateStore> Open(const std::string& path,
                                          std::shared_ptr<rocksdb::FileSystem> fs = nullptr,
                                          bool map_wal = true,
                                          size_t chunk = MappedWalFileSystem::kDefaultChunkBytes) {
    auto opened = OpenStatus(path, std::move(fs), map_wal, chunk);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }
  // A copy of the live directory `from`: what a kill -9 leaves (the store is still open).
  std::string CrashImage(const std::string& from) {
    const std::string to = absl::StrCat(dir_.path(), "/crash", ++crashes_);
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  }
  State StateFor(int i) const { return State{double(i), i, clock_.NowMicros() + kMinute + i}; }

  TempDir dir_;
  FakeClock clock_;
  int crashes_ = 0;
};

TEST_F(MappedWalTest, WriteGroupsReachTheWalWithoutAnAppendEach) {
  constexpr int kWrites = 1000;
  for (const bool mapped : {false, true}) {
    SCOPED_TRACE(mapped ? "mapped" : "write(2)");
    auto counting = std::make_shared<CountingFileSystem>();
    const std::string path = absl::StrCat(dir_.path(), "/db", mapped);
    auto store = Open(path, counting, mapped);
    ASSERT_NE(store, nullptr);
    const int64_t before = counting->wal_appends();
    for (int i = 0; i < kWrites; ++i) {
      ASSERT_OK(Put(*store, {"api", absl::StrCat("k", i)}, StateFor(i)));
    }
    const int64_t appends = counting->wal_appends() - before;
    if (mapped) {
      // Only the chunks reserved (1 MiB holds every record here).
      EXPECT_LE(appends, 2);
    } else {
      EXPECT_GE(appends, kWrites);  // the counter sees what a write(2) per group does
    }
    auto recovered = Open(CrashImage(path));
    ASSERT_NE(recovered, nullptr);
    for (int i = 0; i < kWrites; ++i) {
      ASSERT_EQ(GetOrDie(*recovered, {"api", absl::StrCat("k", i)}), StateFor(i)) << i;
    }
  }
}

TEST_F(MappedWalTest, ACrashImageEndsInZerosAndRecoversEveryStateWithoutSalvage) {
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, nullptr, true, 16 * kPage);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 50; ++i) ASSERT_OK(Put(*store, {"api", absl::StrCat("k", i)}, StateFor(i)));
  const std::string crashed = CrashImage(path);
  const std::string wal = NewestWal(crashed);
  ASSERT_FALSE(wal.empty());
  const uint64_t size = fs::file_size(wal);
  EXPECT_EQ(size % (16 * kPage), 0u) << size;    // whole chunks
  EXPECT_LT(WalRecordBytes(wal), size) << size;  // ending in zeros

  auto recovered = Open(crashed);  // strict recovery (kAbsoluteConsistency)
  ASSERT_NE(recovered, nullptr);
  EXPECT_FALSE(recovered->open_report().salvaged);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(GetOrDie(*recovered, {"api", absl::StrCat("k", i)}), StateFor(i)) << i;
  }
  // And the recovered store writes on, into a WAL of its own.
  ASSERT_OK(Put(*recovered, {"api", "after"}, StateFor(99)));
  ASSERT_OK(recovered->Close());
  auto reopened = Open(crashed);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(GetOrDie(*reopened, {"api", "after"}), StateFor(99));
}

// A kill while a write group's record is being copied into the mapping: the crash image taken
// at the last instant before the append's final stores (every other byte of it copied) opens
// under strict recovery, without salvage, with every earlier write and without the torn one.
// Taken at appends that start a WAL, that start in a block's last bytes (the record begins in
// the next block) and that cross into the next block (a record in two fragments).
TEST_F(MappedWalTest, AKillWhileARecordIsCopiedLeavesItAbsentNotCorrupt) {
  constexpr uint64_t kBlock = 32768;
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, nullptr, true, 16 * kPage);
  ASSERT_NE(store, nullptr);
  int puts = 0;  // done; the one in flight during a hook is number `puts`
  std::vector<std::string> keys;
  uint64_t last_end = 0;
  struct Image {
    std::string dir;
    int torn;  // the put whose append was torn
  };
  std::vector<Image> images;
  bool trailer = false, crossing = false;
  std::function<void(uint64_t, uint64_t)> hook = [&](uint64_t begin, uint64_t end) {
    last_end = end;
    const bool starts_in_trailer = kBlock - begin % kBlock < 7;
    const bool crosses = begin / kBlock != (end - 1) / kBlock && !starts_in_trailer;
    if (puts < 2 || (starts_in_trailer && !trailer) || (crosses && !crossing)) {
      images.push_back(Image{CrashImage(path), puts});
    }
    trailer = trailer || starts_in_trailer;
    crossing = crossing || crosses;
  };
  MappedWalFileSystem::SetBeforeCommitHookForTesting(&hook);
  // Keys whose lengths steer a record to end 3 bytes before a block's end, so that the next
  // starts in the next block.
  size_t fixed = 0;  // a record's bytes besides its key, learnt from the last put
  while (!(trailer && crossing) && puts < 3000) {
    const uint64_t left = kBlock - last_end % kBlock;
    size_t key_bytes = 100;
    if (fixed > 0 && left >= fixed + 4 && left <= fixed + 3 + 120) key_bytes = left - fixed - 3;
    const std::string key = absl::StrCat(std::string(key_bytes - 4, 'k'), 1000 + puts % 9000);
    keys.push_back(key);
    const uint64_t before = last_end;
    const absl::Status put = Put(*store, {"api", key}, StateFor(puts));
    if (!put.ok()) break;
    if (before > 0 && last_end > before) fixed = last_end - before - key.size();
    ++puts;
  }
  MappedWalFileSystem::SetBeforeCommitHookForTesting(nullptr);
  ASSERT_TRUE(trailer && crossing) << puts;
  ASSERT_EQ(images.size(), 4u);
  for (const Image& image : images) {
    SCOPED_TRACE(absl::StrCat("torn put ", image.torn));
    auto recovered = Open(image.dir);  // strict recovery (kAbsoluteConsistency)
    ASSERT_NE(recovered, nullptr);
    EXPECT_FALSE(recovered->open_report().salvaged);
    for (int i = 0; i < image.torn; ++i) {
      ASSERT_EQ(GetOrDie(*recovered, {"api", keys[i]}), StateFor(i)) << i;
    }
    EXPECT_EQ(GetOrDie(*recovered, {"api", keys[image.torn]}), std::nullopt);
  }
}

TEST_F(MappedWalTest, ACleanCloseTruncatesTheWalToItsRecords) {
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, nullptr, true, 16 * kPage);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 50; ++i) ASSERT_OK(Put(*store, {"api", absl::StrCat("k", i)}, StateFor(i)));
  const std::string live_wal = NewestWal(path);
  ASSERT_EQ(fs::file_size(live_wal), 16 * kPage);
  ASSERT_OK(store->Close());
  if (fs::exists(live_wal)) {
    const uint64_t size = fs::file_size(live_wal);
    EXPECT_GT(size, 0u);
    EXPECT_LT(size, 16 * kPage);
    // At most the zero bytes the last record's own value ends in.
    EXPECT_LE(size - WalRecordBytes(live_wal), 16u);
  }
  auto reopened = Open(path);
  ASSERT_NE(reopened, nullptr);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(GetOrDie(*reopened, {"api", absl::StrCat("k", i)}), StateFor(i)) << i;
  }
}

TEST_F(MappedWalTest, RecordsAcrossChunkBoundariesAndLargerThanAChunkRecover) {
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, nullptr, true, kPage);  // the smallest chunk: one page
  ASSERT_NE(store, nullptr);
  // Small records straddle chunk boundaries at every offset modulo the page.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_OK(Put(*store, {"api", absl::StrCat("k", i)}, StateFor(i)));
  }
  // One write group of 200 keys of 100 bytes: a record of several pages.
  std::vector<StateKey> keys;
  for (int i = 0; i < 200; ++i) keys.push_back({"api", absl::StrCat(std::string(96, 'x'), i)});
  ASSERT_OK(store->Update(keys, [&](auto, absl::Span<std::optional<State>> w) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = StateFor(static_cast<int>(i));
    return absl::OkStatus();
  }));
  ASSERT_OK(Put(*store, {"api", "last"}, StateFor(7)));

  auto recovered = Open(CrashImage(path));
  ASSERT_NE(recovered, nullptr);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(GetOrDie(*recovered, {"api", absl::StrCat("k", i)}), StateFor(i)) << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(GetOrDie(*recovered, keys[i]), StateFor(static_cast<int>(i))) << i;
  }
  EXPECT_EQ(GetOrDie(*recovered, {"api", "last"}), StateFor(7));
}

TEST_F(MappedWalTest, TheFileSystemWritesWhatWasAppendedAcrossChunks) {
  const std::string file = dir_.path() + "/000001.log";
  MappedWalFileSystem mapped(rocksdb::FileSystem::Default(), kPage);
  std::unique_ptr<rocksdb::FSWritableFile> w;
  ASSERT_TRUE(mapped.NewWritableFile(file, rocksdb::FileOptions(), &w, nullptr).ok());
  EXPECT_EQ(mapped.mapped_files(), 1u);
  std::string expected;
  for (int i = 0; i < 300; ++i) {
    const std::string piece = absl::StrCat("record-", i, std::string(i % 37, 'a' + i % 26), ";");
    ASSERT_TRUE(w->Append(piece, rocksdb::IOOptions(), nullptr).ok());
    expected += piece;
  }
  const std::string big(3 * kPage + 5, 'B');  // spans four chunks
  ASSERT_TRUE(w->Append(big, rocksdb::IOOptions(), nullptr).ok());
  expected += big;
  EXPECT_EQ(w->GetFileSize(rocksdb::IOOptions(), nullptr), expected.size());
  // Before the close, the file holds the bytes (another process reads them from the page
  // cache) followed by zeros up to the last chunk.
  const std::string open_bytes = ReadAll(file);
  ASSERT_EQ(open_bytes.size() % kPage, 0u);
  EXPECT_EQ(open_bytes.substr(0, expected.size()), expected);
  EXPECT_EQ(open_bytes.find_first_not_of('\0', expected.size()), std::string::npos);
  ASSERT_TRUE(w->Sync(rocksdb::IOOptions(), nullptr).ok());
  // Truncate forgets bytes and zeroes them.
  ASSERT_TRUE(w->Truncate(expected.size() - 5, rocksdb::IOOptions(), nullptr).ok());
  expected.resize(expected.size() - 5);
  ASSERT_TRUE(w->Close(rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(ReadAll(file), expected);

  // Files other than WAL files pass through unmapped.
  std::unique_ptr<rocksdb::FSWritableFile> other;
  ASSERT_TRUE(mapped
                  .NewWritableFile(dir_.path() + "/MANIFEST-000001", rocksdb::FileOptions(), &other,
                                   nullptr)
                  .ok());
  ASSERT_TRUE(other->Append("abc", rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(other->Close(rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(ReadAll(dir_.path() + "/MANIFEST-000001"), "abc");
  EXPECT_EQ(mapped.mapped_files(), 1u);
}

// A chunk written to its end is unmapped (its pages' writeback then touches no page table of
// ours); syncs, truncation back into it and the bytes read are as if it were still mapped.
TEST_F(MappedWalTest, ChunksWrittenToTheirEndAreUnmapped) {
  const std::string file = dir_.path() + "/000002.log";
  MappedWalFileSystem mapped(rocksdb::FileSystem::Default(), kPage);
  std::unique_ptr<rocksdb::FSWritableFile> w;
  ASSERT_TRUE(mapped.NewWritableFile(file, rocksdb::FileOptions(), &w, nullptr).ok());
  std::string expected;
  for (int i = 0; i < 40; ++i) {
    const std::string piece(kPage / 2 + 100 + i, static_cast<char>('a' + i % 26));
    ASSERT_TRUE(w->Append(piece, rocksdb::IOOptions(), nullptr).ok());
    expected += piece;
    // Only the chunk the next append goes to stays mapped.
    EXPECT_EQ(mapped.mapped_bytes(), static_cast<int64_t>(kPage)) << i;
  }
  ASSERT_GT(expected.size(), 20 * kPage);
  EXPECT_EQ(ReadAll(file).substr(0, expected.size()), expected);
  ASSERT_TRUE(w->Sync(rocksdb::IOOptions(), nullptr).ok());  // over unmapped chunks
  // Back into an unmapped chunk: it is mapped again, the bytes after are zeros, appends go on.
  const size_t back = 3 * kPage + 17;
  ASSERT_TRUE(w->Truncate(back, rocksdb::IOOptions(), nullptr).ok());
  expected.resize(back);
  const std::string open_bytes = ReadAll(file);
  EXPECT_EQ(open_bytes.substr(0, back), expected);
  EXPECT_EQ(open_bytes.find_first_not_of('\0', back), std::string::npos);
  ASSERT_TRUE(w->Append("tail", rocksdb::IOOptions(), nullptr).ok());
  expected += "tail";
  ASSERT_TRUE(w->Sync(rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(w->Close(rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(mapped.mapped_bytes(), 0);
  EXPECT_EQ(ReadAll(file), expected);
}

// Without the probe's own check of the disk, the first write after the disk fills would be
// acknowledged into the reserved space.
TEST_F(MappedWalTest, TheHealthProbeFindsAFullDiskBeforeTheReservedSpaceRunsOut) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, faulty);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(Put(*store, {"api", "before"}, StateFor(1)));
  ASSERT_OK(store->Health());
  faulty->SetFull(true);
  EXPECT_EQ(store->Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Put(*store, {"api", "during"}, StateFor(2)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->Health().code(), absl::StatusCode::kUnavailable);  // still full
  faulty->SetFull(false);
  ASSERT_TRUE(Eventually([&] { return store->Health().ok(); }));
  ASSERT_OK(Put(*store, {"api", "after"}, StateFor(3)));
  ASSERT_OK(store->Close());
  store = Open(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetOrDie(*store, {"api", "before"}), StateFor(1));
  EXPECT_EQ(GetOrDie(*store, {"api", "during"}), std::nullopt);
  EXPECT_EQ(GetOrDie(*store, {"api", "after"}), StateFor(3));
}

TEST_F(MappedWalTest, WithoutAProbeWritesStopWhenTheReservedSpaceRunsOutAndLoseNothing) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  const std::string path = dir_.path() + "/db";
  auto store = Open(path, faulty, true, 4 * kPage);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(Put(*store, {"api", "before"}, StateFor(0)));
  faulty->SetFull(true);
  // Writes go on into the chunk reserved before the disk filled; the one that needs a new
  // chunk fails, and every later one too.
  std::vector<int> acknowledged;
  int failed_at = -1;
  for (int i = 1; i < 10000 && failed_at < 0; ++i) {
    absl::Status s = Put(*store, {"api", absl::StrCat("k", i)}, StateFor(i));
    if (s.ok()) {
      acknowledged.push_back(i);
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      failed_at = i;
    }
  }
  ASSERT_GT(failed_at, 0) << "the reserved space never ran out";
  EXPECT_LT(acknowledged.size(), 4 * kPage / 20);  // at most what 4 pages hold
  EXPECT_GE(faulty->refused_wal_writes(), 1);
  EXPECT_EQ(Put(*store, {"api", "later"}, StateFor(1)).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(store->Health().ok());

  // A crash now loses nothing acknowledged, and the refused writes never appear. The image is
  // taken while the disk is still full: once space returns, RocksDB's background recovery starts
  // replacing files, and a copy made meanwhile could miss one that it deletes.
  const std::string image = CrashImage(path);
  faulty->SetFull(false);
  auto recovered = Open(image);
  ASSERT_NE(recovered, nullptr);
  EXPECT_EQ(GetOrDie(*recovered, {"api", "before"}), StateFor(0));
  for (int i : acknowledged) {
    ASSERT_EQ(GetOrDie(*recovered, {"api", absl::StrCat("k", i)}), StateFor(i)) << i;
  }
  EXPECT_EQ(GetOrDie(*recovered, {"api", absl::StrCat("k", failed_at)}), std::nullopt);
  EXPECT_EQ(GetOrDie(*recovered, {"api", "later"}), std::nullopt);

  // The live store resumes once space returns.
  ASSERT_TRUE(Eventually([&] { return store->Health().ok(); }));
  ASSERT_OK(Put(*store, {"api", "after"}, StateFor(5)));
  EXPECT_EQ(GetOrDie(*store, {"api", absl::StrCat("k", acknowledged.back())}),
            StateFor(acknowledged.back()));
}

TEST_F(MappedWalTest, SyncedWritesThroughTheMappingRecover) {
  RocksDbStateStoreOptions o;
  o.path = dir_.path() + "/db";
  o.clock = &clock_;
  o.sync = true;
  o.wal_map_chunk_bytes = kPage;
  auto store = RocksDbStateStore::Open(o);
  ASSERT_OK(store);
  for (int i = 0; i < 200; ++i) {
    ASSERT_OK(Put(**store, {"api", absl::StrCat("k", i)}, StateFor(i)));
  }
  auto recovered = Open(CrashImage(o.path));
  ASSERT_NE(recovered, nullptr);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(GetOrDie(*recovered, {"api", absl::StrCat("k", i)}), StateFor(i)) << i;
  }
}

}  // namespace
}  // namespace ratelimit
