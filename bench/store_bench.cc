// In-process benchmark of Consume decisions: Limiter::Evaluate on the RocksDB store (default
// options: WAL on, no fsync, 256 MiB cache of hot states), on the RocksDB store without its state
// cache (every decision reads RocksDB: cold keys), on the RocksDB store with sync=true (one fsync
// per write group), and on the in-memory store; one hot key, or 1M distinct keys; 1 and 2
// threads, and 8 threads (more callers than cores, as with many reactors: concurrent decisions
// share WAL writes). Batch100: Limiter::EvaluateBatch of 100 Consume decisions in one call (one
// WAL write for the batch); items = decisions. ConsumeAsync64: Limiter::EvaluateAsync from one
// thread, 64 decisions outstanding, each answered once written (the server's way of calling the
// store).
//
// Reported per benchmark: items_per_second = decisions per second (all threads, wall-clock),
// and the user counters p50_us / p99_us = latency of one Evaluate call, from per-call samples of
// every thread merged. The clock reads add about 20 ns to each sample.
// ConsumeAsync64 on RocksDB also reports per_write: decisions per WAL write (group commit).
//
// The limit always allows, so every call takes the write path: a token bucket of capacity 1e12
// (a run makes far fewer calls) refilled by one token per hour, so that no state is ever full
// again during the run and the compaction filter keeps every state the benchmark wrote.
//
// The 1M-key benchmarks are pre-populated: before the first one runs on a store, each of the 1M
// keys is consumed once (untimed), so timed calls read an existing state, as on a busy service.
// Each thread walks a pre-shuffled list of those keys from its own offset.
//
// Usage: ratelimit_store_bench [--benchmark_filter=...] [other Google Benchmark flags]
// The RocksDB stores live in a new directory under $TMPDIR (default /tmp), removed at exit.
// RATELIMIT_BENCH_WAL_MMAP=0 writes their WAL with a write(2) per group instead of through the
// mapping (RocksDbStateStoreOptions::map_wal), to compare the two in one build.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_main.h"
#include "bench/latency.h"
#include "benchmark/benchmark.h"
#include "storage/clock.h"
#include "storage/limiter.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"

namespace ratelimit {
namespace {

constexpr char kLimitName[] = "bench";
constexpr char kHotKey[] = "hot";
constexpr size_t kDistinctKeys = 1'000'000;

enum class StoreKind { kRocksDb, kRocksDbSync, kMemory, kRocksDbNoCache };
enum class Keys { kHot, kDistinct };

LimitConfig AlwaysAllowConfig() {
  LimitConfig config;
  config.kind = LimitKind::kTokenBucket;
  config.rate = 1;
  config.period_us = int64_t{3600} * 1000000;
  config.capacity = 1e12;
  return config;
}

// The stores of the process, opened on first use and shared by every benchmark (the 1- and
// 2-thread runs of one benchmark use the same store), and the distinct keys.
class Fixture {
 public:
  static Fixture& Get() {
    static Fixture* fixture = new Fixture();
    return *fixture;
  }

  // Where the RocksDB stores are created. Set once, before any benchmark runs.
  void set_dir(const std::string& dir) { dir_ = dir; }

  // The store of `kind`, opened if needed, and pre-populated with the distinct keys when
  // `keys` is kDistinct. Aborts when RocksDB cannot be opened or written.
  StateStore& StoreFor(StoreKind kind, Keys keys) {
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[static_cast<int>(kind)];
    if (slot.store == nullptr) slot.store = OpenLocked(kind);
    if (keys == Keys::kDistinct && !slot.populated) {
      PopulateLocked(*slot.store);
      slot.populated = true;
    }
    return *slot.store;
  }

  // The distinct keys ("k0000000".."k0999999"), and an order to visit them in.
  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<uint32_t>& order() const { return order_; }

  // Closes every store.
  void CloseAll() {
    absl::MutexLock lock(&mu_);
    for (Slot& slot : slots_) slot.store.reset();
  }

 private:
  struct Slot {
    std::unique_ptr<StateStore> store;
    bool populated = false;
  };

  Fixture() {
    keys_.reserve(kDistinctKeys);
    order_.reserve(kDistinctKeys);
    for (size_t i = 0; i < kDistinctKeys; ++i) {
      keys_.push_back(absl::StrFormat("k%07d", i));
      order_.push_back(static_cast<uint32_t>(i));
    }
    std::mt19937_64 rng(42);
    std::shuffle(order_.begin(), order_.end(), rng);
  }

  std::unique_ptr<StateStore> OpenLocked(StoreKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (kind == StoreKind::kMemory) return std::make_unique<MemoryStateStore>();
    RocksDbStateStoreOptions options;
    options.sync = kind == StoreKind::kRocksDbSync;
    options.path = dir_ + (options.sync                         ? "/sync"
                           : kind == StoreKind::kRocksDbNoCache ? "/nocache"
                                                                : "/default");
    if (kind == StoreKind::kRocksDbNoCache) options.state_cache_bytes = 0;
    const char* map_wal = getenv("RATELIMIT_BENCH_WAL_MMAP");
    options.map_wal = map_wal == nullptr || std::string(map_wal) != "0";
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> store = RocksDbStateStore::Open(options);
    if (!store.ok()) {
      std::fprintf(stderr, "cannot open %s: %s\n", options.path.c_str(),
                   store.status().ToString().c_str());
      std::abort();
    }
    return *std::move(store);
  }

  void PopulateLocked(StateStore& store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Limiter limiter(store, SystemClock::Default());
    std::vector<LimitRequest> request = {{kLimitName, "", AlwaysAllowConfig(), 1}};
    for (const std::string& key : keys_) {
      request[0].key = key;
      absl::StatusOr<Verdict> verdict = limiter.Evaluate(request, Mode::kConsume);
      if (!verdict.ok() || !verdict->allowed) {
        std::fprintf(stderr, "pre-populating failed: %s\n", verdict.status().ToString().c_str());
        std::abort();
      }
    }
  }

  std::string dir_;
  std::vector<std::string> keys_;
  std::vector<uint32_t> order_;
  absl::Mutex mu_;
  Slot slots_[4] ABSL_GUARDED_BY(mu_);
};

// Merges the latency samples of the threads of one benchmark run. Thread 0 calls Begin before
// the timed loop (no other thread gets past the loop's start barrier before thread 0 reaches
// it), every thread calls Add after the loop, and thread 0 calls Wait for the merged samples.
class LatencyCollector {
 public:
  void Begin(int threads) {
    absl::MutexLock lock(&mu_);
    expected_ = threads;
    added_ = 0;
    samples_.clear();
  }

  void Add(const std::vector<int64_t>& samples) {
    absl::MutexLock lock(&mu_);
    samples_.insert(samples_.end(), samples.begin(), samples.end());
    ++added_;
  }

  LatencySummary Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &LatencyCollector::AllAddedLocked));
    return Summarize(samples_);
  }

 private:
  bool AllAddedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return added_ == expected_; }

  absl::Mutex mu_;
  int expected_ ABSL_GUARDED_BY(mu_) = 0;
  int added_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> samples_ ABSL_GUARDED_BY(mu_);
};

LatencyCollector& Collector() {
  static LatencyCollector* collector = new LatencyCollector();
  return *collector;
}

void BM_Consume(benchmark::State& state, StoreKind kind, Keys keys) {
  Fixture& fixture = Fixture::Get();
  StateStore& store = fixture.StoreFor(kind, keys);
  Limiter limiter(store, SystemClock::Default());
  if (state.thread_index() == 0) Collector().Begin(state.threads());

  const std::vector<std::string>& distinct = fixture.keys();
  const std::vector<uint32_t>& order = fixture.order();
  size_t next = static_cast<size_t>(state.thread_index()) * (order.size() / state.threads());
  std::vector<LimitRequest> request = {{kLimitName, kHotKey, AlwaysAllowConfig(), 1}};
  std::vector<int64_t> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));

  for (auto _ : state) {
    if (keys == Keys::kDistinct) {
      request[0].key = distinct[order[next]];
      if (++next == order.size()) next = 0;
    }
    const int64_t start = MonotonicNanos();
    absl::StatusOr<Verdict> verdict = limiter.Evaluate(request, Mode::kConsume);
    samples.push_back(MonotonicNanos() - start);
    if (!verdict.ok() || !verdict->allowed) {
      state.SkipWithError(verdict.ok() ? "denied" : verdict.status().ToString().c_str());
      break;
    }
  }

  state.SetItemsProcessed(state.iterations());
  Collector().Add(samples);
  if (state.thread_index() == 0) {
    const LatencySummary latency = Collector().Wait();
    state.counters["p50_us"] = latency.p50_us;
    state.counters["p99_us"] = latency.p99_us;
  }
}

// Limiter::EvaluateAsync from one thread with up to kInFlight decisions outstanding, as the
// server's handlers call the store: each decision is its own call (no Batch), answered once it is
// in the WAL (on RocksDB, by its WAL writer thread, which writes the decisions made while the
// previous write ran in one group). items = decisions answered; p50_us / p99_us = from the call
// to its answer. The timer stops when the loop ends, before the last <= kInFlight answers (a
// negligible share of a run's decisions).
void BM_ConsumeAsync(benchmark::State& state, StoreKind kind, Keys keys) {
  constexpr int kInFlight = 64;
  Fixture& fixture = Fixture::Get();
  StateStore& store = fixture.StoreFor(kind, keys);
  Limiter limiter(store, SystemClock::Default());

  const std::vector<std::string>& distinct = fixture.keys();
  const std::vector<uint32_t>& order = fixture.order();
  size_t next = 0;
  std::vector<LimitRequest> request = {{kLimitName, kHotKey, AlwaysAllowConfig(), 1}};
  std::vector<int64_t> samples(static_cast<size_t>(state.max_iterations));
  size_t started = 0;
  auto* rocksdb = dynamic_cast<RocksDbStateStore*>(&store);
  const GroupCommit::Stats group_before =
      rocksdb ? rocksdb->group_commit_stats() : GroupCommit::Stats();

  absl::Mutex mu;
  int in_flight = 0;  // guarded by mu
  std::string error;  // guarded by mu: the first failure
  const auto below_limit = [](int* n) { return *n < kInFlight; };
  const auto none = [](int* n) { return *n == 0; };

  for (auto _ : state) {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(+below_limit, &in_flight));
      if (!error.empty()) {
        state.SkipWithError(error.c_str());
        break;
      }
      ++in_flight;
    }
    if (keys == Keys::kDistinct) {
      request[0].key = distinct[order[next]];
      if (++next == order.size()) next = 0;
    }
    const int64_t start = MonotonicNanos();
    const size_t index = started++;
    limiter.EvaluateAsync(request, Mode::kConsume,
                          [&, start, index](absl::StatusOr<Verdict> verdict) {
                            samples[index] = MonotonicNanos() - start;
                            absl::MutexLock lock(&mu);
                            if ((!verdict.ok() || !verdict->allowed) && error.empty()) {
                              error = verdict.ok() ? "denied" : verdict.status().ToString();
                            }
                            --in_flight;
                          });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+none, &in_flight));
    if (!error.empty() && !state.error_occurred()) state.SkipWithError(error.c_str());
  }
  state.SetItemsProcessed(static_cast<int64_t>(started));
  samples.resize(started);
  const LatencySummary latency = Summarize(samples);
  state.counters["p50_us"] = latency.p50_us;
  state.counters["p99_us"] = latency.p99_us;
  if (rocksdb != nullptr) {
    // Decisions per WAL write: how many decisions each group commit carried.
    const GroupCommit::Stats after = rocksdb->group_commit_stats();
    const uint64_t writes = after.writes - group_before.writes;
    if (writes > 0) {
      state.counters["per_write"] =
          static_cast<double>(after.tickets - group_before.tickets) / static_cast<double>(writes);
    }
  }
}

// Limiter::EvaluateBatch of kBatch Consume decisions per call; items = decisions.
void BM_Batch(benchmark::State& state, StoreKind kind, Keys keys) {
  constexpr size_t kBatch = 100;
  Fixture& fixture = Fixture::Get();
  StateStore& store = fixture.StoreFor(kind, keys);
  Limiter limiter(store, SystemClock::Default());
  if (state.thread_index() == 0) Collector().Begin(state.threads());

  const std::vector<std::string>& distinct = fixture.keys();
  const std::vector<uint32_t>& order = fixture.order();
  size_t next = static_cast<size_t>(state.thread_index()) * (order.size() / state.threads());
  std::vector<LimitRequest> requests(kBatch, {kLimitName, kHotKey, AlwaysAllowConfig(), 1});
  std::vector<BatchItem> items;
  for (const LimitRequest& r : requests) items.push_back({absl::MakeConstSpan(&r, 1)});
  std::vector<int64_t> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));

  for (auto _ : state) {
    if (keys == Keys::kDistinct) {
      for (LimitRequest& r : requests) {
        r.key = distinct[order[next]];
        if (++next == order.size()) next = 0;
      }
    }
    const int64_t start = MonotonicNanos();
    std::vector<absl::StatusOr<Verdict>> verdicts = limiter.EvaluateBatch(items);
    samples.push_back(MonotonicNanos() - start);
    for (const absl::StatusOr<Verdict>& verdict : verdicts) {
      if (!verdict.ok() || !verdict->allowed) {
        state.SkipWithError(verdict.ok() ? "denied" : verdict.status().ToString().c_str());
        break;
      }
    }
  }

  state.SetItemsProcessed(state.iterations() * kBatch);
  Collector().Add(samples);
  if (state.thread_index() == 0) {
    const LatencySummary latency = Collector().Wait();
    state.counters["p50_us"] = latency.p50_us;  // of one call of kBatch decisions
    state.counters["p99_us"] = latency.p99_us;
  }
}

void RegisterAll() {
  struct Variant {
    const char* name;
    StoreKind kind;
    Keys keys;
  };
  const Variant variants[] = {
      {"Consume/rocksdb/hot_key", StoreKind::kRocksDb, Keys::kHot},
      {"Consume/rocksdb/1M_keys", StoreKind::kRocksDb, Keys::kDistinct},
      {"Consume/memory/hot_key", StoreKind::kMemory, Keys::kHot},
      {"Consume/memory/1M_keys", StoreKind::kMemory, Keys::kDistinct},
      {"Consume/rocksdb_sync/hot_key", StoreKind::kRocksDbSync, Keys::kHot},
      {"Consume/rocksdb_nocache/1M_keys", StoreKind::kRocksDbNoCache, Keys::kDistinct},
  };
  for (const Variant& v : variants) {
    benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(
        v.name, [v](benchmark::State& state) { BM_Consume(state, v.kind, v.keys); });
    b->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
    if (v.kind != StoreKind::kMemory) b->Threads(8);
    // fsync per write group: a short fixed time is enough to measure its cost.
    if (v.kind == StoreKind::kRocksDbSync) b->MinTime(1.0);
  }
  const Variant asyncs[] = {
      {"ConsumeAsync64/rocksdb/hot_key", StoreKind::kRocksDb, Keys::kHot},
      {"ConsumeAsync64/rocksdb/1M_keys", StoreKind::kRocksDb, Keys::kDistinct},
  };
  for (const Variant& v : asyncs) {
    benchmark::RegisterBenchmark(
        v.name, [v](benchmark::State& state) { BM_ConsumeAsync(state, v.kind, v.keys); })
        ->Threads(1)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  const Variant batches[] = {
      {"Batch100/rocksdb/hot_key", StoreKind::kRocksDb, Keys::kHot},
      {"Batch100/rocksdb/1M_keys", StoreKind::kRocksDb, Keys::kDistinct},
      {"Batch100/memory/1M_keys", StoreKind::kMemory, Keys::kDistinct},
  };
  for (const Variant& v : batches) {
    benchmark::RegisterBenchmark(v.name,
                                 [v](benchmark::State& state) { BM_Batch(state, v.kind, v.keys); })
        ->Threads(1)
        ->Threads(2)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  return ratelimit::bench::RunStoreBenchmarks(
      argc, argv, "ratelimit-store-bench",
      [](const std::string& dir) {
        ratelimit::Fixture::Get().set_dir(dir);
        ratelimit::RegisterAll();
      },
      [] { ratelimit::Fixture::Get().CloseAll(); });
}
