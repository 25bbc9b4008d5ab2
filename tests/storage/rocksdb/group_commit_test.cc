// Group commit of the RocksDB store: concurrent decisions share WAL writes without holding their
// keys' locks while they wait, a later decision on a key sees an earlier one before it is written
// (and is answered only after it), a failed write fails every decision queued with it and its
// states are never read again, a key decided many times in one group is written once (its last
// state, which a crash image recovers), and a real server killed with SIGKILL under many concurrent
// callers keeps every acknowledged decision.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/faulty_file_system.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FaultyFileSystem;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
using ::ratelimit::testing::WriteGate;

LimitRequest Request(const std::string& key, double count = 1) {
  LimitRequest r;
  r.name = "gc";
  r.key = key;
  r.config.kind = LimitKind::kTokenBucket;
  r.config.rate = 1;
  r.config.period_us = 3600 * kSecond;  // no refill to speak of during a test
  r.config.capacity = 10;
  r.count = count;
  return r;
}

class GroupCommitTest : public ::testing::Test {
 protected:
  void Open(std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
    RocksDbStateStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    o.file_system = std::move(fs);
    // One lock stripe for every key: decisions that waited for their write under their lock
    // would run one at a time.
    o.lock_stripes = 1;
    o.before_group_write = [this] { gate_.BeforeWrite(); };
    auto store = RocksDbStateStore::Open(o);
    ASSERT_OK(store);
    store_ = *std::move(store);
    limiter_ = std::make_unique<Limiter>(*store_, clock_);
  }

  // Waits until `n` decisions are queued behind the held write.
  void WaitForPending(uint64_t n) {
    ASSERT_TRUE(Eventually([&] { return store_->group_commit_stats().pending >= n; }))
        << "pending " << store_->group_commit_stats().pending;
  }

  TempDir dir_;
  FakeClock clock_;
  WriteGate gate_;
  std::unique_ptr<RocksDbStateStore> store_;
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(GroupCommitTest, ConcurrentDecisionsShareOneWalWrite) {
  Open();
  constexpr int kCallers = 16;
  std::vector<std::thread> threads;
  std::atomic<int> allowed{0};
  auto decide = [&](const std::string& key) {
    absl::StatusOr<Verdict> v = limiter_->Evaluate({Request(key)}, Mode::kConsume);
    if (v.ok() && v->allowed) ++allowed;
  };
  threads.emplace_back(decide, "first");
  gate_.WaitUntilHeld();  // the first decision's write is in progress
  for (int i = 0; i < kCallers; ++i) threads.emplace_back(decide, absl::StrCat("k", i));
  WaitForPending(kCallers);  // every caller decided while the write was held
  gate_.Release();
  for (auto& t : threads) t.join();

  EXPECT_EQ(allowed.load(), kCallers + 1);
  const GroupCommit::Stats stats = store_->group_commit_stats();
  EXPECT_EQ(stats.tickets, uint64_t{kCallers + 1});
  EXPECT_EQ(stats.writes, 2u) << "one write for the first decision, one for the other " << kCallers;
  for (int i = 0; i < kCallers; ++i) {
    auto state = store_->Get(StateKey{"gc", absl::StrCat("k", i)});
    ASSERT_OK(state);
    ASSERT_TRUE(state->has_value());
    EXPECT_DOUBLE_EQ((*state)->value, 9);
  }
}

TEST_F(GroupCommitTest, ALaterDecisionSeesAnEarlierOneBeforeItIsWrittenAndWaitsForIt) {
  Open();
  absl::StatusOr<Verdict> first, second;
  std::atomic<bool> second_answered{false};
  std::thread a([&] { first = limiter_->Evaluate({Request("hot", 1)}, Mode::kConsume); });
  gate_.WaitUntilHeld();  // the first decision is queued, its write held back
  std::thread b([&] {
    second = limiter_->Evaluate({Request("hot", 2)}, Mode::kConsume);
    second_answered = true;
  });
  WaitForPending(1);  // the second has decided, on the first one's unwritten state
  EXPECT_FALSE(second_answered.load()) << "answered before the state it read was written";
  gate_.Release();
  a.join();
  b.join();
  ASSERT_OK(first);
  ASSERT_OK(second);
  EXPECT_DOUBLE_EQ(first->decisions[0].value, 9);
  EXPECT_DOUBLE_EQ(second->decisions[0].value, 7) << "the second did not see the first";
  auto state = store_->Get(StateKey{"gc", "hot"});
  ASSERT_OK(state);
  ASSERT_TRUE(state->has_value());
  EXPECT_DOUBLE_EQ((*state)->value, 7);
}

TEST_F(GroupCommitTest, AFailedWriteFailsEveryQueuedDecisionAndItsStatesAreNeverRead) {
  auto fs = std::make_shared<FaultyFileSystem>();
  Open(fs);
  absl::StatusOr<Verdict> first, second, other;
  std::thread a([&] { first = limiter_->Evaluate({Request("hot", 3)}, Mode::kConsume); });
  gate_.WaitUntilHeld();
  std::thread b([&] { second = limiter_->Evaluate({Request("hot", 2)}, Mode::kConsume); });
  std::thread c([&] { other = limiter_->Evaluate({Request("other", 1)}, Mode::kConsume); });
  WaitForPending(2);
  fs->SetFull(true);  // the held write, and the next, fail
  gate_.Release();
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable) << other.status();

  // The queued states are gone from the cache at once (a decision still in flight cannot read
  // them)...
  EXPECT_EQ(store_->state_cache().entries(), 0u);
  // ...nothing was written, and nothing queued is read back: not while failing...
  for (const char* key : {"hot", "other"}) {
    auto state = store_->Get(StateKey{"gc", key});
    ASSERT_OK(state);
    EXPECT_FALSE(state->has_value()) << key << " reads a state that was never written";
  }
  // ...nor once the store recovered.
  fs->SetFull(false);
  ASSERT_OK(store_->Health());
  auto v = limiter_->Evaluate({Request("hot", 1)}, Mode::kConsume);
  ASSERT_OK(v);
  EXPECT_DOUBLE_EQ(v->decisions[0].value, 9);
}

TEST_F(GroupCommitTest, ABatchIsDecidedInOrderAndWrittenTogether) {
  Open();
  gate_.Release();  // writes go through at once
  std::vector<LimitRequest> reqs;
  for (int i = 0; i < 100; ++i) reqs.push_back(Request(absl::StrCat("b", i % 10)));
  std::vector<BatchItem> items;
  for (const LimitRequest& r : reqs) items.push_back(BatchItem{absl::MakeConstSpan(&r, 1)});
  const uint64_t writes_before = store_->group_commit_stats().writes;
  std::vector<absl::StatusOr<Verdict>> verdicts = limiter_->EvaluateBatch(items);
  ASSERT_EQ(verdicts.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(verdicts[i]);
    EXPECT_DOUBLE_EQ(verdicts[i]->decisions[0].value, 9 - i / 10) << i;
  }
  EXPECT_EQ(store_->group_commit_stats().writes - writes_before, 1u);
}

// The answers of EvaluateAsync calls, by index, as they arrive.
class AsyncAnswers {
 public:
  explicit AsyncAnswers(size_t n) : answers_(n), threads_(n) {}

  Limiter::VerdictDone Slot(size_t i) {
    return [this, i](absl::StatusOr<Verdict> v) {
      absl::MutexLock lock(&mu_);
      answers_[i] = std::move(v);
      threads_[i] = std::this_thread::get_id();
      ++count_;
    };
  }
  // The thread that answered slot `i`.
  std::thread::id thread(size_t i) {
    absl::MutexLock lock(&mu_);
    return threads_[i];
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return count_;
  }
  // Waits (with a deadline) until `n` answers have arrived.
  bool WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(30));
  }
  absl::StatusOr<Verdict> operator[](size_t i) {
    absl::MutexLock lock(&mu_);
    return answers_[i].value_or(absl::InternalError("no answer"));
  }

 private:
  absl::Mutex mu_;
  std::vector<std::optional<absl::StatusOr<Verdict>>> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(GroupCommitTest, AsyncDecisionsReturnAtOnceShareOneWalWriteAndAreAnsweredOnceWritten) {
  Open();
  constexpr size_t kCalls = 16;
  AsyncAnswers answers(kCalls + 1);
  // The first decision's write (by the store's writer thread) is held back.
  limiter_->EvaluateAsync({Request("first")}, Mode::kConsume, answers.Slot(0));
  gate_.WaitUntilHeld();
  // Each call returns without waiting for the WAL: all from this one thread, as a server
  // thread handles one call after another.
  for (size_t i = 1; i <= kCalls; ++i) {
    limiter_->EvaluateAsync({Request(absl::StrCat("k", i))}, Mode::kConsume, answers.Slot(i));
  }
  WaitForPending(kCalls);
  EXPECT_EQ(answers.count(), 0u) << "answered before the decision was written";
  gate_.Release();
  ASSERT_TRUE(answers.WaitFor(kCalls + 1));

  for (size_t i = 0; i <= kCalls; ++i) {
    ASSERT_OK(answers[i]);
    EXPECT_TRUE(answers[i]->allowed);
    EXPECT_DOUBLE_EQ(answers[i]->decisions[0].value, 9);
  }
  const GroupCommit::Stats stats = store_->group_commit_stats();
  EXPECT_EQ(stats.tickets, uint64_t{kCalls + 1});
  EXPECT_EQ(stats.writes, 2u) << "one write for the first decision, one for the other " << kCalls;
}

TEST_F(GroupCommitTest, AnAsyncDecisionSeesAnEarlierQueuedOneAndIsAnsweredOnlyAfterItsWrite) {
  Open();
  AsyncAnswers answers(3);
  limiter_->EvaluateAsync({Request("hot", 4)}, Mode::kConsume, answers.Slot(0));
  gate_.WaitUntilHeld();
  limiter_->EvaluateAsync({Request("hot", 4)}, Mode::kConsume, answers.Slot(1));
  // A Check writes nothing, but what it read is not yet written: it waits for that write too.
  limiter_->EvaluateAsync({Request("hot", 1)}, Mode::kCheck, answers.Slot(2));
  WaitForPending(1);
  EXPECT_EQ(answers.count(), 0u) << "answered on a state that is not yet written";
  gate_.Release();
  ASSERT_TRUE(answers.WaitFor(3));
  ASSERT_OK(answers[0]);
  ASSERT_OK(answers[1]);
  ASSERT_OK(answers[2]);
  EXPECT_DOUBLE_EQ(answers[0]->decisions[0].value, 6);
  EXPECT_DOUBLE_EQ(answers[1]->decisions[0].value, 2) << "the second did not see the first";
  EXPECT_TRUE(answers[2]->allowed);
  // A Check reports the current value: the second Consume's, not yet written when it was read.
  EXPECT_DOUBLE_EQ(answers[2]->decisions[0].value, 2);
  // A denial writes nothing and waits for nothing more than what it read.
  absl::StatusOr<Verdict> denied = limiter_->Evaluate({Request("hot", 3)}, Mode::kConsume);
  ASSERT_OK(denied);
  EXPECT_FALSE(denied->allowed);
}

TEST_F(GroupCommitTest, AFailedGroupWriteFailsEveryAsyncDecisionQueuedWithIt) {
  auto fs = std::make_shared<FaultyFileSystem>();
  Open(fs);
  AsyncAnswers answers(3);
  limiter_->EvaluateAsync({Request("hot", 3)}, Mode::kConsume, answers.Slot(0));
  gate_.WaitUntilHeld();
  limiter_->EvaluateAsync({Request("hot", 2)}, Mode::kConsume, answers.Slot(1));
  limiter_->EvaluateAsync({Request("other", 1)}, Mode::kConsume, answers.Slot(2));
  WaitForPending(2);
  fs->SetFull(true);
  gate_.Release();
  ASSERT_TRUE(answers.WaitFor(3));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(answers[i].status().code(), absl::StatusCode::kUnavailable) << answers[i].status();
  }
  for (const char* key : {"hot", "other"}) {
    auto state = store_->Get(StateKey{"gc", key});
    ASSERT_OK(state);
    EXPECT_FALSE(state->has_value()) << key << " reads a state that was never written";
  }
  // While writes are stopped, an async decision is refused at once.
  AsyncAnswers refused(1);
  limiter_->EvaluateAsync({Request("hot", 1)}, Mode::kConsume, refused.Slot(0));
  ASSERT_EQ(refused.count(), 1u);
  EXPECT_EQ(refused[0].status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(GroupCommitTest, CloseWritesTheQueuedAsyncDecisionsBeforeItReturns) {
  Open();
  constexpr size_t kCalls = 8;
  AsyncAnswers answers(kCalls + 1);
  limiter_->EvaluateAsync({Request("first")}, Mode::kConsume, answers.Slot(0));
  gate_.WaitUntilHeld();
  for (size_t i = 1; i <= kCalls; ++i) {
    limiter_->EvaluateAsync({Request("queued", 1)}, Mode::kConsume, answers.Slot(i));
  }
  WaitForPending(kCalls);
  std::thread closer([&] { EXPECT_OK(store_->Close()); });
  gate_.Release();
  closer.join();
  // Close returned: every decision was answered, and every one answered OK is on disk.
  ASSERT_EQ(answers.count(), kCalls + 1);
  for (size_t i = 0; i <= kCalls; ++i) ASSERT_OK(answers[i]);
  store_.reset();
  limiter_.reset();
  Open();  // the gate was released: writes go through
  auto state = store_->Get(StateKey{"gc", "queued"});
  ASSERT_OK(state);
  ASSERT_TRUE(state->has_value());
  EXPECT_DOUBLE_EQ((*state)->value, 10 - static_cast<double>(kCalls));
}

// What a crash now would leave: a copy of the data directory, opened, reads `key`'s value.
void ExpectCrashImageHolds(const std::string& db, const std::string& copy, const Clock& clock,
                           const std::string& key, double value) {
  std::filesystem::copy(db, copy, std::filesystem::copy_options::recursive);
  RocksDbStateStoreOptions o;
  o.path = copy;
  o.clock = &clock;
  auto recovered = RocksDbStateStore::Open(o);
  ASSERT_OK(recovered);
  auto state = (*recovered)->Get(StateKey{"gc", key});
  ASSERT_OK(state);
  ASSERT_TRUE(state->has_value()) << key;
  EXPECT_DOUBLE_EQ((*state)->value, value) << key;
  EXPECT_OK((*recovered)->Close());
}

TEST_F(GroupCommitTest, UnderWritesHereAnIdleStoreWritesAndAnswersOnTheCallingThread) {
  Open();
  gate_.Release();  // no write is held
  AsyncAnswers answers(2);
  {
    StateStore::WritesHereScope writes_here;
    limiter_->EvaluateAsync({Request("here", 3)}, Mode::kConsume, answers.Slot(0));
    // Answered before the call returned, on this thread, from its own WAL write.
    ASSERT_EQ(answers.count(), 1u);
    EXPECT_EQ(answers.thread(0), std::this_thread::get_id());
    ASSERT_OK(answers[0]);
    EXPECT_DOUBLE_EQ(answers[0]->decisions[0].value, 7);
    EXPECT_EQ(store_->group_commit_stats().writes, 1u);
    ExpectCrashImageHolds(dir_.path() + "/db", dir_.path() + "/crash-image", clock_, "here", 7);
  }
  // Without the scope the store's writer thread writes and answers.
  limiter_->EvaluateAsync({Request("there")}, Mode::kConsume, answers.Slot(1));
  ASSERT_TRUE(answers.WaitFor(2));
  ASSERT_OK(answers[1]);
  EXPECT_NE(answers.thread(1), std::this_thread::get_id());
}

TEST_F(GroupCommitTest, UnderWritesHereDecisionsMadeDuringAWriteShareTheNextGroupOfItsWriter) {
  Open();
  constexpr size_t kCalls = 8;
  AsyncAnswers answers(kCalls + 1);
  // A handler thread finds the store idle and writes its decision itself; that write is held.
  std::thread leader([&] {
    StateStore::WritesHereScope writes_here;
    limiter_->EvaluateAsync({Request("hot")}, Mode::kConsume, answers.Slot(0));
  });
  gate_.WaitUntilHeld();
  // Another handler thread decides meanwhile: a write is in progress, so each call returns at
  // once, unanswered, its decision queued (and seeing the earlier ones: same key).
  {
    StateStore::WritesHereScope writes_here;
    for (size_t i = 1; i <= kCalls; ++i) {
      limiter_->EvaluateAsync({Request("hot")}, Mode::kConsume, answers.Slot(i));
    }
  }
  WaitForPending(kCalls);
  EXPECT_EQ(answers.count(), 0u) << "answered before the decision was written";
  gate_.Release();
  leader.join();
  // The leader wrote the queued decisions as one more group before it returned, and answered
  // them itself: no hand-off to the writer thread.
  ASSERT_EQ(answers.count(), kCalls + 1);
  const std::thread::id leader_thread = answers.thread(0);
  for (size_t i = 0; i <= kCalls; ++i) {
    ASSERT_OK(answers[i]);
    EXPECT_DOUBLE_EQ(answers[i]->decisions[0].value, 9 - static_cast<double>(i)) << i;
    EXPECT_EQ(answers.thread(i), leader_thread) << i;
  }
  EXPECT_EQ(store_->group_commit_stats().writes, 2u);
  ExpectCrashImageHolds(dir_.path() + "/db", dir_.path() + "/crash-image", clock_, "hot",
                        9 - static_cast<double>(kCalls));
}

TEST_F(GroupCommitTest, AKeyDecidedManyTimesInOneGroupIsWrittenOnceWithItsLastState) {
  Open();
  constexpr size_t kHot = 8;
  AsyncAnswers answers(kHot + 3);
  limiter_->EvaluateAsync({Request("hot")}, Mode::kConsume, answers.Slot(0));
  gate_.WaitUntilHeld();  // the first write is held: the rest queue up as one group
  for (size_t i = 1; i <= kHot; ++i) {
    limiter_->EvaluateAsync({Request("hot")}, Mode::kConsume, answers.Slot(i));
  }
  limiter_->EvaluateAsync({Request("cold", 2)}, Mode::kConsume, answers.Slot(kHot + 1));
  limiter_->EvaluateAsync({Request("cold", 3)}, Mode::kConsume, answers.Slot(kHot + 2));
  WaitForPending(kHot + 2);
  gate_.Release();
  ASSERT_TRUE(answers.WaitFor(kHot + 3));
  for (size_t i = 0; i <= kHot; ++i) {
    ASSERT_OK(answers[i]);
    EXPECT_DOUBLE_EQ(answers[i]->decisions[0].value, 9 - static_cast<double>(i)) << i;
  }
  ASSERT_OK(answers[kHot + 2]);
  EXPECT_DOUBLE_EQ(answers[kHot + 2]->decisions[0].value, 5);
  // The second group had kHot writes of "hot" and two of "cold": one of each reached the WAL.
  EXPECT_EQ(store_->coalesced_writes(), kHot - 1 + 1);
  EXPECT_EQ(store_->group_commit_stats().writes, 2u);

  // What a crash now would leave: a copy of the directory (the group is in the WAL only, not in
  // an SST) recovers the last state of each key.
  const std::string copy = dir_.path() + "/crash-image";
  std::filesystem::copy(dir_.path() + "/db", copy, std::filesystem::copy_options::recursive);
  RocksDbStateStoreOptions o;
  o.path = copy;
  o.clock = &clock_;
  auto recovered = RocksDbStateStore::Open(o);
  ASSERT_OK(recovered);
  for (const auto& [key, value] : {std::pair<const char*, double>{"hot", 1}, {"cold", 5}}) {
    auto state = (*recovered)->Get(StateKey{"gc", key});
    ASSERT_OK(state);
    ASSERT_TRUE(state->has_value()) << key;
    EXPECT_DOUBLE_EQ((*state)->value, value) << key;
  }
  EXPECT_OK((*recovered)->Close());
}

constexpr char kLedgerLimits[] = R"(limits:
  - name: ledger
    kind: token_bucket
    rate: 1
    period: 24h
    capacity: 1000000
)";

TEST(GroupCommitProcessTest, KillNineUnderManyConcurrentCallersLosesNoAcknowledgedDecision) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kLedgerLimits);
  const std::vector<std::string> args = {"--data_dir=" + dir.File("data"),
                                         "--limits_file=" + dir.File("limits.yaml")};
  auto server = ServerProcess::Start(args, dir.path());
  ASSERT_OK(server);
  const std::string target = (*server)->target();
  constexpr int kCallers = 24;
  constexpr int kKeys = 4;
  std::atomic<int64_t> acked[kKeys] = {};
  std::atomic<int64_t> total{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(5), ""});
      const std::string key = absl::StrCat("acct", i % kKeys);
      while (!stop.load()) {
        auto r = client->Consume(MakeRequest("ledger", key));
        if (!r.ok()) return;  // the server is gone
        if (r->allowed()) {
          ++acked[i % kKeys];
          ++total;
        }
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return total.load() >= 4000; }));
  ::kill((*server)->pid(), SIGKILL);  // mid-load, no warning
  stop = true;
  for (auto& t : callers) t.join();
  (*server)->StopWith(SIGKILL);  // reap

  auto restarted = ServerProcess::Start(args, dir.path());
  ASSERT_OK(restarted);
  auto client =
      RateLimitClient::Connect((*restarted)->target(), ClientOptions{absl::Seconds(5), ""});
  for (int k = 0; k < kKeys; ++k) {
    auto r = client->Check(MakeRequest("ledger", absl::StrCat("acct", k)));
    ASSERT_OK(r);
    const double consumed = 1000000 - r->results(0).value();
    // Refill over the test is a few seconds at 1 token/day: well under one token.
    EXPECT_GE(consumed + 0.01, static_cast<double>(acked[k].load()))
        << "an acknowledged consume of acct" << k << " was lost";
  }
  EXPECT_EQ((*restarted)->StopWith(SIGTERM), 0);
}

TEST(GroupCommitProcessTest, ANegativeStateCacheBoundIsRefused) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kLedgerLimits);
  auto server =
      ServerProcess::Start({"--data_dir=" + dir.File("data"),
                            "--limits_file=" + dir.File("limits.yaml"), "--state_cache_mb=-1"},
                           dir.path());
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("--state_cache_mb"), std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace ratelimit
