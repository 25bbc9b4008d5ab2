// The replica board in Redis (storage/redis/redis_replica_board.h), on the shared test cluster,
// against the board contract (tests/storage/replica_board_contract.h); a group's keys share a
// slot whatever its name.
#include "storage/redis/redis_replica_board.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_slot.h"
#include "tests/storage/replica_board_contract.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's helpers

class RedisReplicaBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto target = StartRedisTestTarget(RedisTopology::kCluster);
    ASSERT_OK(target);
    target_ = *std::move(target);
    auto store = OpenRedisTestStore(target_, nullptr);
    ASSERT_OK(store);
    store_ = *std::move(store);
    board_ = store_->replica_board();
    ASSERT_NE(board_, nullptr);
  }

  RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> store_;
  ReplicaBoard* board_ = nullptr;
};

TEST_F(RedisReplicaBoardTest, RecordsAreReadFreshByTheLeaderOrOnRequest) {
  ExpectRecordsAreReadFreshByTheLeaderOrOnRequest(*board_, "records");
}

TEST_F(RedisReplicaBoardTest, OneLeadAtATime) { ExpectOneLeadAtATime(*board_, "lead"); }

TEST_F(RedisReplicaBoardTest, ALeadNeedsNoRecord) {
  ExpectOneLeadAtATime(*board_, "turn", /*with_records=*/false);
}

TEST_F(RedisReplicaBoardTest, DecisionsAreCompareAndSet) {
  ExpectDecisionsAreCompareAndSet(*board_, "decide");
}

TEST_F(RedisReplicaBoardTest, GroupsAreApart) { ExpectGroupsAreApart(*board_, "apart"); }

TEST_F(RedisReplicaBoardTest, AGroupsKeysShareOneSlotWhateverItsName) {
  RedisReplicaBoard board(target_.key_prefix, nullptr);
  for (const std::string group : {"rlqs:4:edge:6:tenant1:a", "{x}y", "}{", ""}) {
    const int slot = redis::KeySlot(board.KeyOf(group, "records"));
    EXPECT_EQ(redis::KeySlot(board.KeyOf(group, "lead")), slot) << group;
    EXPECT_EQ(redis::KeySlot(board.KeyOf(group, "decision")), slot) << group;
  }
}

}  // namespace
}  // namespace ratelimit
