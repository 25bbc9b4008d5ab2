// Naming and scheduling the server's worker threads (storage/worker_thread.h).
#include "storage/worker_thread.h"

#include <pthread.h>
#include <sched.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

struct ThreadFacts {
  absl::Status status;
  int policy = -1;
  std::string name;
};

// Runs `set_up` on a fresh thread and reports what the thread looked like afterwards.
template <typename SetUp>
ThreadFacts OnNewThread(SetUp set_up) {
  ThreadFacts facts;
  std::thread t([&] {
    facts.status = set_up();
    facts.policy = sched_getscheduler(0);
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    facts.name = name;
  });
  t.join();
  return facts;
}

TEST(WorkerThreadTest, BatchMovesTheThreadToSchedBatchAndNamesIt) {
  ThreadFacts facts =
      OnNewThread([] { return SetUpWorkerThread("rl-test", WorkerScheduling::kBatch); });
  ASSERT_OK(facts.status);
  EXPECT_EQ(facts.policy, SCHED_BATCH);
  EXPECT_EQ(facts.name, "rl-test");
}

TEST(WorkerThreadTest, DefaultKeepsThePolicyTheThreadHad) {
  const int before = sched_getscheduler(0);
  ThreadFacts facts =
      OnNewThread([] { return SetUpWorkerThread("rl-test", WorkerScheduling::kDefault); });
  ASSERT_OK(facts.status);
  EXPECT_EQ(facts.policy, before);
  EXPECT_NE(facts.policy, SCHED_BATCH);

  // Not reset either: a policy set for the process (chrt) stays.
  ThreadFacts kept = OnNewThread([] {
    sched_param param{};
    if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) {
      return absl::InternalError("sched_setscheduler failed");
    }
    return SetUpWorkerThread("rl-test", WorkerScheduling::kDefault);
  });
  ASSERT_OK(kept.status);
  EXPECT_EQ(kept.policy, SCHED_BATCH);
}

TEST(WorkerThreadTest, LongNamesAreCutToWhatLinuxKeeps) {
  ThreadFacts facts = OnNewThread(
      [] { return SetUpWorkerThread("rl-a-very-long-thread-name", WorkerScheduling::kDefault); });
  ASSERT_OK(facts.status);
  EXPECT_EQ(facts.name, "rl-a-very-long-");
  ThreadFacts named = OnNewThread([] {
    NameWorkerThread("rl-another-long-name");
    return absl::OkStatus();
  });
  EXPECT_EQ(named.name, "rl-another-long");
  EXPECT_EQ(named.policy, sched_getscheduler(0));
}

}  // namespace
}  // namespace ratelimit
