// A replica's name on a board (NewReplicaName): new with each call, whatever the host, and free
// of the whitespace that separates a record's fields.
#include "storage/replica_board.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

TEST(ReplicaBoardTest, EachNameIsNewAndNamesTheHostAndTheProcess) {
  const std::string first = NewReplicaName();
  const std::string second = NewReplicaName();
  EXPECT_NE(first, second);
  EXPECT_THAT(first, ::testing::HasSubstr(absl::StrCat("-", getpid(), "-")));
  EXPECT_EQ(first.find_first_of(" \t\r\n"), std::string::npos) << first;
  // Ends with 64 random bits as 16 hex digits.
  const std::string bits = first.substr(first.rfind('-') + 1);
  EXPECT_EQ(bits.size(), 16u) << first;
  EXPECT_EQ(bits.find_first_not_of("0123456789abcdef"), std::string::npos) << first;
}

}  // namespace
}  // namespace ratelimit
