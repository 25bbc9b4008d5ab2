// The files of a real ratelimit-server process: an owner-only data directory and RocksDB files,
// and a WAL corrupted between runs (refused, unless salvaged).
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

namespace fs = std::filesystem;
using ::ratelimit::testing::NewestWal;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WalRecordBytes;
using ::ratelimit::testing::WriteFileAtomically;

using ::ratelimit::testing::kApiLimits;

mode_t Mode(const fs::path& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(ServerFilesTest, DataDirectoryAndRocksDbFilesAreOwnerOnly) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kApiLimits);
  const mode_t old = ::umask(022);  // what a shell usually gives
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--limits_file=" + dir.File("limits.yaml")}, dir.path());
  ::umask(old);
  ASSERT_OK(server);
  auto client = RateLimitClient::Connect((*server)->target());
  for (int i = 0; i < 10; ++i) ASSERT_OK(client->Consume(MakeRequest("api", absl::StrCat(i))));
  ASSERT_EQ((*server)->StopWith(SIGTERM), 0);  // flushes: SSTs exist too

  EXPECT_EQ(Mode(dir.File("data")), 0700u);
  int files = 0, ssts = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.File("data"))) {
    if (!e.is_regular_file()) continue;
    ++files;
    if (e.path().extension() == ".sst") ++ssts;
    EXPECT_EQ(Mode(e.path()) & 077, 0u) << e.path() << " mode " << std::oct << Mode(e.path());
  }
  EXPECT_GT(files, 3);
  EXPECT_GT(ssts, 0);
}

TEST(ServerFilesTest, ACorruptWalRefusesToStartUnlessSalvaged) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kApiLimits);
  const std::vector<std::string> args = {"--data_dir=" + dir.File("data"),
                                         "--limits_file=" + dir.File("limits.yaml")};
  {
    auto server = ServerProcess::Start(args, dir.path());
    ASSERT_OK(server);
    auto client = RateLimitClient::Connect((*server)->target());
    for (int i = 0; i < 50; ++i) ASSERT_OK(client->Consume(MakeRequest("api", absl::StrCat(i))));
    (*server)->StopWith(SIGKILL);  // the decisions are in the WAL only
  }
  const std::string wal = NewestWal(dir.File("data"));
  ASSERT_FALSE(wal.empty());
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff middle = static_cast<std::streamoff>(WalRecordBytes(wal) / 2);
    f.seekp(middle);
    f.write("\xff\x00\xff\x00", 4);
  }
  auto refused = ServerProcess::Start(args, dir.path());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "Corruption")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--salvage_wal")) << refused.status();

  std::vector<std::string> salvage = args;
  salvage.push_back("--salvage_wal");
  auto salvaged = ServerProcess::Start(salvage, dir.path());
  ASSERT_OK(salvaged);
  EXPECT_TRUE(absl::StrContains((*salvaged)->Stderr(), "salvaging")) << (*salvaged)->Stderr();
  EXPECT_TRUE(absl::StrContains((*salvaged)->Stderr(), "lost")) << (*salvaged)->Stderr();
  EXPECT_EQ((*salvaged)->StopWith(SIGTERM), 0);
}

}  // namespace
}  // namespace ratelimit
