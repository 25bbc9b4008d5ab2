// RocksDbInfoLog: RocksDB's LOG written so that a full disk drops lines instead of aborting the
// process, says how many it dropped, and stays within its size.
#include "storage/rocksdb/rocksdb_info_log.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "storage/file_util.h"
#include "tests/support/faulty_file_system.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FaultyFileSystem;
using ::ratelimit::testing::TempDir;

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  return text.ok() ? *text : std::string();
}

TEST(RocksDbInfoLogTest, AFullDiskDropsLinesCountsThemAndTheLogGoesOn) {
  TempDir dir;
  auto faulty = std::make_shared<FaultyFileSystem>();
  std::shared_ptr<RocksDbInfoLog> log = RocksDbInfoLog::Open(faulty, dir.path());
  rocksdb::Warn(log.get(), "before %d", 1);
  faulty->SetFull(true);
  for (int i = 0; i < 100; ++i) rocksdb::Warn(log.get(), "during %d", i);  // never aborts
  EXPECT_EQ(log->dropped(), 100u);
  faulty->SetFull(false);
  rocksdb::Warn(log.get(), "after %d", 2);
  const std::string text = Read(dir.File("LOG"));
  EXPECT_NE(text.find("before 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("during"), std::string::npos) << text;
  const size_t lost = text.find("(100 info log lines lost: the disk refused them)\n");
  const size_t after = text.find("after 2\n");
  ASSERT_NE(lost, std::string::npos) << text;
  EXPECT_LT(lost, after);
}

TEST(RocksDbInfoLogTest, ReopeningKeepsThePreviousLogAsLogOld) {
  TempDir dir;
  auto fs = rocksdb::FileSystem::Default();
  rocksdb::Info(RocksDbInfoLog::Open(fs, dir.path()).get(), "first run");
  rocksdb::Info(RocksDbInfoLog::Open(fs, dir.path()).get(), "second run");
  EXPECT_NE(Read(dir.File("LOG.old")).find("first run"), std::string::npos);
  EXPECT_NE(Read(dir.File("LOG")).find("second run"), std::string::npos);
  EXPECT_EQ(Read(dir.File("LOG")).find("first run"), std::string::npos);
}

TEST(RocksDbInfoLogTest, TheLogStaysWithinItsSize) {
  TempDir dir;
  std::shared_ptr<RocksDbInfoLog> log =
      RocksDbInfoLog::Open(rocksdb::FileSystem::Default(), dir.path(), /*max_bytes=*/4096);
  const std::string filler(100, 'x');
  for (int i = 0; i < 1000; ++i) rocksdb::Info(log.get(), "%d %s", i, filler.c_str());
  EXPECT_LE(std::filesystem::file_size(dir.File("LOG")), 4096u);
  EXPECT_LE(std::filesystem::file_size(dir.File("LOG.old")), 4096u);
  EXPECT_NE(Read(dir.File("LOG")).find("999 xxx"), std::string::npos);  // the newest lines
  EXPECT_EQ(log->dropped(), 0u);
}

}  // namespace
}  // namespace ratelimit
