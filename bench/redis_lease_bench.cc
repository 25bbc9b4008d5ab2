// Concurrency leases on the Redis store, beside Consume in the same run: decisions per second of
// RedisStateStore::Apply (one token bucket, Consume) and of acquire+release pairs
// (RedisStateStore::ApplyLease), on one hot key and on --keys random keys, --threads callers each
// waiting for its answer; then the memory a held lease costs: --held leases acquired on one key
// and on --keys keys, `used_memory` of the primaries before and after; and with the leases held on
// the keys, one pass of the leak sweep's search, its time and the primaries' CPU per key.
//
// Usage: ratelimit_redis_lease_bench --redis_address=host:port[,...] [--seconds=5] [--threads=32]
//   [--keys=10000] [--held=1000000]
// Prints markdown rows on stdout. Uses key prefix "bench-lease:" and deletes what it wrote.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/leases/lease.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/redis_state_store.h"

ABSL_FLAG(std::string, redis_address, "127.0.0.1:6379", "Redis seeds, comma-separated");
ABSL_FLAG(int, seconds, 5, "seconds per workload");
ABSL_FLAG(int, threads, 32, "callers, each waiting for its answer");
ABSL_FLAG(int, keys, 10000, "distinct keys of the many-keys workloads");
ABSL_FLAG(int64_t, held, 1000000, "leases held for the memory figure (0: skip)");

namespace ratelimit {
namespace {

constexpr int64_t kSecond = 1000000;

LimitConfig Slots(double capacity) {
  LimitConfig c;
  c.kind = LimitKind::kConcurrency;
  c.capacity = capacity;
  c.lease_ttl_us = 30 * kSecond;
  c.max_lease_ttl_us = 3600 * kSecond;
  return c;
}

LeaseOp Op(std::string key, double capacity, LeaseAction action, LeaseId id) {
  LeaseOp op;
  op.key = StateKey{"bench_slots", std::move(key)};
  op.config = Slots(capacity);
  op.action = action;
  op.ttl_us = 600 * kSecond;
  op.lease_id = id;
  return op;
}

std::unique_ptr<RedisStateStore> OpenStore() {
  redis::RedisClusterClient::Options co;
  co.seeds = absl::GetFlag(FLAGS_redis_address);
  auto client = redis::RedisClusterClient::Connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    std::exit(1);
  }
  RedisStateStoreOptions options;
  options.key_prefix = "bench-lease:";
  auto store = RedisStateStore::Open(*std::move(client), options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(store);
}

// Runs `one(thread, i)` on every thread for --seconds; calls per second (each `one` counts as
// what it returns).
template <typename Fn>
double Rate(Fn one) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < absl::GetFlag(FLAGS_threads); ++t) {
    threads.emplace_back([&, t] {
      int64_t mine = 0;
      for (int64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) mine += one(t, i);
      done += mine;
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (std::thread& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(done.load()) / elapsed;
}

// The sum over the primaries of the number after `field` (e.g. "used_memory:") in INFO `section`.
double SumInfo(redis::RedisClusterClient& client, const char* section, absl::string_view field) {
  auto replies = client.ExecuteOnEachPrimarySync({"INFO", section});
  double total = 0;
  if (!replies.ok()) return 0;
  for (const redis::NodeReply& r : *replies) {
    if (!r.reply.ok()) continue;
    for (absl::string_view line : absl::StrSplit(r.reply->str, "\r\n")) {
      double value = 0;
      if (absl::ConsumePrefix(&line, field) && absl::SimpleAtod(line, &value)) total += value;
    }
  }
  return total;
}

double UsedMemory(redis::RedisClusterClient& client) {
  return SumInfo(client, "memory", "used_memory:");
}

// CPU seconds the primaries have used (user and system).
double PrimariesCpu(redis::RedisClusterClient& client) {
  return SumInfo(client, "cpu", "used_cpu_user:") + SumInfo(client, "cpu", "used_cpu_sys:");
}

// Keys on the primaries.
double KeyCount(redis::RedisClusterClient& client) {
  auto replies = client.ExecuteOnEachPrimarySync({"DBSIZE"});
  double total = 0;
  if (!replies.ok()) return 0;
  for (const redis::NodeReply& r : *replies) {
    if (r.reply.ok()) total += static_cast<double>(r.reply->integer);
  }
  return total;
}

// One pass of the leak sweep's search over the store (StateStore::FindLeakedLeaseKeys, every page
// of every primary), timed: its wall time and the CPU it cost the primaries, over the keys of
// the keyspace (the SCAN reads them all) and over the lease sets (each gets a ZCOUNT).
void LeakSearchPass(RedisStateStore& store, redis::RedisClusterClient& client, int64_t lease_sets) {
  const double keyspace = KeyCount(client);
  const double cpu_before = PrimariesCpu(client);
  const auto start = std::chrono::steady_clock::now();
  std::string cursor;
  int64_t found = 0;
  do {
    auto page = store.FindLeakedLeaseKeys(cursor, SystemClock::Default().NowMicros());
    if (!page.ok()) {
      std::fprintf(stderr, "leak search: %s\n", page.status().ToString().c_str());
      return;
    }
    found += static_cast<int64_t>(page->keys.size());
    cursor = page->next;
  } while (!cursor.empty());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = PrimariesCpu(client) - cpu_before;
  std::printf(
      "| leak search, one pass (%.0f keys, %lld lease sets, %lld found) | %.1f ms, primaries' "
      "CPU %.1f ms: %.0f ns a key | |\n",
      keyspace, static_cast<long long>(lease_sets), static_cast<long long>(found), wall * 1e3,
      cpu * 1e3, keyspace > 0 ? cpu * 1e9 / keyspace : 0);
}

void Run() {
  std::unique_ptr<RedisStateStore> store = OpenStore();
  const Clock& clock = SystemClock::Default();
  const int keys = absl::GetFlag(FLAGS_keys);
  std::printf("| workload | hot key | %d keys |\n|---|---|---|\n", keys);

  auto consume = [&](bool hot) {
    return Rate([&, hot](int t, int64_t i) -> int64_t {
      LimitConfig c;
      c.rate = 1e12;
      c.period_us = kSecond;
      const LimitOp limit{StateKey{"bench_rate", hot ? "hot" : absl::StrCat((t * 7919 + i) % keys)},
                          c, 1};
      return store->Apply(Operation{absl::MakeConstSpan(&limit, 1)}, clock).ok() ? 1 : 0;
    });
  };
  auto pairs = [&](bool hot) {
    return Rate([&, hot](int t, int64_t i) -> int64_t {
      const std::string key = hot ? "hot" : absl::StrCat((t * 7919 + i) % keys);
      const LeaseId id = LeaseId::New();
      auto got = store->ApplyLease(LeaseOperation{Op(key, 1e9, LeaseAction::kAcquire, id)}, clock);
      if (!got.ok() || !got->allowed) return 0;
      auto released =
          store->ApplyLease(LeaseOperation{Op(key, 1e9, LeaseAction::kRelease, id)}, clock);
      return released.ok() && released->lease.state == LeaseState::kReleased ? 1 : 0;
    });
  };
  const double c_hot = consume(true), c_many = consume(false);
  const double p_hot = pairs(true), p_many = pairs(false);
  std::printf("| Consume (1 token bucket), calls/s | %.0f | %.0f |\n", c_hot, c_many);
  std::printf("| acquire+release pairs/s | %.0f | %.0f |\n", p_hot, p_many);
  std::printf("| pair / Consume | %.2f | %.2f |\n", p_hot / c_hot, p_many / c_many);

  const int64_t held = absl::GetFlag(FLAGS_held);
  if (held > 0) {
    redis::RedisClusterClient::Options co;
    co.seeds = absl::GetFlag(FLAGS_redis_address);
    auto client = redis::RedisClusterClient::Connect(co);
    if (!client.ok()) return;
    for (bool hot : {true, false}) {
      const double before = UsedMemory(**client);
      std::atomic<int64_t> next{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < absl::GetFlag(FLAGS_threads); ++t) {
        threads.emplace_back([&, hot] {
          for (int64_t n = next++; n < held; n = next++) {
            const std::string key = hot ? "held" : absl::StrCat("held", n % keys);
            const LeaseId id = LeaseId::New();
            (void)store->ApplyLease(LeaseOperation{Op(key, 1e9, LeaseAction::kAcquire, id)}, clock);
          }
        });
      }
      for (std::thread& t : threads) t.join();
      const int64_t acquired = held;
      const double after = UsedMemory(**client);
      std::printf("| bytes per held lease (%lld on %s) | %.0f | |\n",
                  static_cast<long long>(acquired), hot ? "one key" : "the keys",
                  (after - before) / static_cast<double>(acquired));
      if (!hot) LeakSearchPass(*store, **client, std::min<int64_t>(keys, held));
      (void)store->DeleteAllLeases(LimitSource::kDefined, "bench_slots",
                                   SystemClock::Default().NowMicros());
    }
  }
  (void)store->DeleteAllLeases(LimitSource::kDefined, "bench_slots",
                               SystemClock::Default().NowMicros());
  (void)store->DeleteAll(LimitSource::kDefined, "bench_rate");
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ratelimit::Run();
  return 0;
}
