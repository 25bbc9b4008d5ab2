#include "storage/file_util.h"

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;

TEST(FileUtilTest, WritesAtomicallyAndReadsBackEveryByte) {
  TempDir dir;
  const std::string path = dir.File("f");
  const std::string bytes("a\0b\nc", 5);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  EXPECT_EQ(*ReadFileToString(path), bytes);
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());  // replaces, never appends
  EXPECT_EQ(*ReadFileToString(path), "new");
  EXPECT_FALSE(ReadFileToString(path + ".tmp").ok());  // the temporary file is renamed away
}

// A directory opens as a stream that reads as nothing: it must not read as an empty file.
TEST(FileUtilTest, ADirectoryIsNotReadAsAnEmptyFile) {
  TempDir dir;
  absl::StatusOr<std::string> read = ReadFileToString(dir.path());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition) << read.status();
  EXPECT_NE(read.status().message().find("is a directory"), std::string::npos) << read.status();
}

TEST(FileUtilTest, MissingFileIsNotFoundAndUnwritableDirectoryAnError) {
  TempDir dir;
  EXPECT_EQ(ReadFileToString(dir.File("missing")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(WriteFileAtomically(dir.File("no/such/dir/f"), "x").ok());
}

}  // namespace
}  // namespace ratelimit
