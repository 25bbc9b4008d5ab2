// The cache of lease sets (storage/rocksdb/lease_set_cache.h) and what it buys the RocksDB store:
// the cache's memory charge and its expiry; lease decisions on one hot key queued behind a WAL
// write in progress and written together in the next group (each answered only once the set it
// read is written; a retried acquire answered from the queued set); a failed group write dropping
// the queued sets; ApplyLeaseAsync answering once written; a batch's run of operations on one key
// decided under one read and one write of its set, as the same operations one by one; and the
// store with a cache far too small for its keys (or none) answering exactly like the in-memory
// store.
#include "storage/rocksdb/lease_set_cache.h"

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/storage/lease_store_contract.h"
#include "tests/support/faulty_file_system.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's helpers

// The lease store contract on a RocksDB store that caches no lease set beyond those waiting for
// their WAL write: every decision reads its set from RocksDB.
class UncachedRocksDbLeaseEnv {
 public:
  void Open() {
    RocksDbStateStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    o.lease_cache_bytes = 0;
    auto store = RocksDbStateStore::Open(o);
    ASSERT_OK(store);
    store_ = *std::move(store);
  }
  StateStore& store() { return *store_; }
  const Clock& clock() { return clock_; }
  void Advance(int64_t us) { clock_.Advance(us); }

 private:
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RocksDbStateStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(UncachedRocksDb, LeaseStoreContractTest, UncachedRocksDbLeaseEnv);

std::shared_ptr<LeaseSet> SetOf(int leases, int64_t expires_at_us) {
  auto set = std::make_shared<LeaseSet>();
  for (int i = 0; i < leases; ++i) {
    Lease l;
    l.id = NamedId(absl::StrCat("lease-", i));
    l.request_id = absl::StrCat("request-id-long-enough-for-the-heap-", i);
    l.expires_at_us = expires_at_us;
    set->leases.push_back(l);
  }
  return set;
}

TEST(LeaseSetCacheTest, ChargesTheSetsMemoryAndStaysWithinItsBound) {
  std::atomic<uint64_t> resolved{0};
  const auto set = SetOf(20, 100);
  const size_t per_entry = LeaseSetCache::ChargeOf(8) + LeaseSetMemoryBytes(*set);
  EXPECT_GT(LeaseSetMemoryBytes(*set), 20 * sizeof(Lease))
      << "the request_ids' heap blocks are charged";
  const size_t bound = 64 * per_entry;
  LeaseSetCache cache(bound, resolved);
  for (int i = 0; i < 2000; ++i) {
    cache.Put(absl::StrCat("key", 10000 + i), LeaseSetCache::Make(set, 100, 0), 1);
    ASSERT_LE(cache.bytes(), bound) << i;
  }
  EXPECT_GT(cache.evictions(), 0u);
  // Replacing an entry by an empty one gives its set's charge back.
  cache.Clear();
  cache.Put("key", LeaseSetCache::Make(set, 100, 0), 1);
  EXPECT_EQ(cache.bytes(), LeaseSetCache::ChargeOf(3) + LeaseSetMemoryBytes(*set));
  cache.Put("key", LeaseSetCache::Make(nullptr, 0, 0), 1);
  EXPECT_EQ(cache.bytes(), LeaseSetCache::ChargeOf(3));
  const std::optional<LeaseSetCache::Entry> empty = cache.Lookup("key", 1);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->set, nullptr);
}

// A set larger than a shard's share of the bound (a key holding tens of thousands of leases under
// the default bound) is kept while it is the one used last in its shard, so that the decisions
// on its key do not read it from RocksDB each time; another key's use then evicts it.
TEST(LeaseSetCacheTest, ASetLargerThanAShardsShareStaysUntilAnotherKeyIsUsed) {
  std::atomic<uint64_t> resolved{0};
  const auto small = SetOf(2, 100);
  const auto big = SetOf(400, 100);
  const size_t bound = 16 * 2 * (LeaseSetCache::ChargeOf(8) + LeaseSetMemoryBytes(*small));
  ASSERT_GT(LeaseSetCache::ChargeOf(3) + LeaseSetMemoryBytes(*big), bound / 16);
  LeaseSetCache cache(bound, resolved);
  cache.Put("big", LeaseSetCache::Make(big, 100, 0), 1);
  ASSERT_TRUE(cache.Lookup("big", 1).has_value());
  cache.Put("big", LeaseSetCache::Make(big, 100, 0), 1);
  EXPECT_TRUE(cache.Lookup("big", 1).has_value());
  for (int i = 0; i < 2000; ++i) {
    cache.Put(absl::StrCat("key", 10000 + i), LeaseSetCache::Make(small, 100, 0), 1);
  }
  EXPECT_FALSE(cache.Lookup("big", 1).has_value());
  EXPECT_LE(cache.bytes(), bound);
}

// The book a cached set carries (LeaseSetBook) through random decisions of the algebra, as the
// store carries it from one call to the next: the summary spares a pass over the leases until one
// may have expired, and the strings' bytes AccountLeaseDecision keeps are those of the leases in
// the set whenever it says it knows them (the cache charges them without a pass).
TEST(LeaseSetCacheTest, TheBookFollowsTheDecisionsWithoutAPassOverTheLeases) {
  std::mt19937 rng(41);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  LeaseSet set;
  LeaseSetBook book;
  book.summary = {true, 0, INT64_MAX};
  book.strings_known = true;
  int64_t now = 1'000'000'000;
  int passes = 0;
  int unread = 0;
  std::vector<LeaseId> ids;
  for (int step = 0; step < 3000; ++step) {
    now += pick(200) * 1000;
    LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 200);
    const int action = pick(10);
    op.ttl_us = (1 + pick(60)) * kSecond;
    if (action < 5) {
      // Request_ids and holders past the small-string buffer, so that they own heap blocks.
      op.lease_id = NamedId(absl::StrCat("lease-", step));
      ids.push_back(op.lease_id);
      if (pick(3) == 0) op.request_id = absl::StrCat("a-request-id-past-the-buffer-", pick(50));
      if (pick(4) == 0) op.holder = absl::StrCat("a-holder-name-past-the-buffer-", step);
    } else if (action < 8) {
      op.action = LeaseAction::kRelease;
      op.lease_id = ids.empty() ? NamedId("unknown")
                                : ids[ids.size() - 1 - pick(std::min<int>(ids.size(), 100))];
    } else if (action < 9) {
      op.action = LeaseAction::kExtend;
      op.lease_id = ids.empty() ? NamedId("unknown")
                                : ids[ids.size() - 1 - pick(std::min<int>(ids.size(), 100))];
    } else {
      op.action = pick(20) == 0 ? LeaseAction::kReset : LeaseAction::kCheck;
    }
    const bool read_set = !LeaseSummarySparesRead(book.summary, now);
    (read_set ? passes : unread)++;
    LeaseDecision d;
    DecideLease(op, std::move(set), now, book.summary, d);
    // The same decision as one that reads the set from scratch.
    AccountLeaseDecision(op, d, book);
    set = std::move(d.next);
    size_t strings = 0;
    for (const Lease& l : set.leases) strings += LeaseStringBytes(l);
    if (book.strings_known) {
      ASSERT_EQ(book.string_bytes, strings) << "step " << step;
    } else {
      book.string_bytes = strings;  // what LeaseSetCache::Make counts when the book does not know
      book.strings_known = true;
    }
    int64_t held = 0;
    for (const Lease& l : set.leases) held += l.released || l.expires_at_us <= now ? 0 : l.count;
    ASSERT_EQ(book.summary.held, held) << "step " << step;
  }
  // Most decisions spared the pass; the set's expiries brought some.
  EXPECT_GT(unread, 2 * passes);
  EXPECT_GT(passes, 0);
}

TEST(LeaseSetCacheTest, DropExpiredDropsOnlyWrittenExpiredSets) {
  std::atomic<uint64_t> resolved{5};
  LeaseSetCache cache(1 << 20, resolved);
  cache.Put("expired", LeaseSetCache::Make(SetOf(1, 10), 10, 0), 1);
  cache.Put("queued", LeaseSetCache::Make(SetOf(1, 10), 10, 6), 1);  // ticket 6 > resolved 5
  cache.Put("live", LeaseSetCache::Make(SetOf(1, 50), 50, 0), 1);
  cache.DropExpired(20);
  EXPECT_FALSE(cache.Lookup("expired", 1).has_value());
  EXPECT_TRUE(cache.Lookup("queued", 1).has_value()) << "a queued set stays until written";
  EXPECT_TRUE(cache.Lookup("live", 1).has_value());
  EXPECT_FALSE(cache.Lookup("live", 2).has_value()) << "another epoch misses";
}

// A store whose first group write is held back (WriteGate), on one lock stripe for every key.
class LeaseGroupTest : public ::testing::Test {
 protected:
  void Open(std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
    RocksDbStateStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    o.file_system = std::move(fs);
    o.lock_stripes = 1;
    o.before_group_write = [this] { gate_.BeforeWrite(); };
    auto store = RocksDbStateStore::Open(o);
    ASSERT_OK(store);
    store_ = *std::move(store);
  }
  void WaitForPending(uint64_t n) {
    ASSERT_TRUE(Eventually([&] { return store_->group_commit_stats().pending >= n; }))
        << "pending " << store_->group_commit_stats().pending;
  }
  absl::StatusOr<LeaseOutcome> Apply(const LeaseOp& op) {
    return store_->ApplyLease(LeaseOperation{op}, clock_);
  }

  TempDir dir_;
  FakeClock clock_;
  WriteGate gate_;
  std::unique_ptr<RocksDbStateStore> store_;
};

TEST_F(LeaseGroupTest, DecisionsOnAHotKeyQueueBehindAWriteAndShareTheNextOne) {
  Open();
  constexpr int kLater = 8;
  absl::StatusOr<LeaseOutcome> first;
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 100, "first");
  op.request_id = "retry-me";
  std::thread a([&] { first = Apply(op); });
  gate_.WaitUntilHeld();  // the first acquire's write is in progress, held back
  std::vector<absl::StatusOr<LeaseOutcome>> later(kLater + 1);
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kLater; ++i) {
    threads.emplace_back([&, i] {
      later[i] = Apply(LeaseOpOf(LeaseAction::kAcquire, 100, absl::StrCat("later-", i)));
      ++answered;
    });
  }
  // A retry of the first acquire, answered from its queued set.
  threads.emplace_back([&] {
    LeaseOp retry = op;
    retry.lease_id = NamedId("not-taken");
    later[kLater] = Apply(retry);
    ++answered;
  });
  // Every later decision was made on the same key while the first one's write was held: the key
  // is not held by a decision waiting for its write.
  WaitForPending(kLater);
  EXPECT_EQ(answered.load(), 0) << "answered before the set it read was written";
  gate_.Release();
  a.join();
  for (std::thread& t : threads) t.join();

  ASSERT_OK(first);
  EXPECT_TRUE(first->allowed);
  for (int i = 0; i < kLater; ++i) {
    ASSERT_OK(later[i]);
    EXPECT_TRUE(later[i]->allowed);
  }
  ASSERT_OK(later[kLater]);
  EXPECT_TRUE(later[kLater]->lease.replayed);
  EXPECT_EQ(later[kLater]->lease.lease->id, NamedId("first"));
  const GroupCommit::Stats stats = store_->group_commit_stats();
  EXPECT_EQ(stats.tickets, uint64_t{kLater + 1});
  EXPECT_EQ(stats.writes, 2u) << "one write for the first acquire, one for the other " << kLater;
  // Every acquire is in the set, also as RocksDB holds it after a restart.
  ASSERT_OK(store_->Close());
  Open();
  absl::StatusOr<LeaseOutcome> list = Apply(LeaseOpOf(LeaseAction::kList, 100));
  ASSERT_OK(list);
  EXPECT_EQ(list->lease.held, kLater + 1);
}

// A batch's calls are concurrent: its release is decided before its acquires, which find the
// slot it freed (in the order given, b0 would hold a slot while the acquires were decided and only
// 3 of them would fit), and the batch is written in one group write.
TEST_F(LeaseGroupTest, ABatchDecidesItsReleasesBeforeItsAcquiresAndIsWrittenTogether) {
  Open();
  gate_.Release();  // writes go through at once
  ASSERT_OK(Apply(LeaseOpOf(LeaseAction::kAcquire, 4, "b0")));
  std::vector<LeaseOperation> ops;
  for (int i = 1; i <= 6; ++i) {
    ops.push_back(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 4, absl::StrCat("b", i))});
  }
  ops.push_back(LeaseOperation{LeaseOpOf(LeaseAction::kRelease, 4, "b0")});
  std::vector<const LeaseOperation*> pointers;
  for (const LeaseOperation& op : ops) pointers.push_back(&op);
  const uint64_t writes_before = store_->group_commit_stats().writes;
  std::vector<absl::StatusOr<LeaseOutcome>> outcomes = store_->ApplyLeaseBatch(pointers, clock_);
  ASSERT_EQ(outcomes.size(), ops.size());
  ASSERT_OK(outcomes[6]);
  EXPECT_EQ(outcomes[6]->lease.state, LeaseState::kReleased);
  EXPECT_EQ(outcomes[6]->lease.held, 0);
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_OK(outcomes[i]);
    EXPECT_EQ(outcomes[i]->allowed, i < 4) << i;  // 4 slots, all free once b0 is released
  }
  EXPECT_EQ(store_->group_commit_stats().writes - writes_before, 1u);
}

TEST_F(LeaseGroupTest, ARunOnOneKeyReadsItsSetOnceAndWritesItOnce) {
  Open();
  gate_.Release();
  ASSERT_OK(Apply(LeaseOpOf(LeaseAction::kAcquire, 4, "held")));  // the set is cached now
  ASSERT_OK(Apply(LeaseOpOf(LeaseAction::kAcquire, 4, "gone")));
  std::vector<LeaseOperation> ops;
  for (int i = 0; i < 5; ++i) {
    ops.push_back(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 4, absl::StrCat("r", i))});
  }
  ops.push_back(LeaseOperation{LeaseOpOf(LeaseAction::kRelease, 4, "gone")});
  ops.push_back(LeaseOperation{LeaseOpOf(LeaseAction::kExtend, 4, "held")});
  std::vector<const LeaseOperation*> pointers;
  for (const LeaseOperation& op : ops) pointers.push_back(&op);
  const uint64_t lookups = store_->lease_cache().hits() + store_->lease_cache().misses();
  const uint64_t writes = store_->group_commit_stats().writes;
  std::vector<absl::StatusOr<LeaseOutcome>> outcomes = store_->ApplyLeaseBatch(pointers, clock_);
  ASSERT_EQ(outcomes.size(), ops.size());
  for (const absl::StatusOr<LeaseOutcome>& outcome : outcomes) ASSERT_OK(outcome);
  EXPECT_EQ(store_->lease_cache().hits() + store_->lease_cache().misses() - lookups, 1u);
  EXPECT_EQ(store_->group_commit_stats().writes - writes, 1u);
  // The release and the extend first, then the acquires in order: 3 of the 5 fit beside "held".
  EXPECT_EQ(outcomes[5]->lease.state, LeaseState::kReleased);
  EXPECT_EQ(outcomes[5]->lease.held, 1);
  EXPECT_EQ(outcomes[6]->lease.state, LeaseState::kHeld);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(outcomes[i]->allowed, i < 3) << i;
  EXPECT_EQ(outcomes[4]->lease.held, 4);
}

// Bursts of acquires, releases, extends and checks on one hot key (with an operation on another
// key, or one with a rate limit, now and then between them), applied as batches to one store and
// one by one to another at the same times: the same answers, and the same leases after a restart.
TEST(LeaseRunTest, BurstsOnOneKeyDecideAsTheSameOperationsOneByOne) {
  TempDir dir;
  FakeClock clock;
  auto open = [&](const std::string& name) {
    RocksDbStateStoreOptions o;
    o.path = dir.path() + "/" + name;
    o.clock = &clock;
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> store = RocksDbStateStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  };
  std::unique_ptr<RocksDbStateStore> batched = open("batched"), single = open("single");
  ASSERT_NE(batched, nullptr);
  ASSERT_NE(single, nullptr);
  std::mt19937 rng(36);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<std::string> ids;
  int restarts = 0;
  bool held_seen = false;
  const LimitOp rate{StateKey{"per-second", "hot"}, TokenBucket(20, kSecond, 20), 1};
  for (int burst = 0; burst < 60; ++burst) {
    std::vector<LeaseOperation> ops;
    const int n = 1 + pick(12);
    for (int i = 0; i < n; ++i) {
      const int what = pick(10);
      LeaseOp op;
      if (what < 4) {
        ids.push_back(absl::StrCat("lease-", burst, "-", i));
        op = LeaseOpOf(LeaseAction::kAcquire, 6, ids.back());
        op.count = 1 + pick(2);
        if (pick(4) == 0) op.request_id = absl::StrCat("request-", pick(8));
      } else if (what < 7) {
        op = LeaseOpOf(LeaseAction::kRelease, 6, ids.empty() ? "none" : ids[pick(ids.size())]);
      } else if (what < 8) {
        op = LeaseOpOf(LeaseAction::kExtend, 6, ids.empty() ? "none" : ids[pick(ids.size())]);
        op.ttl_us = kLeaseTtl * (1 + pick(3));
      } else if (what < 9) {
        op = LeaseOpOf(LeaseAction::kCheck, 6);
      } else {
        ids.push_back(absl::StrCat("lease-", burst, "-", i));
        op = LeaseOpOf(LeaseAction::kAcquire, 6, ids.back(), "jobs", pick(2) ? "cold" : "tenant");
      }
      ops.push_back(LeaseOperation{op});
      if (what == 3 && pick(3) == 0) ops.back().limits = absl::MakeConstSpan(&rate, 1);
    }
    std::vector<const LeaseOperation*> pointers;
    for (const LeaseOperation& op : ops) pointers.push_back(&op);
    std::vector<absl::StatusOr<LeaseOutcome>> got = batched->ApplyLeaseBatch(pointers, clock);
    ASSERT_EQ(got.size(), ops.size());
    // One by one in the order the batch is decided in (ApplyLeaseBatch): every operation that is
    // not an acquire, then the acquires.
    std::vector<size_t> order;
    for (int acquires = 0; acquires < 2; ++acquires) {
      for (size_t i = 0; i < ops.size(); ++i) {
        if ((ops[i].lease.action == LeaseAction::kAcquire) == (acquires == 1)) order.push_back(i);
      }
    }
    for (const size_t i : order) {
      SCOPED_TRACE(absl::StrCat("burst ", burst, " op ", i));
      absl::StatusOr<LeaseOutcome> want = single->ApplyLease(ops[i], clock);
      ASSERT_EQ(got[i].ok(), want.ok()) << got[i].status() << " / " << want.status();
      if (!want.ok()) continue;
      EXPECT_EQ(got[i]->allowed, want->allowed);
      EXPECT_EQ(got[i]->lease.state, want->lease.state);
      EXPECT_EQ(got[i]->lease.replayed, want->lease.replayed);
      EXPECT_EQ(got[i]->lease.held, want->lease.held);
      EXPECT_EQ(got[i]->lease.free, want->lease.free);
      EXPECT_EQ(got[i]->lease.lease, want->lease.lease);
      EXPECT_EQ(got[i]->lease.expired_unreleased, want->lease.expired_unreleased);
    }
    // Every few bursts, what each store holds after a restart: the same leases (the records as
    // written, not the cached sets).
    if (burst % 6 == 5) {
      ++restarts;
      for (int s = 0; s < 2; ++s) {
        std::unique_ptr<RocksDbStateStore>& store = s == 0 ? batched : single;
        ASSERT_OK(store->Close());
        store = open(s == 0 ? "batched" : "single");
        ASSERT_NE(store, nullptr);
      }
      for (const char* key : {"tenant", "cold"}) {
        const LeaseOperation list{LeaseOpOf(LeaseAction::kList, 6, "", "jobs", key)};
        absl::StatusOr<LeaseOutcome> a = batched->ApplyLease(list, clock);
        absl::StatusOr<LeaseOutcome> b = single->ApplyLease(list, clock);
        ASSERT_OK(a);
        ASSERT_OK(b);
        EXPECT_EQ(a->lease.held_leases, b->lease.held_leases) << key;
        held_seen = held_seen || !a->lease.held_leases.empty();
      }
    }
    clock.Advance(kLeaseTtl / 3);
  }
  EXPECT_TRUE(held_seen);
  EXPECT_EQ(restarts, 10);
}

TEST_F(LeaseGroupTest, AFailedWriteDropsTheQueuedSets) {
  auto fs = std::make_shared<FaultyFileSystem>();
  Open(fs);
  absl::StatusOr<LeaseOutcome> first, second;
  std::thread a([&] { first = Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "a")); });
  gate_.WaitUntilHeld();
  std::thread b([&] { second = Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "b")); });
  WaitForPending(1);  // decided on the first one's unwritten set
  fs->SetFull(true);  // the held write, and the next, fail
  gate_.Release();
  a.join();
  b.join();
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_EQ(store_->lease_cache().entries(), 0u) << "queued sets are dropped at once";
  fs->SetFull(false);
  ASSERT_OK(store_->Health());
  // Neither lease was taken: both slots are free.
  absl::StatusOr<LeaseOutcome> both = Apply(LeaseOpOf(LeaseAction::kCheck, 2));
  ASSERT_OK(both);
  EXPECT_EQ(both->lease.held, 0);
  EXPECT_EQ(both->lease.free, 2);
}

TEST_F(LeaseGroupTest, ApplyLeaseAsyncAnswersOnceTheSetIsWritten) {
  Open();
  absl::Mutex mu;
  std::vector<absl::StatusOr<LeaseOutcome>> answers;
  auto answer = [&](absl::StatusOr<LeaseOutcome> outcome) {
    absl::MutexLock lock(&mu);
    answers.push_back(std::move(outcome));
  };
  // The first acquire's write is held back on the writer thread.
  const LeaseOp a = LeaseOpOf(LeaseAction::kAcquire, 1, "a");
  store_->ApplyLeaseAsync(LeaseOperation{a}, clock_, answer);
  gate_.WaitUntilHeld();
  // A release of that lease, decided on its queued set, returns at once, unanswered.
  LeaseOp release = a;
  release.action = LeaseAction::kRelease;
  store_->ApplyLeaseAsync(LeaseOperation{release}, clock_, answer);
  WaitForPending(1);
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(answers.empty());
  }
  gate_.Release();
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return answers.size() == 2;
  }));
  absl::MutexLock lock(&mu);
  ASSERT_OK(answers[0]);
  EXPECT_TRUE(answers[0]->allowed);
  ASSERT_OK(answers[1]);
  EXPECT_EQ(answers[1]->lease.state, LeaseState::kReleased);
}

// A cache of about two sets per shard for 60 keys: nearly every decision misses or evicts. Random
// acquires, releases, extends, resets (one key and every key) and time passing, with rate limits
// beside some acquires, compared decision by decision with the in-memory store.
TEST(LeaseSetCachePropertyTest, AStoreWithATinyCacheMatchesTheMemoryStore) {
  std::mt19937 rng(36);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  TempDir dir;
  FakeClock clock;
  RocksDbStateStoreOptions o;
  o.path = dir.path() + "/db";
  o.clock = &clock;
  o.lease_cache_bytes = 32 * LeaseSetCache::ChargeOf(16);
  auto rocks = RocksDbStateStore::Open(o);
  ASSERT_OK(rocks);
  MemoryStateStore memory;
  std::vector<LeaseId> ids;
  LimitOp rate;
  rate.key = StateKey{"per-tenant", "t"};
  rate.config.kind = LimitKind::kTokenBucket;
  rate.config.rate = 5;
  rate.config.period_us = kSecond;
  rate.config.capacity = 20;
  rate.count = 1;
  for (int step = 0; step < 3000; ++step) {
    clock.Advance(pick(3) == 0 ? pick(3 * static_cast<int>(kLeaseTtl)) / 20 : 0);
    const std::string key = absl::StrCat("k", pick(60));
    LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 3, "", "jobs", key);
    const int what = pick(100);
    bool with_rate = false;
    if (what < 45) {
      op.lease_id = NamedId(absl::StrCat("id", step));
      if (pick(4) == 0) op.request_id = absl::StrCat("r", pick(20));
      with_rate = pick(3) == 0;
      ids.push_back(op.lease_id);
    } else if (what < 75 && !ids.empty()) {
      op.action = LeaseAction::kRelease;
      op.lease_id = ids[pick(static_cast<int>(ids.size()))];
    } else if (what < 90 && !ids.empty()) {
      op.action = LeaseAction::kExtend;
      op.lease_id = ids[pick(static_cast<int>(ids.size()))];
    } else if (what < 97) {
      op.action = LeaseAction::kList;
    } else if (what < 99) {
      op.action = LeaseAction::kReset;
    } else {
      auto a = (*rocks)->DeleteAllLeases(LimitSource::kDefined, "jobs", clock.NowMicros());
      auto b = memory.DeleteAllLeases(LimitSource::kDefined, "jobs", clock.NowMicros());
      ASSERT_OK(a);
      ASSERT_OK(b);
      ASSERT_EQ(*a, *b) << "step " << step;
      continue;
    }
    const LeaseOperation operation{
        op, with_rate ? absl::MakeConstSpan(&rate, 1) : absl::Span<const LimitOp>()};
    absl::StatusOr<LeaseOutcome> got = (*rocks)->ApplyLease(operation, clock);
    absl::StatusOr<LeaseOutcome> want = memory.ApplyLease(operation, clock);
    ASSERT_OK(got);
    ASSERT_OK(want);
    ASSERT_EQ(got->allowed, want->allowed) << "step " << step;
    ASSERT_EQ(got->lease.state, want->lease.state) << "step " << step;
    ASSERT_EQ(got->lease.held, want->lease.held) << "step " << step;
    ASSERT_EQ(got->lease.replayed, want->lease.replayed) << "step " << step;
    ASSERT_EQ(got->lease.lease, want->lease.lease) << "step " << step;
    ASSERT_EQ(got->lease.held_leases, want->lease.held_leases) << "step " << step;
    ASSERT_EQ(got->decisions.size(), want->decisions.size()) << "step " << step;
  }
  EXPECT_GT((*rocks)->lease_cache().evictions(), 0u);
}

}  // namespace
}  // namespace ratelimit
