// Leases on the RocksDB store (storage/rocksdb/rocksdb_state_store_leases.cc): the lease store
// contract, leases surviving a restart, and at most `capacity` holders among many threads.

#include <algorithm>
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
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's suite and helpers

class RocksDbLeaseEnv {
 public:
  void Open() {
    store_ = OpenRocksDbStore(dir_.path(), clock_);
    ASSERT_NE(store_, nullptr);
  }
  StateStore& store() { return *store_; }
  const Clock& clock() { return clock_; }
  void Advance(int64_t us) { clock_.Advance(us); }

 private:
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RocksDbStateStore> store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(RocksDb, LeaseStoreContractTest, RocksDbLeaseEnv);

TEST(RocksDbLeaseTest, LeasesSurviveARestart) {
  TempDir dir;
  FakeClock clock;
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 2, "a");
  op.request_id = "req-1";
  Lease taken;
  {
    std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
    ASSERT_NE(store, nullptr);
    absl::StatusOr<LeaseOutcome> first = store->ApplyLease(LeaseOperation{op}, clock);
    ASSERT_TRUE(first.ok() && first->allowed) << first.status();
    taken = *first->lease.lease;
    op.request_id.clear();
    op.lease_id = NamedId("b");
    ASSERT_TRUE(store->ApplyLease(LeaseOperation{op}, clock)->allowed);
    ASSERT_TRUE(store->Close().ok());
  }
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  op.lease_id = NamedId("c");
  absl::StatusOr<LeaseOutcome> full = store->ApplyLease(LeaseOperation{op}, clock);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_FALSE(full->allowed);
  EXPECT_EQ(full->lease.held, 2);
  // The replay of the first acquire still answers its lease.
  op.request_id = "req-1";
  absl::StatusOr<LeaseOutcome> replay = store->ApplyLease(LeaseOperation{op}, clock);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(replay->lease.replayed);
  EXPECT_EQ(*replay->lease.lease, taken);
  // And they still expire by themselves.
  clock.Advance(kLeaseTtl);
  op.request_id.clear();
  EXPECT_TRUE(store->ApplyLease(LeaseOperation{op}, clock)->allowed);
}

// A leak search over more lease records than a page reads follows its pages and names every key
// holding a leak: here one on each of half the keys, and a lease still held on each of the others
// (records read, not named).
TEST(RocksDbLeaseTest, TheLeakSearchFollowsItsPagesOverEveryRecord) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  const int n = static_cast<int>(RocksDbStateStore::kLeakPageRecords) + 100;
  std::vector<LeaseOperation> ops;
  for (int i = 0; i < n; ++i) {
    LeaseOp op =
        LeaseOpOf(LeaseAction::kAcquire, 1, absl::StrCat("id", i), "jobs", absl::StrCat("k", i));
    op.ttl_us = i % 2 == 0 ? kLeaseTtl : 50 * kLeaseTtl;
    ops.push_back(LeaseOperation{std::move(op)});
  }
  for (int from = 0; from < n; from += 256) {
    std::vector<const LeaseOperation*> batch;
    for (int i = from; i < std::min(n, from + 256); ++i) batch.push_back(&ops[i]);
    for (const absl::StatusOr<LeaseOutcome>& out : store->ApplyLeaseBatch(batch, clock)) {
      ASSERT_TRUE(out.ok() && out->allowed) << out.status();
    }
  }
  clock.Advance(kLeaseTtl + kSecond);
  std::vector<std::string> named;
  int pages = 0;
  std::string cursor;
  do {
    absl::StatusOr<StateStore::LeakedLeaseKeys> page =
        store->FindLeakedLeaseKeys(cursor, clock.NowMicros());
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    for (const StateKey& k : page->keys) named.push_back(k.key);
    cursor = page->next;
  } while (!cursor.empty() && pages < 100);
  EXPECT_GE(pages, 2);
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  std::vector<std::string> leaked;
  for (int i = 0; i < n; i += 2) leaked.push_back(absl::StrCat("k", i));
  std::sort(leaked.begin(), leaked.end());
  EXPECT_EQ(named, leaked);
}

TEST(RocksDbLeaseTest, AReleaseKeepsOrFreesTheLeasesRecordAcrossARestart) {
  TempDir dir;
  FakeClock clock;
  // "kept" has a request_id: released, its record is rewritten and a retried acquire answers it
  // again; "freed" has none: its record is written free.
  LeaseOp kept = LeaseOpOf(LeaseAction::kAcquire, 1, "kept");
  kept.request_id = "req-kept";
  LeaseOp freed = LeaseOpOf(LeaseAction::kAcquire, 1, "freed");
  {
    std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
    ASSERT_NE(store, nullptr);
    for (LeaseOp op : {kept, freed}) {
      ASSERT_TRUE(store->ApplyLease(LeaseOperation{op}, clock)->allowed);
      op.action = LeaseAction::kRelease;
      absl::StatusOr<LeaseOutcome> released = store->ApplyLease(LeaseOperation{op}, clock);
      ASSERT_TRUE(released.ok()) << released.status();
      EXPECT_EQ(released->lease.state, LeaseState::kReleased);
    }
    ASSERT_TRUE(store->Close().ok());
  }
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  kept.lease_id = NamedId("retry");
  absl::StatusOr<LeaseOutcome> replay = store->ApplyLease(LeaseOperation{kept}, clock);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(replay->lease.replayed);
  ASSERT_TRUE(replay->lease.lease.has_value());
  EXPECT_EQ(replay->lease.lease->id, NamedId("kept"));
  EXPECT_TRUE(replay->lease.lease->released);
  LeaseOp list = LeaseOpOf(LeaseAction::kList, 1, "");
  absl::StatusOr<LeaseOutcome> listed = store->ApplyLease(LeaseOperation{list}, clock);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->lease.held_leases.empty());
  EXPECT_EQ(listed->lease.held, 0);
}

// Held leases as id (its name, IdName) and record number, by id.
using Held = std::vector<std::pair<std::string, uint32_t>>;

// The held leases of the test key of capacity `capacity`.
Held HeldRecords(RocksDbStateStore& store, const Clock& clock, double capacity) {
  absl::StatusOr<LeaseOutcome> listed =
      store.ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kList, capacity, "")}, clock);
  EXPECT_TRUE(listed.ok()) << listed.status();
  Held held;
  if (!listed.ok()) return held;
  for (const Lease& l : listed->lease.held_leases) held.emplace_back(IdName(l.id), l.record);
  std::sort(held.begin(), held.end());
  return held;
}

// A hot key's run (an acquire, the release of a lease held before it, another acquire) writes
// each record once, so the group has nothing to coalesce; and what it wrote reads back after a
// restart. The release is decided first (ApplyLeaseBatch), so the first acquire takes the record
// it freed (number 1) and the second the next (2); in the order given they would be the other way
// round.
TEST(RocksDbLeaseTest, ARunWritesEachRecordOnce) {
  TempDir dir;
  FakeClock clock;
  const LeaseOp first = LeaseOpOf(LeaseAction::kAcquire, 2, "first");
  LeaseOp release = first;
  release.action = LeaseAction::kRelease;
  const std::vector<LeaseOperation> run = {
      LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 2, "second")}, LeaseOperation{release},
      LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 2, "other")}};
  std::vector<const LeaseOperation*> ops;
  for (const LeaseOperation& op : run) ops.push_back(&op);
  {
    std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->ApplyLease(LeaseOperation{first}, clock)->allowed);
    const uint64_t before = store->lease_record_writes();
    std::vector<absl::StatusOr<LeaseOutcome>> outcomes = store->ApplyLeaseBatch(ops, clock);
    ASSERT_EQ(outcomes.size(), run.size());
    for (const absl::StatusOr<LeaseOutcome>& o : outcomes) ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_TRUE(outcomes[0]->allowed);
    EXPECT_EQ(outcomes[1]->lease.state, LeaseState::kReleased);
    EXPECT_TRUE(outcomes[2]->allowed);
    EXPECT_EQ(HeldRecords(*store, clock, 2), (Held{{"other", 2}, {"second", 1}}));
    // Record 1 (first's, freed, then second's) and other's: two records for three decisions.
    EXPECT_EQ(store->lease_record_writes() - before, 2u);
    EXPECT_EQ(store->coalesced_writes(), 0u);
    ASSERT_TRUE(store->Close().ok());
  }
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(HeldRecords(*store, clock, 2), (Held{{"other", 2}, {"second", 1}}));
}

// A burst's acquire finds the slot its release freed, though it came first: capacity 1, held by
// "a"; the burst {acquire "b", release "a"} leaves "b" holding a's record, one record written.
TEST(RocksDbLeaseTest, ABurstsAcquireTakesTheSlotItsReleaseFreed) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(
      store->ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 1, "a")}, clock)->allowed);
  const uint64_t before = store->lease_record_writes();
  const std::vector<LeaseOperation> burst = {
      LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 1, "b")},
      LeaseOperation{LeaseOpOf(LeaseAction::kRelease, 1, "a")}};
  std::vector<const LeaseOperation*> ops = {&burst[0], &burst[1]};
  std::vector<absl::StatusOr<LeaseOutcome>> outcomes = store->ApplyLeaseBatch(ops, clock);
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok());
  EXPECT_TRUE(outcomes[0]->allowed);
  EXPECT_EQ(outcomes[0]->lease.held, 1);
  EXPECT_EQ(outcomes[1]->lease.state, LeaseState::kReleased);
  EXPECT_EQ(store->lease_record_writes() - before, 1u);
  EXPECT_EQ(HeldRecords(*store, clock, 1), (Held{{"b", 1}}));
}

// A burst answers in the order its calls came, but decides its releases first: each decision
// carries its place among the key's decisions (LeaseDecision::seq), so that what reports a key's
// latest count (the held-slots gauge) can tell the burst's last decision from its last answer.
// Decided alone (an acquire with a rate limit) or in a run, after an earlier call: larger each.
TEST(RocksDbLeaseTest, DecisionsAreNumberedInTheOrderMadeNotTheOrderAnswered) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<LeaseOutcome> earlier =
      store->ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 3, "a")}, clock);
  ASSERT_TRUE(earlier.ok() && earlier->allowed) << earlier.status();
  EXPECT_GT(earlier->lease.seq, 0u);
  LimitOp rate;
  rate.key = StateKey{"calls", "tenant"};
  rate.config = TokenBucket(10, kSecond, 10);
  rate.count = 1;
  const std::vector<LeaseOperation> burst = {
      LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 3, "b")},
      LeaseOperation{LeaseOpOf(LeaseAction::kRelease, 3, "a")},
      LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 3, "c"), absl::MakeConstSpan(&rate, 1)}};
  std::vector<const LeaseOperation*> ops = {&burst[0], &burst[1], &burst[2]};
  std::vector<absl::StatusOr<LeaseOutcome>> outcomes = store->ApplyLeaseBatch(ops, clock);
  ASSERT_EQ(outcomes.size(), 3u);
  for (const absl::StatusOr<LeaseOutcome>& o : outcomes) ASSERT_TRUE(o.ok()) << o.status();
  const LeaseDecision& acquired = outcomes[0]->lease;
  const LeaseDecision& released = outcomes[1]->lease;
  const LeaseDecision& with_rate = outcomes[2]->lease;
  EXPECT_EQ(released.state, LeaseState::kReleased);
  EXPECT_EQ(released.held, 0);
  EXPECT_EQ(acquired.held, 1);
  EXPECT_EQ(with_rate.held, 2);
  EXPECT_GT(released.seq, earlier->lease.seq);
  EXPECT_GT(acquired.seq, released.seq);
  EXPECT_GT(with_rate.seq, acquired.seq);
}

// An acquire in a run takes the record a release of the run freed, even when a lower number is
// free: the record is written once for the two decisions.
TEST(RocksDbLeaseTest, ARunsAcquireTakesTheRecordItsReleaseFreed) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  for (const char* id : {"a", "b", "c"}) {
    absl::StatusOr<LeaseOutcome> held =
        store->ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 3, id)}, clock);
    ASSERT_TRUE(held.ok() && held->allowed) << held.status();
  }
  EXPECT_EQ(HeldRecords(*store, clock, 3), (Held{{"a", 1}, {"b", 2}, {"c", 3}}));
  // Record 1 free: the lowest number no lease holds.
  LeaseOp release = LeaseOpOf(LeaseAction::kRelease, 3, "a");
  ASSERT_TRUE(store->ApplyLease(LeaseOperation{release}, clock).ok());
  const uint64_t before = store->lease_record_writes();
  release.lease_id = NamedId("c");
  const std::vector<LeaseOperation> run = {
      LeaseOperation{release}, LeaseOperation{LeaseOpOf(LeaseAction::kAcquire, 3, "d")}};
  std::vector<const LeaseOperation*> ops = {&run[0], &run[1]};
  std::vector<absl::StatusOr<LeaseOutcome>> outcomes = store->ApplyLeaseBatch(ops, clock);
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok());
  EXPECT_EQ(outcomes[0]->lease.state, LeaseState::kReleased);
  EXPECT_TRUE(outcomes[1]->allowed);
  EXPECT_EQ(store->lease_record_writes() - before, 1u);
  EXPECT_EQ(HeldRecords(*store, clock, 3), (Held{{"b", 2}, {"d", 3}}));
  // As written: the same after a restart.
  ASSERT_TRUE(store->Close().ok());
  store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(HeldRecords(*store, clock, 3), (Held{{"b", 2}, {"d", 3}}));
}

// Random decisions, each on the RocksDB store and on the memory store (the reference of
// ApplyLeaseWithRecords) side by side: every answer the same. Acquires (a third with one of
// `request_ids` request_ids), releases and extends of leases handed out (some held, some released
// or expired, some unknown), resets, lists and checks, drawn from `actions`; the clock moving by up
// to `max_step_us` against TTLs of ttl_s.first..ttl_s.second seconds. The RocksDB store is reopened
// every `reopen_every` decisions, half the time without its cache, so what it wrote is what it
// decides on. Returns the most slots a key held.
struct RandomDecisions {
  std::vector<LeaseAction> actions;
  double capacity = 4;
  int keys = 3;
  int steps = 600;
  int reopen_every = 25;
  int64_t max_step_us = 3 * kSecond;
  std::pair<int, int> ttl_s = {1, 20};
  int max_count = 2;    // an acquire's or check's slots: 1..max_count
  int request_ids = 8;  // how many request_ids the acquires that carry one draw from
  // Releases and extends name one of the last `recent` leases handed out.
  size_t recent = 1'000'000;
  uint32_t seed = 20261129;
};

int64_t DecideAtRandomBesideTheMemoryStore(const RandomDecisions& p) {
  TempDir dir;
  FakeClock clock;
  MemoryStateStore memory;
  std::unique_ptr<RocksDbStateStore> rocks;
  auto open = [&](size_t cache_bytes) {
    rocks.reset();
    RocksDbStateStoreOptions o;
    o.path = dir.File("db");
    o.clock = &clock;
    o.lease_cache_bytes = cache_bytes;
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status();
    rocks = *std::move(opened);
  };
  // The store's default cache: a key's set of hundreds of leases stays cached between decisions
  // (with its index) where a smaller cache would drop it after each.
  const size_t kCacheBytes = RocksDbStateStoreOptions().lease_cache_bytes;
  open(kCacheBytes);
  int64_t most_held = 0;
  std::mt19937 rng(p.seed);
  auto pick = [&rng](size_t n) { return static_cast<int>(rng() % n); };
  std::vector<LeaseId> ids;  // every lease id handed out
  for (int step = 0; step < p.steps; ++step) {
    if (step % p.reopen_every == p.reopen_every - 1) open(pick(2) == 0 ? 0 : kCacheBytes);
    clock.Advance(static_cast<int64_t>(rng() % static_cast<uint64_t>(p.max_step_us + 1)));
    // One draw a statement: the order of a call's arguments is the compiler's, and the sequence
    // must be the same under every compiler.
    const LeaseAction action = p.actions[pick(p.actions.size())];
    const int key = pick(p.keys);
    LeaseOp op = LeaseOpOf(action, p.capacity, "", "jobs", absl::StrCat("k", key));
    op.ttl_us = (p.ttl_s.first + pick(p.ttl_s.second - p.ttl_s.first + 1)) * kSecond;
    op.count = 1 + pick(p.max_count);
    if (op.action == LeaseAction::kAcquire) {
      op.lease_id = NamedId(absl::StrCat("lease-", step));
      ids.push_back(op.lease_id);
      if (pick(3) == 0) op.request_id = absl::StrCat("req-", pick(p.request_ids));
    } else if (op.action == LeaseAction::kRelease || op.action == LeaseAction::kExtend) {
      op.lease_id = ids.empty() || pick(8) == 0
                        ? NamedId("unknown")
                        : ids[ids.size() - 1 - pick(std::min(ids.size(), p.recent))];
    }
    const absl::StatusOr<LeaseOutcome> want = memory.ApplyLease(LeaseOperation{op}, clock);
    const absl::StatusOr<LeaseOutcome> got = rocks->ApplyLease(LeaseOperation{op}, clock);
    EXPECT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
    if (!want.ok() || !got.ok()) return most_held;
    most_held = std::max(most_held, want->lease.held);
    SCOPED_TRACE(absl::StrCat("step ", step, " action ", static_cast<int>(op.action), " key ",
                              op.key.key, " lease ", op.lease_id.ToString()));
    EXPECT_EQ(got->allowed, want->allowed);
    EXPECT_EQ(got->lease.state, want->lease.state);
    EXPECT_EQ(got->lease.replayed, want->lease.replayed);
    EXPECT_EQ(got->lease.held, want->lease.held);
    EXPECT_EQ(got->lease.free, want->lease.free);
    EXPECT_EQ(got->lease.retry_at_us, want->lease.retry_at_us);
    EXPECT_EQ(got->lease.lease, want->lease.lease);
    EXPECT_EQ(ById(got->lease.held_leases), ById(want->lease.held_leases));
    if (::testing::Test::HasFailure()) return most_held;
  }
  return most_held;
}

// Three keys of capacity 4: every action, often expired leases.
TEST(RocksDbLeaseTest, RandomDecisionsMatchTheMemoryStoreAcrossRestarts) {
  RandomDecisions p;
  p.actions = {LeaseAction::kAcquire, LeaseAction::kAcquire, LeaseAction::kAcquire,
               LeaseAction::kRelease, LeaseAction::kRelease, LeaseAction::kExtend,
               LeaseAction::kReset,   LeaseAction::kList,    LeaseAction::kCheck};
  DecideAtRandomBesideTheMemoryStore(p);
}

// One key holding hundreds of leases, past the size from which a set finds leases by their
// positions (lease_set_index.h): releases and extends found by position, new leases numbered from
// the record numbers kept, retried acquires told from new ones by the request_ids counted, and the
// summary carried from one call to the next, through expiries, restarts and a reset now and then.
TEST(RocksDbLeaseTest, RandomDecisionsOnAKeyHoldingHundredsMatchTheMemoryStore) {
  RandomDecisions p;
  p.actions.assign(12, LeaseAction::kAcquire);
  p.actions.insert(p.actions.end(), 6, LeaseAction::kRelease);
  p.actions.insert(p.actions.end(), 2, LeaseAction::kExtend);
  p.actions.push_back(LeaseAction::kCheck);
  p.actions.push_back(LeaseAction::kList);
  const std::vector<LeaseAction> one = p.actions;
  p.capacity = 2 * LeaseSetIndex::kPositionsFrom;
  p.keys = 1;
  p.steps = 2000;
  p.reopen_every = 250;
  p.max_step_us = kSecond / 4;
  p.ttl_s = {30, 300};
  p.recent = 600;
  p.max_count = 1;  // slots held = leases held
  p.seed = 20261201;
  EXPECT_GT(DecideAtRandomBesideTheMemoryStore(p), LeaseSetIndex::kPositionsFrom);
  // Again with a reset about every 1,300 decisions (the set emptied by the algebra fills again),
  // and request_ids drawn from 1,000, so that most are new and answered absent from the counts.
  p.actions.clear();
  for (int i = 0; i < 60; ++i) p.actions.insert(p.actions.end(), one.begin(), one.end());
  p.actions.push_back(LeaseAction::kReset);
  p.request_ids = 1000;
  p.seed = 20261202;
  EXPECT_GT(DecideAtRandomBesideTheMemoryStore(p), LeaseSetIndex::kPositionsFrom);
}

// 1,000 threads, each acquiring a slot of a capacity-10 limit twice (retrying while refused),
// holding it a moment, and releasing it; a shared counter of holders, raised after each acquire
// and lowered before each release, never exceeds 10. The clock stands still, so no lease expires
// while held: any excess is the store's.
TEST(RocksDbLeaseTest, NeverMoreHoldersThanCapacityAmongAThousandThreads) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<RocksDbStateStore> store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 1000;
  constexpr int kHoldsEach = 2;
  constexpr double kCapacity = 10;
  std::atomic<int> holders{0};
  std::atomic<int> most{0};
  std::atomic<int> errors{0};
  std::atomic<int> acquired{0};
  // A caller refused a slot sleeps until a holder has released one since it asked, then asks
  // again; each release wakes one sleeper. (Spinning, 990 callers starved the 10 holders of the
  // CPU they need to release.) This paces the callers only: the store alone decides who holds.
  absl::Mutex mu;
  absl::CondVar released;
  uint64_t releases = 0;  // guarded by mu
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int h = 0; h < kHoldsEach; ++h) {
        const std::string id = absl::StrCat("lease-", t, "-", h);
        LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, kCapacity, id);
        for (;;) {
          uint64_t releases_seen = 0;
          {
            absl::MutexLock lock(&mu);
            releases_seen = releases;
          }
          absl::StatusOr<LeaseOutcome> out = store->ApplyLease(LeaseOperation{op}, clock);
          if (!out.ok()) {
            ++errors;
            return;
          }
          if (out->allowed) break;
          absl::MutexLock lock(&mu);
          while (releases == releases_seen) released.Wait(&mu);
        }
        const int now_holding = ++holders;
        int seen = most.load();
        while (now_holding > seen && !most.compare_exchange_weak(seen, now_holding)) {
        }
        ++acquired;
        std::this_thread::yield();
        --holders;
        op.action = LeaseAction::kRelease;
        absl::StatusOr<LeaseOutcome> freed = store->ApplyLease(LeaseOperation{op}, clock);
        if (!freed.ok() || freed->lease.state != LeaseState::kReleased) ++errors;
        absl::MutexLock lock(&mu);
        ++releases;
        released.Signal();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(acquired.load(), kThreads * kHoldsEach);
  EXPECT_LE(most.load(), 10);
  EXPECT_GT(most.load(), 1);  // the callers did overlap
  absl::StatusOr<LeaseOutcome> list =
      store->ApplyLease(LeaseOperation{LeaseOpOf(LeaseAction::kList, kCapacity)}, clock);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->lease.held, 0);
}

}  // namespace
}  // namespace ratelimit
