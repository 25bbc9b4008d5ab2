// In-process benchmark of concurrency limits on the RocksDB store (default options: WAL on, no
// fsync): acquire+release pairs (StateStore::ApplyLease, two decisions each) beside Consume
// (StateStore::Apply of one token bucket) in the same run, on one hot key and on 10,000 keys,
// with 1 and 4 threads, and on a key holding 64 to 20,000 leases (AcquireReleaseCrowded, with a
// request_id AcquireWithRequestIdCrowded, with one lease expiring at each pair
// RetriedAcquiresExpiring, refused on a full key RefusedOnFullKey); bursts as a server hands them
// to the store (BurstOnHotKey, SteadyBurstOnHotKey, BurstOnManyKeys: Consume and pairs side by
// side); and the memory a held lease costs with 1,000,000 held.
//
// Reported: items_per_second = Consume decisions, or acquire+release pairs, per second (all
// threads, wall-clock); decisions_per_second for pairs = 2 x pairs.
// HeldLeases1M (one iteration): acquires 1,000,000 leases (100,000 keys x 10 slots, 4 threads,
// 1-hour TTL, a 32-hex-digit id, no request_id or holder, as a plain Acquire makes them) and
// reports encoded_bytes_per_lease (the bytes of a lease's record, key and value, as stored),
// sst_bytes_per_lease (RocksDB's live SST files after a flush and compaction) and
// rss_bytes_per_lease (the process's resident memory grown while acquiring), then times one pass of
// the leak sweep's search over them (leak_search_ns_per_lease: a pass's time over the leases).
//
// Usage: ratelimit_lease_bench [--benchmark_filter=...] [other Google Benchmark flags]
// The stores live in a new directory under $TMPDIR (default /tmp), removed at exit.
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_main.h"
#include "benchmark/benchmark.h"
#include "storage/clock.h"
#include "storage/leases/apply_lease.h"
#include "storage/rocksdb/lease_record.h"
#include "storage/rocksdb/rocksdb_state_store.h"

namespace ratelimit {
namespace {

constexpr int kKeys = 10'000;
constexpr int64_t kHour = int64_t{3600} * 1000000;

std::string g_dir;
std::unique_ptr<RocksDbStateStore> g_shared;  // closed by main

// One store for the throughput benchmarks, opened on first use.
RocksDbStateStore& SharedStore() {
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  if (g_shared == nullptr) {
    RocksDbStateStoreOptions options;
    options.path = g_dir + "/shared";
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
      std::abort();
    }
    g_shared = *std::move(opened);
  }
  return *g_shared;
}

LimitConfig Bucket() {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = 1;
  c.period_us = kHour;
  c.capacity = 1e12;
  return c;
}

LimitConfig Slots(double capacity) {
  LimitConfig c;
  c.kind = LimitKind::kConcurrency;
  c.capacity = capacity;
  c.lease_ttl_us = kHour;
  c.max_lease_ttl_us = kHour;
  return c;
}

std::string KeyOf(int i) { return absl::StrFormat("k%05d", i); }

// A unique lease id for `n` that, like the server's random ids, differs from the others in its
// first word (a counter's ids share it, so every comparison of two would compare both words).
LeaseId IdOf(uint64_t n) {
  const uint64_t mixed = (n ^ (n >> 29)) * 0xbf58476d1ce4e5b9u;
  return LeaseId::FromWords(mixed ^ (mixed >> 32), n + 1);
}

void Fail(const absl::Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::abort();
}

// range(0): 1 = one hot key, else kKeys keys visited in turn.
void BM_Consume(benchmark::State& state) {
  StateStore& store = SharedStore();
  const bool hot = state.range(0) == 1;
  LimitOp limit;
  limit.key = StateKey{"consume", "hot"};
  limit.config = Bucket();
  int i = state.thread_index() * 997;
  for (auto _ : state) {
    if (!hot) limit.key.key = KeyOf(i++ % kKeys);
    absl::StatusOr<Outcome> out =
        store.Apply(Operation{absl::MakeConstSpan(&limit, 1)}, SystemClock::Default());
    if (!out.ok() || !out->allowed) Fail(out.status());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Consume)->ArgName("hot")->Arg(1)->Arg(0)->Threads(1)->Threads(4)->UseRealTime();

// Acquires a new lease `id` on the key of `op` and releases it, both at `clock`'s time; any
// error or refusal ends the benchmark.
void Pair(StateStore& store, LeaseOp& op, LeaseId id, const Clock& clock = SystemClock::Default()) {
  op.lease_id = id;
  op.action = LeaseAction::kAcquire;
  absl::StatusOr<LeaseOutcome> acquired = store.ApplyLease(LeaseOperation{op}, clock);
  if (!acquired.ok() || !acquired->allowed) Fail(acquired.status());
  op.action = LeaseAction::kRelease;
  absl::StatusOr<LeaseOutcome> released = store.ApplyLease(LeaseOperation{op}, clock);
  if (!released.ok() || released->lease.state != LeaseState::kReleased) Fail(released.status());
}

void ReportPairs(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations());
  state.counters["decisions_per_second"] =
      benchmark::Counter(2.0 * state.iterations(), benchmark::Counter::kIsRate);
}

// Acquires leases on the key of `op` (new ids from `next_id`) until it holds `n`, and returns the
// ids acquired (none when it held `n` or more already); any error or refusal ends the benchmark.
// The benchmarks' stores are shared across runs, so a key keeps what an earlier run left.
std::vector<LeaseId> HoldUpTo(StateStore& store, LeaseOp op, std::atomic<uint64_t>& next_id,
                              int64_t n) {
  op.action = LeaseAction::kCheck;
  absl::StatusOr<LeaseOutcome> held = store.ApplyLease(LeaseOperation{op}, SystemClock::Default());
  if (!held.ok()) Fail(held.status());
  op.action = LeaseAction::kAcquire;
  std::vector<LeaseId> ids;
  for (int64_t k = held->lease.held; k < n; ++k) {
    op.lease_id = IdOf(next_id++);
    absl::StatusOr<LeaseOutcome> taken =
        store.ApplyLease(LeaseOperation{op}, SystemClock::Default());
    if (!taken.ok() || !taken->allowed) Fail(taken.status());
    ids.push_back(op.lease_id);
  }
  return ids;
}

void BM_AcquireRelease(benchmark::State& state) {
  StateStore& store = SharedStore();
  const bool hot = state.range(0) == 1;
  static std::atomic<uint64_t> next_id{0};
  LeaseOp op;
  op.key = StateKey{"pairs", "hot"};
  op.config = Slots(1000);
  op.ttl_us = kHour;
  int i = state.thread_index() * 997;
  for (auto _ : state) {
    if (!hot) op.key.key = KeyOf(i++ % kKeys);
    Pair(store, op, IdOf(next_id++));
  }
  ReportPairs(state);
}
BENCHMARK(BM_AcquireRelease)->ArgName("hot")->Arg(1)->Arg(0)->Threads(1)->Threads(4)->UseRealTime();

// The op of a key of limit `name` (1,000,000 slots, 1-hour leases) that holds state.range(0)
// leases: taken once per key, since a key's set keeps them across repetitions.
LeaseOp CrowdedKey(StateStore& store, absl::string_view name, std::atomic<uint64_t>& next_id,
                   const benchmark::State& state) {
  LeaseOp op;
  op.key = StateKey{std::string(name), absl::StrCat("held", state.range(0))};
  op.config = Slots(1'000'000);
  op.ttl_us = kHour;
  if (state.thread_index() == 0) HoldUpTo(store, op, next_id, state.range(0));
  return op;
}

// A pair on a hot key that already holds range(0) leases, as a hot key does end to end with many
// calls in flight (before per-lease records, each decision then wrote the whole set), and as a
// key of a large capacity does (20,000 seats of a licence): a decision's cost should not grow with
// the leases held.
void BM_AcquireReleaseCrowded(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{1} << 40};
  LeaseOp op = CrowdedKey(store, "crowded", next_id, state);
  for (auto _ : state) {
    Pair(store, op, IdOf(next_id++));
  }
  ReportPairs(state);
}
BENCHMARK(BM_AcquireReleaseCrowded)
    ->ArgName("held")
    ->Arg(64)
    ->Arg(1000)
    ->Arg(20000)
    ->Threads(1)
    ->UseRealTime();

// As BM_AcquireReleaseCrowded, each acquire with a request_id of its own (a client that retries
// safely): is it a retry? A released lease with a request_id stays in the set until it expires
// (lease.h), so the set grows by one lease a pair; a fixed number of pairs, so that two builds
// are measured on the same sets.
void BM_AcquireWithRequestIdCrowded(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{1} << 41};
  LeaseOp op = CrowdedKey(store, "crowded-retried", next_id, state);
  for (auto _ : state) {
    const uint64_t n = next_id++;
    op.request_id = absl::StrCat("request-", n);
    Pair(store, op, IdOf(n));
  }
  ReportPairs(state);
}
BENCHMARK(BM_AcquireWithRequestIdCrowded)
    ->ArgName("held")
    ->Arg(1000)
    ->Arg(20000)
    ->Iterations(5000)
    ->Threads(1)
    ->UseRealTime();

// A clock the benchmark moves: `now` microseconds.
class SteppedClock final : public Clock {
 public:
  explicit SteppedClock(int64_t now) : now_(now) {}
  int64_t NowMicros() const override { return now_; }
  void Advance(int64_t us) { now_ += us; }

 private:
  int64_t now_;
};

// A busy key whose clients retry safely, in its steady state: every acquire carries a request_id
// of its own and is released at once, and time moves 1 ms a pair, with a lease_ttl of range(0) ms.
// A released lease with a request_id stays in the set until it expires (lease.h), so the key keeps
// about range(0) released leases, and one of them expires at every pair: each decision finds an
// expired lease to drop. Its cost should not grow with the leases kept.
void BM_RetriedAcquiresExpiring(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{1} << 42};
  constexpr int64_t kStepUs = 1000;
  const int64_t kept = state.range(0);
  SteppedClock clock(SystemClock::Default().NowMicros());
  LeaseOp op;
  op.key = StateKey{"expiring", absl::StrCat("kept", kept, "-", next_id.load())};
  op.config = Slots(1'000'000);
  op.ttl_us = kept * kStepUs;
  const auto pair = [&] {
    const uint64_t n = next_id++;
    op.request_id = absl::StrCat("request-", n);
    Pair(store, op, IdOf(n), clock);
    clock.Advance(kStepUs);
  };
  for (int64_t i = 0; i < 2 * kept; ++i) pair();  // the steady state: `kept` kept, one expiring
  for (auto _ : state) pair();
  ReportPairs(state);
}
BENCHMARK(BM_RetriedAcquiresExpiring)
    ->ArgName("kept")
    ->Arg(100)
    ->Arg(1000)
    ->Arg(20000)
    ->Iterations(5000)
    ->Threads(1)
    ->UseRealTime();

// An acquire refused by a full key holding range(0) leases (capacity range(0)): the answer says
// when a slot frees (retry_at, the soonest expiry of a held lease), as every refusal does. Its
// cost should not grow with the leases held.
void BM_RefusedOnFullKey(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{1} << 43};
  LeaseOp op;
  op.key = StateKey{"full", absl::StrCat("held", state.range(0))};
  op.config = Slots(static_cast<double>(state.range(0)));
  op.ttl_us = kHour;
  HoldUpTo(store, op, next_id, state.range(0));
  op.action = LeaseAction::kAcquire;
  for (auto _ : state) {
    op.lease_id = IdOf(next_id++);
    absl::StatusOr<LeaseOutcome> refused =
        store.ApplyLease(LeaseOperation{op}, SystemClock::Default());
    if (!refused.ok() || refused->allowed || !refused->lease.retry_at_us) Fail(refused.status());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RefusedOnFullKey)->ArgName("held")->Arg(64)->Arg(1000)->Arg(20000)->UseRealTime();

// A server's bursts on a hot key holding 64 leases: ApplyLeaseBatch of `burst` acquires, then
// one of their releases, as the serving loop hands the store the lease calls it read together.
// Reports pairs per second: against burst 1, what deciding a burst under one hold of the key
// (one read of its set, one write) saves per pair.
void BM_BurstOnHotKey(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{1} << 44};
  const int burst = static_cast<int>(state.range(0));
  LeaseOp op;
  op.key = StateKey{"burst", "hot"};
  op.config = Slots(1000);
  op.ttl_us = kHour;
  HoldUpTo(store, op, next_id, 64);
  std::vector<LeaseOperation> acquires(burst), releases(burst);
  std::vector<const LeaseOperation*> acquire_ptrs(burst), release_ptrs(burst);
  for (auto _ : state) {
    for (int i = 0; i < burst; ++i) {
      op.lease_id = IdOf(next_id++);
      op.action = LeaseAction::kAcquire;
      acquires[i] = LeaseOperation{op};
      acquire_ptrs[i] = &acquires[i];
      op.action = LeaseAction::kRelease;
      releases[i] = LeaseOperation{op};
      release_ptrs[i] = &releases[i];
    }
    for (const auto* ptrs : {&acquire_ptrs, &release_ptrs}) {
      for (const absl::StatusOr<LeaseOutcome>& outcome :
           store.ApplyLeaseBatch(*ptrs, SystemClock::Default())) {
        if (!outcome.ok() || !outcome->allowed) Fail(outcome.status());
      }
    }
  }
  state.counters["pairs_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * burst, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BurstOnHotKey)->ArgName("burst")->Arg(1)->Arg(16)->Threads(1)->UseRealTime();

// A hot key's bursts in a server's steady state: each slot's release and its next acquire arrive
// in the same burst, so one ApplyLeaseBatch interleaves `burst` releases of the previous burst's
// leases with `burst` new acquires (the key holds 64 leases besides). A release frees its lease's
// record and the acquire after it takes that number again: the run writes each record once.
// Reports pairs per second.
void BM_SteadyBurstOnHotKey(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{3} << 44};
  const int burst = static_cast<int>(state.range(0));
  LeaseOp op;
  op.key = StateKey{"steady", "hot"};
  op.config = Slots(1000);
  op.ttl_us = kHour;
  // 64 held (kept across runs on the shared store), then one lease per slot of the burst.
  HoldUpTo(store, op, next_id, 64);
  std::vector<LeaseId> held = HoldUpTo(store, op, next_id, 64 + burst);  // the last burst's
  if (held.size() != static_cast<size_t>(burst)) {
    Fail(absl::FailedPreconditionError("the key held more than 64 leases"));
  }
  std::vector<LeaseOperation> ops(2 * burst);
  std::vector<const LeaseOperation*> ptrs(2 * burst);
  for (auto _ : state) {
    for (int i = 0; i < burst; ++i) {
      op.action = LeaseAction::kRelease;
      op.lease_id = held[i];
      ops[2 * i] = LeaseOperation{op};
      op.action = LeaseAction::kAcquire;
      held[i] = IdOf(next_id++);
      op.lease_id = held[i];
      ops[2 * i + 1] = LeaseOperation{op};
    }
    for (int i = 0; i < 2 * burst; ++i) ptrs[i] = &ops[i];
    for (const absl::StatusOr<LeaseOutcome>& outcome :
         store.ApplyLeaseBatch(ptrs, SystemClock::Default())) {
      if (!outcome.ok() || !outcome->allowed) Fail(outcome.status());
    }
  }
  // Each slot's last lease is released, so that a later run on the shared store starts with 64.
  op.action = LeaseAction::kRelease;
  for (const LeaseId& id : held) {
    op.lease_id = id;
    absl::StatusOr<LeaseOutcome> released =
        store.ApplyLease(LeaseOperation{op}, SystemClock::Default());
    if (!released.ok()) Fail(released.status());
  }
  state.counters["pairs_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * burst, benchmark::Counter::kIsRate);
  state.counters["decisions_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2 * burst, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SteadyBurstOnHotKey)->ArgName("burst")->Arg(16)->Threads(1)->UseRealTime();

// What BM_SteadyBurstOnHotKey compares with: a server's bursts of Consumes on one hot key,
// ApplyBatch of `burst` (as many decisions as SteadyBurstOnHotKey/burst:16 makes in a burst).
// Reports decisions per second.
void BM_ConsumeBurstOnHotKey(benchmark::State& state) {
  StateStore& store = SharedStore();
  const int burst = static_cast<int>(state.range(0));
  LimitOp limit;
  limit.key = StateKey{"steady", "consumed"};
  limit.config = Bucket();
  const std::vector<Operation> ops(burst, Operation{absl::MakeConstSpan(&limit, 1)});
  for (auto _ : state) {
    for (const absl::StatusOr<Outcome>& out : store.ApplyBatch(ops, SystemClock::Default())) {
      if (!out.ok() || !out->allowed) Fail(out.status());
    }
  }
  state.counters["decisions_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * burst, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ConsumeBurstOnHotKey)->ArgName("burst")->Arg(32)->Threads(1)->UseRealTime();

// A server's bursts on many keys, as the serving loop hands them to the store at 10,000 keys:
// range(1) = 1, ApplyBatch of `burst` Consumes on `burst` keys; range(1) = 0, ApplyLeaseBatch of
// `burst` acquires on as many keys, then one of their releases. Reports decisions per second (a
// pair is two): the store's part of a decision in a burst, the same for both kinds when a pair
// costs the store what two Consumes do.
void BM_BurstOnManyKeys(benchmark::State& state) {
  StateStore& store = SharedStore();
  static std::atomic<uint64_t> next_id{uint64_t{1} << 48};
  const int burst = static_cast<int>(state.range(0));
  const bool consume = state.range(1) == 1;
  int next_key = 0;
  std::vector<LimitOp> limits(burst);
  std::vector<Operation> ops(burst);
  std::vector<LeaseOperation> acquires(burst), releases(burst);
  std::vector<const LeaseOperation*> acquire_ptrs(burst), release_ptrs(burst);
  int64_t decisions = 0;
  for (auto _ : state) {
    if (consume) {
      for (int i = 0; i < burst; ++i) {
        limits[i].key = StateKey{"many", KeyOf(next_key++ % kKeys)};
        limits[i].config = Bucket();
        ops[i] = Operation{absl::MakeConstSpan(&limits[i], 1)};
      }
      for (const absl::StatusOr<Outcome>& out : store.ApplyBatch(ops, SystemClock::Default())) {
        if (!out.ok() || !out->allowed) Fail(out.status());
      }
      decisions += burst;
      continue;
    }
    for (int i = 0; i < burst; ++i) {
      LeaseOp op;
      op.key = StateKey{"many", KeyOf(next_key++ % kKeys)};
      op.config = Slots(1000);
      op.ttl_us = kHour;
      op.lease_id = IdOf(next_id++);
      op.action = LeaseAction::kAcquire;
      acquires[i] = LeaseOperation{op};
      acquire_ptrs[i] = &acquires[i];
      op.action = LeaseAction::kRelease;
      releases[i] = LeaseOperation{std::move(op)};
      release_ptrs[i] = &releases[i];
    }
    for (const auto* ptrs : {&acquire_ptrs, &release_ptrs}) {
      for (const absl::StatusOr<LeaseOutcome>& outcome :
           store.ApplyLeaseBatch(*ptrs, SystemClock::Default())) {
        if (!outcome.ok() || !outcome->allowed) Fail(outcome.status());
      }
    }
    decisions += 2 * burst;
  }
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(decisions), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BurstOnManyKeys)
    ->ArgNames({"burst", "consume"})
    ->Args({32, 1})
    ->Args({32, 0})
    ->Threads(1)
    ->UseRealTime();

// The resident memory of the process, in bytes (Linux), or 0.
double RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024;
  }
  return 0;
}

void BM_HeldLeases1M(benchmark::State& state) {
  constexpr int kSetKeys = 100'000;
  constexpr int kPerKey = 10;
  constexpr int kThreads = 4;
  for (auto _ : state) {
    RocksDbStateStoreOptions options;
    options.path = g_dir + "/held";
    std::unique_ptr<RocksDbStateStore> store = *RocksDbStateStore::Open(options);
    const double rss_before = RssBytes();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        LeaseOp op;
        op.config = Slots(kPerKey);
        op.ttl_us = kHour;
        for (int k = t; k < kSetKeys; k += kThreads) {
          op.key = StateKey{"held", absl::StrFormat("k%06d", k)};
          for (int n = 0; n < kPerKey; ++n) {
            op.lease_id = IdOf(uint64_t(k) * kPerKey + n);
            absl::StatusOr<LeaseOutcome> out =
                store->ApplyLease(LeaseOperation{op}, SystemClock::Default());
            if (!out.ok() || !out->allowed) Fail(out.status());
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const double rss_after = RssBytes();
    // The records' bytes: per lease, its record's key and value as RocksDB stores them
    // (storage/rocksdb/lease_record.h).
    double record_bytes = 0;
    std::string bytes;
    LeaseOp list;
    list.config = Slots(kPerKey);
    list.action = LeaseAction::kList;
    for (int k = 0; k < kSetKeys; ++k) {
      list.key = StateKey{"held", absl::StrFormat("k%06d", k)};
      absl::StatusOr<LeaseOutcome> out =
          store->ApplyLease(LeaseOperation{list}, SystemClock::Default());
      if (!out.ok() || out->lease.held != kPerKey) Fail(out.status());
      const std::string prefix = LeaseEntryPrefix(list.key);
      for (const Lease& l : out->lease.held_leases) {
        LeaseEntryKey(prefix, l.record, &bytes);
        record_bytes += bytes.size();
        EncodeLeaseEntryRecord(l, &bytes);
        record_bytes += bytes.size();
      }
    }
    if (absl::Status s = store->CompactAll(); !s.ok()) Fail(s);
    const double leases = double{kSetKeys} * kPerKey;
    state.counters["encoded_bytes_per_lease"] = record_bytes / leases;
    // The SST files of the store's directory after the compaction: the records column family's
    // (the benchmark writes no other state).
    double sst_bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(options.path)) {
      if (entry.path().extension() == ".sst") sst_bytes += double(entry.file_size());
    }
    state.counters["sst_bytes_per_lease"] = sst_bytes / leases;
    state.counters["rss_bytes_per_lease"] = (rss_after - rss_before) / leases;
    // One pass of the leak sweep's search over them (none has expired: it reads every record and
    // names no key), from the SST files as a pass on a store past its memtable reads them.
    const absl::Time search_start = absl::Now();
    std::string cursor;
    do {
      absl::StatusOr<StateStore::LeakedLeaseKeys> page =
          store->FindLeakedLeaseKeys(cursor, SystemClock::Default().NowMicros());
      if (!page.ok()) Fail(page.status());
      if (!page->keys.empty()) Fail(absl::InternalError("the search named a key holding no leak"));
      cursor = page->next;
    } while (!cursor.empty());
    state.counters["leak_search_ns_per_lease"] =
        absl::ToDoubleNanoseconds(absl::Now() - search_start) / leases;
  }
}
BENCHMARK(BM_HeldLeases1M)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  return ratelimit::bench::RunStoreBenchmarks(
      argc, argv, "ratelimit-lease-bench", [](const std::string& dir) { ratelimit::g_dir = dir; },
      [] { ratelimit::g_shared.reset(); });
}
