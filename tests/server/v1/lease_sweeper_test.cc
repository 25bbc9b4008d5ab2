// When the leak sweep runs (LeaseSweeper): every turn for a server owning its store; once an
// interval between replicas sharing a board, whichever replicas are left; and a board's or a
// store's error is a failed turn that the next turn recovers from.
#include "server/v1/lease_sweeper.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "storage/memory/memory_replica_board.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using testing::FakeClock;
using testing::kSecond;
using Result = LeaseSweeper::Result;

constexpr int64_t kInterval = 10 * testing::kSecond;

// A sweeper whose passes are counted in `passes`, answering `answer`.
struct Replica {
  Replica(const char* name, ReplicaBoard* board, const Clock& clock)
      : sweeper({kInterval, name}, board, clock, [this]() -> absl::StatusOr<int64_t> {
          ++passes;
          return answer;
        }) {}
  int passes = 0;
  absl::StatusOr<int64_t> answer = 0;
  LeaseSweeper sweeper;
};

TEST(LeaseSweeperTest, WithoutABoardEveryTurnSweeps) {
  FakeClock clock;
  Replica alone("a", nullptr, clock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(alone.sweeper.RunOnce(), Result::kSwept);
  EXPECT_EQ(alone.passes, 3);
  EXPECT_EQ(alone.sweeper.swept(), 3u);
  EXPECT_EQ(alone.sweeper.skipped(), 0u);
}

// Three replicas whose turns come at different points of each interval, in a different order
// each time: one pass an interval between them.
TEST(LeaseSweeperTest, ReplicasSharingABoardSweepOnceAnInterval) {
  FakeClock clock;
  MemoryReplicaBoard board;
  Replica a("a", &board, clock), b("b", &board, clock), c("c", &board, clock);
  const std::vector<std::vector<Replica*>> orders = {{&a, &b, &c}, {&c, &a, &b}, {&b, &c, &a}};
  const int64_t start = clock.NowMicros();
  for (int interval = 0; interval < 9; ++interval) {
    int passes = 0;
    int64_t offset = 0;
    for (Replica* r : orders[interval % 3]) {
      clock.Set(start + interval * kInterval + offset);
      if (r->sweeper.RunOnce() == Result::kSwept) ++passes;
      offset += kInterval / 4;
    }
    EXPECT_EQ(passes, 1) << "interval " << interval;
  }
  EXPECT_EQ(a.passes + b.passes + c.passes, 9);
  EXPECT_EQ(a.sweeper.skipped() + b.sweeper.skipped() + c.sweeper.skipped(), 18u);
}

TEST(LeaseSweeperTest, WhenTheSweepingReplicaStopsAnotherTakesOverWithinTwoIntervals) {
  FakeClock clock;
  MemoryReplicaBoard board;
  Replica a("a", &board, clock), b("b", &board, clock);
  const int64_t start = clock.NowMicros();
  ASSERT_EQ(a.sweeper.RunOnce(), Result::kSwept);
  // a stops here. b's turns come half an interval after a's would.
  clock.Set(start + kInterval / 2);
  EXPECT_EQ(b.sweeper.RunOnce(), Result::kSkipped);  // a's turn is not over
  clock.Set(start + kInterval + kInterval / 2);
  EXPECT_EQ(b.sweeper.RunOnce(), Result::kSwept);
  clock.Set(start + 2 * kInterval + kInterval / 2);
  EXPECT_EQ(b.sweeper.RunOnce(), Result::kSwept);
  EXPECT_EQ(b.passes, 2);
}

// A board that answers every call with an error (Redis unreachable).
class FailingBoard final : public ReplicaBoard {
 public:
  absl::StatusOr<BoardSyncReply> Sync(const BoardSyncRequest&) override {
    return absl::UnavailableError("no Redis primary answers");
  }
  absl::StatusOr<bool> Decide(const std::string&, uint64_t, const std::string&, int64_t) override {
    return absl::UnavailableError("no Redis primary answers");
  }
};

TEST(LeaseSweeperTest, ABoardErrorIsAFailedTurnWithoutAPass) {
  FakeClock clock;
  FailingBoard board;
  Replica r("a", &board, clock);
  EXPECT_EQ(r.sweeper.RunOnce(), Result::kFailed);
  EXPECT_EQ(r.passes, 0);
  EXPECT_EQ(r.sweeper.failed(), 1u);
}

TEST(LeaseSweeperTest, AStoreErrorIsAFailedTurnAndAStoreKeepingNoLeasesIsSkipped) {
  FakeClock clock;
  Replica r("a", nullptr, clock);
  r.answer = absl::UnavailableError("the store is closed");
  EXPECT_EQ(r.sweeper.RunOnce(), Result::kFailed);
  r.answer = absl::UnimplementedError("no leases");
  EXPECT_EQ(r.sweeper.RunOnce(), Result::kSkipped);
  r.answer = 2;
  EXPECT_EQ(r.sweeper.RunOnce(), Result::kSwept);
  EXPECT_EQ(r.sweeper.failed(), 1u);
  EXPECT_EQ(r.sweeper.skipped(), 1u);
  EXPECT_EQ(r.sweeper.swept(), 1u);
}

}  // namespace
}  // namespace ratelimit
