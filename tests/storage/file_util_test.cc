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

TEST(FileUtilTest, MissingFileIsNotFoundAndUnwritableDirectoryAnError) {
  TempDir dir;
  EXPECT_EQ(ReadFileToString(dir.File("missing")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(WriteFileAtomically(dir.File("no/such/dir/f"), "x").ok());
}

}  // namespace
}  // namespace ratelimit
