// The hop that finishes calls answered on a store's own thread on one of gRPC's threads, in
// groups (server/grpc_thread_hop.h), and that the server uses it exactly for those calls.
#include "server/grpc_thread_hop.h"

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "grpc/support/time.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;

// A hop whose drains are kept until the test runs them.
struct HeldDrains {
  std::vector<std::function<void()>> drains;
  GrpcThreadHop::Scheduler scheduler() {
    return [this](std::function<void()> drain) { drains.push_back(std::move(drain)); };
  }
};

TEST(GrpcThreadHopTest, TasksPostedBeforeTheDrainRunsShareOneDrainInOrder) {
  HeldDrains held;
  GrpcThreadHop hop(held.scheduler());
  std::vector<int> ran;
  for (int i = 0; i < 100; ++i) hop.Post([&ran, i] { ran.push_back(i); });
  ASSERT_EQ(held.drains.size(), 1u);
  EXPECT_TRUE(ran.empty());
  held.drains[0]();
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
  EXPECT_EQ(hop.stats().posted, 100u);
  EXPECT_EQ(hop.stats().drains, 1u);
}

TEST(GrpcThreadHopTest, ATaskPostedAfterADrainFinishedSchedulesAnother) {
  HeldDrains held;
  GrpcThreadHop hop(held.scheduler());
  int ran = 0;
  hop.Post([&] { ++ran; });
  held.drains[0]();
  hop.Post([&] { ++ran; });
  hop.Post([&] { ++ran; });
  ASSERT_EQ(held.drains.size(), 2u);
  held.drains[1]();
  EXPECT_EQ(ran, 3);
}

// While a drain runs, tasks posted meanwhile (by its tasks, or by a store thread completing the
// next group) join it: the drain runs until the queue is empty, and no second drain is
// scheduled, so a busy server wakes a gRPC thread once per burst rather than once per group.
TEST(GrpcThreadHopTest, TasksPostedWhileADrainRunsJoinItWithoutAnotherDrain) {
  HeldDrains held;
  GrpcThreadHop hop(held.scheduler());
  std::vector<int> ran;
  hop.Post([&] {
    ran.push_back(1);
    hop.Post([&] {
      ran.push_back(3);
      hop.Post([&] { ran.push_back(4); });
    });
  });
  hop.Post([&] { ran.push_back(2); });
  ASSERT_EQ(held.drains.size(), 1u);
  held.drains[0]();
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(held.drains.size(), 1u);
  EXPECT_EQ(hop.stats().drains, 1u);
  // Once the drain has emptied the queue and returned, the next post schedules a new one.
  hop.Post([&] { ran.push_back(5); });
  ASSERT_EQ(held.drains.size(), 2u);
  held.drains[1]();
  EXPECT_EQ(ran.back(), 5);
}

TEST(GrpcThreadHopTest, TasksRunAsHandlersAndOnlyInsideTheScope) {
  HeldDrains held;
  GrpcThreadHop hop(held.scheduler());
  EXPECT_FALSE(GrpcThreadHop::OnHandlerThread());
  bool inside = false;
  hop.Post([&] { inside = GrpcThreadHop::OnHandlerThread(); });
  held.drains[0]();
  EXPECT_TRUE(inside);
  EXPECT_FALSE(GrpcThreadHop::OnHandlerThread());
  {
    GrpcThreadHop::HandlerScope outer;
    {
      GrpcThreadHop::HandlerScope nested;
      EXPECT_TRUE(GrpcThreadHop::OnHandlerThread());
    }
    EXPECT_TRUE(GrpcThreadHop::OnHandlerThread());
  }
  EXPECT_FALSE(GrpcThreadHop::OnHandlerThread());
}

TEST(GrpcThreadHopTest, TheProcessHopRunsTasksOnAnotherThread) {
  GrpcThreadHop& hop = GrpcThreadHop::Default();
  constexpr int kTasks = 50;
  std::vector<std::thread::id> ran_on(kTasks);
  std::vector<bool> as_handler(kTasks);
  absl::Notification all_ran;
  int ran = 0;  // touched by the drains only, which run one task at a time in order
  std::thread poster([&] {
    for (int i = 0; i < kTasks; ++i) {
      hop.Post([&, i] {
        ran_on[i] = std::this_thread::get_id();
        as_handler[i] = GrpcThreadHop::OnHandlerThread();
        if (++ran == kTasks) all_ran.Notify();
      });
    }
  });
  const std::thread::id poster_id = poster.get_id();
  poster.join();
  ASSERT_TRUE(all_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  for (int i = 0; i < kTasks; ++i) {
    EXPECT_NE(ran_on[i], poster_id) << i;
    EXPECT_NE(ran_on[i], std::this_thread::get_id()) << i;
    EXPECT_TRUE(as_handler[i]) << i;
  }
}

// Milliseconds of gpr_now(GPR_CLOCK_MONOTONIC), the clock gRPC's timers count in.
int64_t GrpcMonotonicMillis() {
  const gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
  return int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1000000;
}

// gRPC's timers count whole milliseconds and round a deadline up, so a drain run by a timer
// starts in a later millisecond than the one it was posted in: under light load every reply
// would wait up to a millisecond for the next tick. The process's hop asks gRPC to run the drain
// at once. Of 100 hops, one after another, at least one must run its task within the
// millisecond it was posted in. That is impossible through a timer, and holds unless every one
// of the 100 hops takes more than a millisecond.
TEST(GrpcThreadHopTest, TheProcessHopDoesNotWaitForATimerTick) {
  GrpcThreadHop& hop = GrpcThreadHop::Default();
  int within_the_millisecond = 0;
  for (int i = 0; i < 100; ++i) {
    absl::Notification ran;
    int64_t ran_ms = 0;
    const int64_t posted_ms = GrpcMonotonicMillis();
    hop.Post([&] {
      ran_ms = GrpcMonotonicMillis();
      ran.Notify();
    });
    ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
    if (ran_ms == posted_ms) ++within_the_millisecond;
  }
  EXPECT_GT(within_the_millisecond, 0);
}

constexpr char kLimits[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 1000
    period: 1s
)";

// A handler's thread writes the WAL group of its Consume itself when the RocksDB store is idle
// (StateStore::WritesHereScope) and finishes the call inline: one call after another, nothing
// goes through the hop (it carries only the replies of decisions that joined a group another
// thread wrote). The in-memory store answers before the handler returns as well.
TEST(GrpcThreadHopServerTest, ConsumesOnAnIdleRocksDbStoreAreFinishedInlineWithoutTheHop) {
  TempDir dir;
  FakeClock clock;
  auto started = StartServerAndClient(ServerOptions{}, dir, kLimits, clock);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t before = GrpcThreadHop::Default().stats().posted;
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) {
    auto r = started->client->Consume(MakeRequest("api", "k"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->allowed());
  }
  EXPECT_EQ(GrpcThreadHop::Default().stats().posted - before, 0u);
  EXPECT_EQ(testing::CheckedBalance(*started->client, "api", "k"), 1000 - kCalls);
}

TEST(GrpcThreadHopServerTest, ConsumesAnsweredInlineAreNotPosted) {
  TempDir dir;
  FakeClock clock;
  auto started = StartServerAndClient(ServerOptions{}, dir, kLimits, clock,
                                      std::make_unique<MemoryStateStore>());
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t before = GrpcThreadHop::Default().stats().posted;
  for (int i = 0; i < 20; ++i) {
    auto r = started->client->Consume(MakeRequest("api", "k"));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(GrpcThreadHop::Default().stats().posted, before);
}

}  // namespace
}  // namespace ratelimit
