// The in-process replica board against the board contract (tests/storage/replica_board_contract.h)
// and its own forgetting of groups nobody writes.
#include "storage/memory/memory_replica_board.h"

#include "gtest/gtest.h"
#include "tests/storage/replica_board_contract.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's helpers

TEST(MemoryReplicaBoardTest, RecordsAreReadFreshByTheLeaderOrOnRequest) {
  MemoryReplicaBoard board;
  ExpectRecordsAreReadFreshByTheLeaderOrOnRequest(board, "g");
}

TEST(MemoryReplicaBoardTest, OneLeadAtATime) {
  MemoryReplicaBoard board;
  ExpectOneLeadAtATime(board, "g");
}

TEST(MemoryReplicaBoardTest, ALeadNeedsNoRecord) {
  MemoryReplicaBoard board;
  ExpectOneLeadAtATime(board, "g", /*with_records=*/false);
}

TEST(MemoryReplicaBoardTest, DecisionsAreCompareAndSet) {
  MemoryReplicaBoard board;
  ExpectDecisionsAreCompareAndSet(board, "g");
}

TEST(MemoryReplicaBoardTest, GroupsAreApart) {
  MemoryReplicaBoard board;
  ExpectGroupsAreApart(board, "");
}

TEST(MemoryReplicaBoardTest, AGroupNobodyWritesIsForgotten) {
  MemoryReplicaBoard board;
  ASSERT_OK(board.Sync(BoardWrite("g", "a", "r", kBoardT0)));
  ASSERT_OK(board.Decide("g", 0, "d", kBoardKeep));
  BoardSyncRequest later = BoardWrite("other", "b", "r", kBoardT0 + kBoardKeep + 1);
  ASSERT_OK(board.Sync(later));
  later.group = "g";
  later.record.clear();
  later.read_records = true;
  absl::StatusOr<BoardSyncReply> r = board.Sync(later);
  ASSERT_OK(r);
  EXPECT_EQ(r->version, 0u);
  EXPECT_TRUE(r->records.empty());
}

}  // namespace
}  // namespace ratelimit
