// The cache of hot states: its memory bound, entries queued for the WAL never evicted before they
// are written, epochs; and the RocksDB store with a cache far too small for its keys, under random
// operations (batches with repeated keys, resets, reopens), answering exactly like the in-memory
// reference: evictions never lose or resurrect a state.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "storage/rocksdb/state_cache.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TempDir;

StateCache::Entry Stored(double value) { return StateCache::Entry{State{value, 1, 2}, 0}; }

TEST(StateCacheTest, StaysWithinItsMemoryBound) {
  std::atomic<uint64_t> resolved{0};
  const size_t bound = 64 * StateCache::ChargeOf(8);
  StateCache cache(bound, resolved);
  for (int i = 0; i < 10000; ++i) {
    cache.Put(absl::StrFormat("key%05d", i), Stored(i), 1);
    ASSERT_LE(cache.bytes(), bound) << i;
  }
  EXPECT_GT(cache.entries(), 0u);
  EXPECT_EQ(cache.evictions(), 10000 - cache.entries());
  // The most recent key is there; the oldest is gone.
  auto hit = cache.Lookup("key09999", 1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->state->value, 9999);
  EXPECT_FALSE(cache.Lookup("key00000", 1).has_value());
}

TEST(StateCacheTest, QueuedEntriesAreKeptUntilResolved) {
  std::atomic<uint64_t> resolved{0};
  const size_t bound = 16 * StateCache::ChargeOf(8);
  StateCache cache(bound, resolved);
  for (int i = 0; i < 200; ++i) {
    cache.Put(absl::StrFormat("qkey%04d", i), StateCache::Entry{State{1.0 * i, 1, 2}, 10}, 1);
  }
  for (int i = 0; i < 2000; ++i) cache.Put(absl::StrFormat("ckey%04d", i), Stored(i), 1);
  // Over the bound, but every queued entry is still there.
  for (int i = 0; i < 200; ++i) {
    auto hit = cache.Lookup(absl::StrFormat("qkey%04d", i), 1);
    ASSERT_TRUE(hit.has_value()) << i;
    EXPECT_EQ(hit->ticket, 10u);
  }
  // Once written, they go like any other.
  resolved = 10;
  for (int i = 0; i < 2000; ++i) cache.Put(absl::StrFormat("dkey%04d", i), Stored(i), 1);
  EXPECT_LE(cache.bytes(), bound);
}

TEST(StateCacheTest, AnotherEpochMissesAndZeroBoundKeepsOnlyQueuedEntries) {
  std::atomic<uint64_t> resolved{0};
  StateCache cache(1 << 20, resolved);
  cache.Put("k", Stored(3), 1);
  EXPECT_TRUE(cache.Lookup("k", 1).has_value());
  EXPECT_FALSE(cache.Lookup("k", 2).has_value());

  StateCache none(0, resolved);
  none.Put("stored", Stored(1), 1);
  EXPECT_FALSE(none.Lookup("stored", 1).has_value());
  none.Put("queued", StateCache::Entry{State{2, 1, 2}, 1}, 1);
  EXPECT_TRUE(none.Lookup("queued", 1).has_value());
  resolved = 1;
  // Eviction runs per shard on Put: queue entries in every shard.
  for (int i = 0; i < 1000; ++i) {
    none.Put(absl::StrCat("queued", i), StateCache::Entry{State{2, 1, 2}, 2}, 1);
  }
  EXPECT_FALSE(none.Lookup("queued", 1).has_value()) << "written: no longer kept";
  EXPECT_EQ(none.entries(), 1000u);
}

void ExpectSameVerdict(const absl::StatusOr<Verdict>& a, const absl::StatusOr<Verdict>& b,
                       int step) {
  ASSERT_EQ(a.ok(), b.ok()) << "step " << step << ": " << a.status() << " / " << b.status();
  if (!a.ok()) return;
  ASSERT_EQ(a->allowed, b->allowed) << "step " << step;
  ASSERT_EQ(a->decisions.size(), b->decisions.size());
  for (size_t i = 0; i < a->decisions.size(); ++i) {
    ASSERT_EQ(a->decisions[i].allowed, b->decisions[i].allowed) << "step " << step;
    ASSERT_NEAR(a->decisions[i].value, b->decisions[i].value, 1e-9) << "step " << step;
    ASSERT_EQ(a->decisions[i].retry_at_us, b->decisions[i].retry_at_us) << "step " << step;
  }
}

class TinyCachePropertyTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(TinyCachePropertyTest, StoreWithATinyCacheMatchesTheReferenceModel) {
  std::mt19937 rng(GetParam());
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  TempDir dir;
  FakeClock clock;
  FakeClock gc_clock(0);  // never drops a state: the reference keeps them all
  RocksDbStateStoreOptions options;
  options.path = dir.path() + "/db";
  options.clock = &gc_clock;
  // About two entries per shard, for hundreds of keys: nearly every read is a miss and nearly
  // every decision evicts.
  options.state_cache_bytes = 32 * StateCache::ChargeOf(12);
  auto rocks = RocksDbStateStore::Open(options);
  ASSERT_OK(rocks);
  MemoryStateStore memory;
  Limiter reference(memory, clock);
  auto limiter = std::make_unique<Limiter>(**rocks, clock);

  LimitConfig config;
  config.kind = LimitKind::kTokenBucket;
  config.rate = 3;
  config.period_us = kSecond;
  config.capacity = 20;
  config.max_reserved = 10;
  constexpr int kKeys = 300;
  auto request = [&] {
    LimitRequest r;
    r.name = pick(8) == 0 ? "other" : "pt";
    r.key = absl::StrCat("key", pick(kKeys));
    r.config = config;
    r.count = 1 + pick(6);
    return r;
  };

  uint64_t evictions = 0;
  for (int step = 0; step < 4000; ++step) {
    clock.Advance(pick(4) == 0 ? pick(2 * kSecond) : 0);
    const int op = pick(100);
    if (op < 3) {
      const std::string key = absl::StrCat("key", pick(kKeys));
      ASSERT_OK(reference.Reset("pt", key));
      ASSERT_OK(limiter->Reset("pt", key));
    } else if (op < 4) {
      ASSERT_OK(reference.ResetAll("other"));
      ASSERT_OK(limiter->ResetAll("other"));
    } else if (op < 5) {  // reopen: the states come back unchanged, the cache starts empty
      evictions += (*rocks)->state_cache().evictions();
      limiter.reset();
      ASSERT_OK((*rocks)->Close());
      rocks = RocksDbStateStore::Open(options);
      ASSERT_OK(rocks);
      limiter = std::make_unique<Limiter>(**rocks, clock);
    } else if (op < 35) {
      // A batch with repeated keys: each later operation on a key must see the earlier ones,
      // queued and not written yet, whatever the evictions meanwhile.
      std::vector<LimitRequest> reqs;
      const int n = 2 + pick(30);
      reqs.reserve(n);
      for (int i = 0; i < n; ++i) {
        reqs.push_back(request());
        if (i > 0 && pick(3) == 0) reqs.back().key = reqs[pick(i)].key;
      }
      std::vector<BatchItem> items;
      for (const LimitRequest& r : reqs) {
        items.push_back(
            BatchItem{absl::MakeConstSpan(&r, 1), pick(3) == 0 ? Mode::kReserve : Mode::kConsume});
      }
      std::vector<absl::StatusOr<Verdict>> want = reference.EvaluateBatch(items);
      std::vector<absl::StatusOr<Verdict>> got = limiter->EvaluateBatch(items);
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) ExpectSameVerdict(want[i], got[i], step);
    } else {
      std::vector<LimitRequest> reqs = {request()};
      if (pick(3) == 0) reqs.push_back(request());
      if (reqs.size() == 2 && reqs[0].key == reqs[1].key && reqs[0].name == reqs[1].name) {
        reqs.pop_back();
      }
      const Mode mode = op < 80 ? Mode::kConsume : op < 90 ? Mode::kReserve : Mode::kCheck;
      ExpectSameVerdict(reference.Evaluate(reqs, mode), limiter->Evaluate(reqs, mode), step);
    }
    if (HasFatalFailure()) return;
    if (step % 250 == 0) {
      // Every state reads back as the reference's.
      for (int k = 0; k < kKeys; ++k) {
        for (const char* name : {"pt", "other"}) {
          const StateKey key{name, absl::StrCat("key", k)};
          auto want = memory.Get(key);
          auto got = (*rocks)->Get(key);
          ASSERT_OK(want);
          ASSERT_OK(got);
          ASSERT_EQ(*want, *got) << "step " << step << " " << name << "/" << k;
        }
      }
    }
  }
  evictions += (*rocks)->state_cache().evictions();
  EXPECT_GT(evictions, 1000u) << "the cache was not under pressure";
}

INSTANTIATE_TEST_SUITE_P(Seeds, TinyCachePropertyTest, ::testing::Values(1u, 2u, 3u));

}  // namespace
}  // namespace ratelimit
