// The recycled first blocks of the parsed calls' arenas (server/serving/arena_blocks.h): a block
// freed is the next one taken on that thread, at most kArenaBlocksKept are kept, other sizes are
// not kept, and a lease call's request and answer fit in the first block.
#include "server/serving/arena_blocks.h"

#include <thread>
#include <vector>

#include "google/protobuf/arena.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {
namespace {

// Empties this thread's list, so that each test starts from none kept.
void DrainKept() {
  std::vector<void*> taken;
  while (ArenaBlocksKeptHere() > 0) taken.push_back(AllocateArenaBlock(kArenaBlockSize));
  for (void* block : taken) ::operator delete(block);
}

TEST(ArenaBlocksTest, ABlockFreedIsTheNextOneTakenOnItsThread) {
  DrainKept();
  void* block = AllocateArenaBlock(kArenaBlockSize);
  FreeArenaBlock(block, kArenaBlockSize);
  EXPECT_EQ(ArenaBlocksKeptHere(), 1u);
  EXPECT_EQ(AllocateArenaBlock(kArenaBlockSize), block);
  EXPECT_EQ(ArenaBlocksKeptHere(), 0u);
  FreeArenaBlock(block, kArenaBlockSize);
}

TEST(ArenaBlocksTest, KeepsAtMostItsBoundAndFreesTheRest) {
  DrainKept();
  std::vector<void*> blocks;
  for (size_t i = 0; i < kArenaBlocksKept + 3; ++i) {
    blocks.push_back(AllocateArenaBlock(kArenaBlockSize));
  }
  for (void* block : blocks) FreeArenaBlock(block, kArenaBlockSize);
  EXPECT_EQ(ArenaBlocksKeptHere(), kArenaBlocksKept);
}

TEST(ArenaBlocksTest, BlocksOfOtherSizesAreNotKept) {
  DrainKept();
  void* big = AllocateArenaBlock(2 * kArenaBlockSize);
  FreeArenaBlock(big, 2 * kArenaBlockSize);
  EXPECT_EQ(ArenaBlocksKeptHere(), 0u);
}

TEST(ArenaBlocksTest, ABlockFreedOnAnotherThreadJoinsThatThreadsList) {
  DrainKept();
  void* block = AllocateArenaBlock(kArenaBlockSize);
  size_t kept_there = 0;
  std::thread other([&] {
    FreeArenaBlock(block, kArenaBlockSize);
    kept_there = ArenaBlocksKeptHere();
  });
  other.join();
  EXPECT_EQ(kept_there, 1u);
  EXPECT_EQ(ArenaBlocksKeptHere(), 0u);
}

// An Acquire's request and answer as the server fills them (a lease with its id, name, key and
// two timestamps, and the limit's result): they fit in the recycled first block, which the
// arena gives back to the thread's list when it is destroyed.
TEST(ArenaBlocksTest, AnAcquiresRequestAndAnswerFitInTheFirstBlock) {
  DrainKept();
  v1::AcquireRequest sent;
  v1::LimitRequest* limit = sent.add_limits();
  limit->set_name("llm_calls");
  limit->set_key("org-7");
  limit->mutable_config()->set_kind(v1::CONCURRENCY);
  limit->mutable_config()->set_capacity(10);
  limit->mutable_config()->mutable_lease_ttl()->set_seconds(30);
  sent.set_request_id("retry-token-0123456789");
  const std::string wire = sent.SerializeAsString();
  {
    google::protobuf::Arena arena(RecycledArenaOptions());
    auto* request = google::protobuf::Arena::CreateMessage<v1::AcquireRequest>(&arena);
    auto* response = google::protobuf::Arena::CreateMessage<v1::AcquireResponse>(&arena);
    ASSERT_TRUE(request->ParseFromString(wire));
    response->set_allowed(true);
    v1::Lease* lease = response->mutable_lease();
    lease->set_id(std::string(32, 'a'));
    lease->set_name("llm_calls");
    lease->set_key("org-7");
    lease->set_count(1);
    lease->mutable_acquired_at()->set_seconds(1'800'000'000);
    lease->mutable_expires_at()->set_seconds(1'800'000'030);
    v1::LimitResult* result = response->add_results();
    result->set_name("llm_calls");
    result->set_key("org-7");
    result->set_allowed(true);
    result->set_value(9);
    result->set_capacity(10);
    EXPECT_EQ(arena.SpaceAllocated(), kArenaBlockSize);
  }
  EXPECT_EQ(ArenaBlocksKeptHere(), 1u);
}

}  // namespace
}  // namespace ratelimit
