// The files of a real ratelimit-server process: an owner-only data directory and RocksDB files,
// a WAL corrupted between runs (refused, unless salvaged), and a data directory on a disk that
// fills under load.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

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

using ::ratelimit::testing::Eventually;
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

// A tmpfs of `size`, mounted for the life of the object (needs root); `error` says why not.
class SmallDisk {
 public:
  SmallDisk(const std::string& path, const std::string& size) : path_(path) {
    fs::create_directories(path);
    if (::geteuid() != 0) {
      error_ = "needs root to mount a small tmpfs";
    } else if (::mount("tmpfs", path.c_str(), "tmpfs", 0,
                       ("size=" + size + ",mode=0700").c_str()) != 0) {
      error_ = absl::StrCat("cannot mount a tmpfs: ", std::strerror(errno));
    }
  }
  ~SmallDisk() {
    if (error_.empty()) ::umount2(path_.c_str(), MNT_DETACH);
  }
  const std::string& error() const { return error_; }

 private:
  const std::string path_;
  std::string error_;
};

// A full disk under sustained load with --failure_policy=open: every answer is failed_open, the
// server neither aborts (RocksDB must never write again through a file writer that failed) nor
// logs a line per request, reports NOT_SERVING, and recovers by itself when space returns.
TEST(ServerFilesTest, AFullDiskUnderLoadWithTheOpenPolicyIsSurvivedAndRecovered) {
  TempDir dir;
  SmallDisk disk(dir.File("disk"), "8m");
  if (!disk.error().empty()) GTEST_SKIP() << disk.error();
  WriteFileAtomically(dir.File("limits.yaml"), kApiLimits);
  WriteFileAtomically(dir.File("disk/ballast"), std::string(2 << 20, 'b'));  // freed later
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("disk/data"), "--limits_file=" + dir.File("limits.yaml"),
       "--failure_policy=open", "--health_probe_interval=100ms"},
      dir.path());
  ASSERT_OK(server);
  const std::string target = (*server)->target();

  // 8 callers consume distinct keys (each a new state) until 20 s after the first failed_open
  // answer, or 120 s in all.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> failed_open{0}, errors{0};
  std::atomic<int64_t> first_failed_open_ms{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      auto client = RateLimitClient::Connect(target);
      for (int64_t i = 0; !stop.load(); ++i) {
        auto r = client->Consume(MakeRequest("api", absl::StrCat("caller", t, "-key", i)));
        if (!r.ok()) {
          errors.fetch_add(1);
          continue;
        }
        if (r->failed_open() && failed_open.fetch_add(1) == 0) {
          first_failed_open_ms.store(absl::ToInt64Milliseconds(absl::Now() - start));
        }
      }
    });
  }
  while (absl::Now() - start < absl::Seconds(120)) {
    const int64_t first = first_failed_open_ms.load();
    if (first > 0 && absl::Now() - start > absl::Milliseconds(first) + absl::Seconds(20)) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  stop.store(true);
  for (std::thread& c : callers) c.join();
  ASSERT_GT(failed_open.load(), 1000) << "the disk never filled";
  EXPECT_EQ(errors.load(), 0) << "every call is answered while the disk is full";

  auto client = RateLimitClient::Connect(target);
  EXPECT_EQ(client->Health().code(), absl::StatusCode::kUnavailable);  // NOT_SERVING
  // Space returns: the server recovers by itself.
  fs::remove(dir.File("disk/ballast"));
  ASSERT_TRUE(Eventually([&] { return client->Health().ok(); }, absl::Seconds(30)));
  auto after = client->Consume(MakeRequest("api", "after"));
  ASSERT_OK(after);
  EXPECT_FALSE(after->failed_open());

  const std::string log = (*server)->Stderr();
  int failure_lines = 0;
  for (size_t at = log.find("store failure"); at != std::string::npos;
       at = log.find("store failure", at + 1)) {
    ++failure_lines;
  }
  EXPECT_LT(failure_lines, 30) << "one line per failed request";
  EXPECT_EQ((*server)->StopWith(SIGTERM), 0) << log;
}

}  // namespace
}  // namespace ratelimit
