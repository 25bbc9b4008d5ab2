// WatchedConfig on its own: a toy configuration (one number per file) read from a temp dir,
// polled by hand.
#include "server/config/watched_config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

struct Number {
  int value = 0;
};

// A watcher of `path` that counts its reads and records every observed outcome.
class NumberFile {
 public:
  explicit NumberFile(std::string path)
      : path_(std::move(path)),
        watcher_(Spec(), snapshot_, absl::Hours(1),
                 [this](const absl::Status& s) { outcomes_.push_back(s); }) {}

  WatchedConfig<Number, std::string>& watcher() { return watcher_; }
  int value() const { return snapshot_.Current()->value; }
  int reads() const { return reads_; }
  const std::vector<absl::Status>& outcomes() const { return outcomes_; }

 private:
  WatchedConfigSpec<Number, std::string> Spec() {
    WatchedConfigSpec<Number, std::string> spec;
    spec.source_field = "file";
    spec.source_name = path_;
    spec.read = [this]() -> absl::StatusOr<std::string> {
      ++reads_;
      if (std::filesystem::is_directory(path_)) {
        return absl::FailedPreconditionError(absl::StrCat(path_, " is a directory"));
      }
      std::ifstream in(path_, std::ios::binary);
      if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path_));
      std::stringstream buf;
      buf << in.rdbuf();
      return buf.str();
    };
    spec.parse = [](const std::string& bytes) -> absl::StatusOr<Number> {
      Number n;
      if (!absl::SimpleAtoi(bytes, &n.value)) return absl::InvalidArgumentError("not a number");
      return n;
    };
    spec.reload_failed_message = "number reload failed";
    spec.missing_message = "number file missing";
    return spec;
  }

  const std::string path_;
  int reads_ = 0;
  std::vector<absl::Status> outcomes_;
  ConfigSnapshot<Number> snapshot_;
  WatchedConfig<Number, std::string> watcher_;
};

int CountLines(const std::string& text, absl::string_view needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, needle);
  return n;
}

TEST(ConfigSnapshotTest, StartsDefaultAndSnapshotsSurviveReplace) {
  ConfigSnapshot<Number> snapshot;
  std::shared_ptr<const Number> before = snapshot.Current();
  EXPECT_EQ(before->value, 0);
  snapshot.Replace(std::make_shared<const Number>(Number{7}));
  EXPECT_EQ(before->value, 0);
  EXPECT_EQ(snapshot.Current()->value, 7);
}

TEST(WatchedConfigTest, LoadReadsOnceAndFailsOnAMissingSource) {
  TempDir dir;
  NumberFile missing(dir.File("n"));
  EXPECT_EQ(missing.watcher().Load().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.reads(), 1);

  WriteFileAtomically(dir.File("n"), "5");
  NumberFile file(dir.File("n"));
  ASSERT_OK(file.watcher().Load());
  EXPECT_EQ(file.reads(), 1);
  EXPECT_EQ(file.value(), 5);
  EXPECT_TRUE(file.outcomes().empty());  // Load is not a reload
}

TEST(WatchedConfigTest, EachChangeIsDetectedOnceWithOneReadPerPoll) {
  TempDir dir;
  WriteFileAtomically(dir.File("n"), "1");
  NumberFile file(dir.File("n"));
  ASSERT_OK(file.watcher().Load());

  ASSERT_OK(file.watcher().ReloadIfChanged());  // unchanged
  EXPECT_EQ(file.reads(), 2);
  EXPECT_TRUE(file.outcomes().empty());

  WriteFileAtomically(dir.File("n"), "2");
  ASSERT_OK(file.watcher().ReloadIfChanged());
  EXPECT_EQ(file.reads(), 3);  // the changed bytes are parsed, not read a second time
  EXPECT_EQ(file.value(), 2);
  ASSERT_OK(file.watcher().ReloadIfChanged());
  ASSERT_OK(file.watcher().ReloadIfChanged());
  EXPECT_EQ(file.reads(), 5);
  ASSERT_EQ(file.outcomes().size(), 1u);
  EXPECT_TRUE(file.outcomes()[0].ok());
}

TEST(WatchedConfigTest, BadEditKeepsThePreviousConfigAndIsReportedOnce) {
  TempDir dir;
  WriteFileAtomically(dir.File("n"), "1");
  NumberFile file(dir.File("n"));
  ASSERT_OK(file.watcher().Load());

  WriteFileAtomically(dir.File("n"), "one");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(file.watcher().ReloadIfChanged().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_OK(file.watcher().ReloadIfChanged());  // the same bad bytes are not retried
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountLines(err, "ERROR number reload failed"), 1) << err;
  EXPECT_EQ(file.value(), 1);

  WriteFileAtomically(dir.File("n"), "3");
  ASSERT_OK(file.watcher().ReloadIfChanged());
  EXPECT_EQ(file.value(), 3);
  ASSERT_EQ(file.outcomes().size(), 2u);
  EXPECT_EQ(file.outcomes()[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(file.outcomes()[1].ok());
}

TEST(WatchedConfigTest, DeletedSourceKeepsThePreviousConfigWithOneWarning) {
  TempDir dir;
  WriteFileAtomically(dir.File("n"), "4");
  NumberFile file(dir.File("n"));
  ASSERT_OK(file.watcher().Load());

  ASSERT_EQ(std::remove(dir.File("n").c_str()), 0);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) ASSERT_OK(file.watcher().ReloadIfChanged());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountLines(err, "WARNING number file missing"), 1) << err;
  EXPECT_EQ(file.value(), 4);
  EXPECT_TRUE(file.outcomes().empty());

  // Back with the same bytes: nothing to reload. Gone again: warned again.
  WriteFileAtomically(dir.File("n"), "4");
  ASSERT_OK(file.watcher().ReloadIfChanged());
  ASSERT_EQ(std::remove(dir.File("n").c_str()), 0);
  ::testing::internal::CaptureStderr();
  ASSERT_OK(file.watcher().ReloadIfChanged());
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountLines(err, "WARNING number file missing"), 1) << err;
  EXPECT_TRUE(file.outcomes().empty());
}

// A source that is there but cannot be read (a directory where the file was) is a failed reload:
// logged and reported once, the configuration in force kept; not a missing file.
TEST(WatchedConfigTest, AnUnreadableSourceIsAFailedReloadReportedOnce) {
  TempDir dir;
  WriteFileAtomically(dir.File("n"), "4");
  NumberFile file(dir.File("n"));
  ASSERT_OK(file.watcher().Load());
  ASSERT_EQ(std::remove(dir.File("n").c_str()), 0);
  std::filesystem::create_directories(dir.File("n"));
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(file.watcher().ReloadIfChanged().code(), absl::StatusCode::kFailedPrecondition);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountLines(err, "ERROR number reload failed"), 1) << err;
  EXPECT_EQ(CountLines(err, "number file missing"), 0) << err;
  EXPECT_EQ(file.value(), 4);
  ASSERT_EQ(file.outcomes().size(), 1u);
  EXPECT_EQ(file.outcomes()[0].code(), absl::StatusCode::kFailedPrecondition);
  // A directory at start-up fails the load.
  NumberFile fresh(dir.File("n"));
  EXPECT_EQ(fresh.watcher().Load().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(WatchedConfigTest, FailedLoadIsRememberedSoTheSameBytesAreNotRetried) {
  TempDir dir;
  WriteFileAtomically(dir.File("n"), "x");
  NumberFile file(dir.File("n"));
  EXPECT_EQ(file.watcher().Load().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_OK(file.watcher().ReloadIfChanged());
  EXPECT_TRUE(file.outcomes().empty());
  EXPECT_EQ(file.value(), 0);
}

}  // namespace
}  // namespace ratelimit
