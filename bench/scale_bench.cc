// ratelimit_scale_bench: how throughput, memory and disk behave as the number of distinct keys
// and the limits per request grow, in process, on the RocksDB store.
//
// For each --keys count N (a new data directory each): writes N distinct random keys through the
// Limiter (16 keys per request, every key touched once, so the whole set exists before
// timing), then for each --limits count L runs --seconds of requests of L keys picked at random
// from the N (Consume, one transaction per request, every one allowed and written), one thread.
// Reports requests/s and limit decisions/s, the process's resident memory (VmRSS from
// /proc/self/status) after populating and after the timed runs, RocksDB's own memory (memtables,
// block cache), and the data directory's bytes per key after a flush (and after the flush plus a
// full compaction).
//
// The limit always allows (a token bucket of capacity 1e12 refilling 1 token/hour), so every
// request takes the write path and no state is dropped by garbage collection.
//
// Usage: ratelimit_scale_bench [--keys=10000,1000000,10000000] [--limits=1,3,16] [--seconds=5]
//          [--block_cache_mb=64] [--state_cache_mb=256] [--json]
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "storage/clock.h"
#include "storage/limiter.h"
#include "storage/rocksdb/rocksdb_state_store.h"

ABSL_FLAG(std::string, keys, "10000,1000000,10000000", "comma-separated distinct key counts");
ABSL_FLAG(std::string, limits, "1,3,16", "comma-separated limits (keys) per request");
ABSL_FLAG(double, seconds, 5, "timed seconds per limits count");
ABSL_FLAG(int64_t, block_cache_mb, 64, "RocksDbStateStoreOptions::block_cache_bytes, in MiB");
ABSL_FLAG(int64_t, state_cache_mb, 256,
          "RocksDbStateStoreOptions::state_cache_bytes (the cache of hot states), in MiB");
ABSL_FLAG(std::string, dir, "", "parent of the data directories; default $TMPDIR or /tmp");
ABSL_FLAG(bool, json, false, "print one JSON object per line instead of text");

namespace ratelimit {
namespace {

constexpr size_t kPopulateWidth = 16;

LimitConfig AlwaysAllowConfig() {
  LimitConfig config;
  config.kind = LimitKind::kTokenBucket;
  config.rate = 1;
  config.period_us = int64_t{3600} * 1000000;
  config.capacity = 1e12;
  return config;
}

// The i-th key: 16 hex digits of a bijective mix of i, so keys are spread over the key space in
// an order unrelated to i (random keys, as user or IP keys would be).
std::string KeyOf(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return absl::StrFormat("%016x", z);
}

// A field of /proc/self/status, in KiB (VmRSS, VmHWM).
int64_t StatusKib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      int64_t kib = 0;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib;
    }
  }
  return -1;
}

uint64_t DirectoryBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) total += entry.file_size(ec);
  }
  return total;
}

std::vector<int64_t> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      std::fprintf(stderr, "--%s: not a list of positive integers: %s\n", flag.c_str(),
                   text.c_str());
      exit(2);
    }
    out.push_back(v);
  }
  return out;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

int RunKeys(int64_t n, const std::vector<int64_t>& limits, const std::string& parent) {
  const bool json = absl::GetFlag(FLAGS_json);
  const std::string dir = parent + absl::StrFormat("/scale-%d-%d", getpid(), n);
  std::filesystem::remove_all(dir);
  const int64_t rss_start_kib = StatusKib("VmRSS");
  RocksDbStateStoreOptions options;
  options.path = dir;
  options.block_cache_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_block_cache_mb)) << 20;
  options.state_cache_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_state_cache_mb)) << 20;
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> store = RocksDbStateStore::Open(options);
  if (!store.ok()) {
    std::fprintf(stderr, "open %s: %s\n", dir.c_str(), store.status().ToString().c_str());
    return 1;
  }
  Limiter limiter(**store, SystemClock::Default());
  const LimitConfig config = AlwaysAllowConfig();
  auto request = [&](uint64_t key) {
    return LimitRequest{"scale", KeyOf(key), config, 1, LimitSource::kDefined};
  };

  // Populate: every key once, kPopulateWidth keys per request.
  auto start = std::chrono::steady_clock::now();
  std::vector<LimitRequest> batch;
  for (int64_t i = 0; i < n;) {
    batch.clear();
    for (size_t j = 0; j < kPopulateWidth && i < n; ++j, ++i) batch.push_back(request(i));
    absl::StatusOr<Verdict> v = limiter.Evaluate(batch, Mode::kConsume);
    if (!v.ok() || !v->allowed) {
      std::fprintf(stderr, "populate: %s\n", v.ok() ? "denied" : v.status().ToString().c_str());
      return 1;
    }
  }
  const double populate_s = Seconds(start);
  const int64_t rss_populated_kib = StatusKib("VmRSS");
  if (!json) {
    std::printf("keys %lld: populated in %.1f s (%.0f keys/s), RSS %.0f MiB (+%.0f MiB)\n",
                static_cast<long long>(n), populate_s, n / populate_s, rss_populated_kib / 1024.0,
                (rss_populated_kib - rss_start_kib) / 1024.0);
  }

  std::mt19937_64 rng(n);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t l : limits) {
    const int64_t width = std::min<int64_t>(l, n);
    std::vector<LimitRequest> req;
    int64_t requests = 0;
    start = std::chrono::steady_clock::now();
    const double seconds = absl::GetFlag(FLAGS_seconds);
    double elapsed = 0;
    do {
      for (int k = 0; k < 256; ++k) {
        req.clear();
        while (static_cast<int64_t>(req.size()) < width) {
          LimitRequest r = request(pick(rng));
          bool duplicate = false;
          for (const LimitRequest& other : req) duplicate = duplicate || other.key == r.key;
          if (!duplicate) req.push_back(std::move(r));
        }
        absl::StatusOr<Verdict> v = limiter.Evaluate(req, Mode::kConsume);
        if (!v.ok() || !v->allowed) {
          std::fprintf(stderr, "run: %s\n", v.ok() ? "denied" : v.status().ToString().c_str());
          return 1;
        }
        ++requests;
      }
      elapsed = Seconds(start);
    } while (elapsed < seconds);
    const double rps = requests / elapsed;
    const int64_t rss_kib = StatusKib("VmRSS");
    // What the allocator keeps without using it: RSS once free pages are handed back.
    malloc_trim(0);
    const int64_t rss_trimmed_kib = StatusKib("VmRSS");
    const uint64_t memtables = (*store)->IntProperty("rocksdb.cur-size-all-mem-tables");
    const uint64_t cache = (*store)->IntProperty("rocksdb.block-cache-usage");
    const uint64_t pinned = (*store)->IntProperty("rocksdb.block-cache-pinned-usage");
    const uint64_t readers = (*store)->IntProperty("rocksdb.estimate-table-readers-mem");
    const uint64_t states = (*store)->state_cache().bytes();
    if (json) {
      std::printf(
          "{\"keys\": %lld, \"limits\": %lld, \"requests_per_s\": %.0f, \"decisions_per_s\": "
          "%.0f, \"rss_mib\": %.1f, \"rss_trimmed_mib\": %.1f, \"rss_populated_mib\": %.1f, "
          "\"rss_start_mib\": %.1f, "
          "\"memtables_mib\": %.1f, \"block_cache_mib\": %.1f, \"block_cache_pinned_mib\": %.1f, "
          "\"table_readers_mib\": %.1f, \"state_cache_mib\": %.1f, \"populate_keys_per_s\": "
          "%.0f}\n",
          static_cast<long long>(n), static_cast<long long>(l), rps, rps * width, rss_kib / 1024.0,
          rss_trimmed_kib / 1024.0, rss_populated_kib / 1024.0, rss_start_kib / 1024.0,
          MiB(memtables), MiB(cache), MiB(pinned), MiB(readers), MiB(states), n / populate_s);
    } else {
      std::printf(
          "keys %lld, %lld limits/request: %.0f requests/s, %.0f limits/s; RSS %.0f MiB "
          "(memtables %.0f MiB, block cache %.0f MiB, of it pinned %.0f MiB, table readers "
          "%.0f MiB, state cache %.0f MiB)\n",
          static_cast<long long>(n), static_cast<long long>(l), rps, rps * width, rss_kib / 1024.0,
          MiB(memtables), MiB(cache), MiB(pinned), MiB(readers), MiB(states));
    }
    std::fflush(stdout);
  }

  // Disk: after a flush of the memtables (Close flushes them), then after a full compaction.
  absl::Status closed = (*store)->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "close: %s\n", closed.ToString().c_str());
    return 1;
  }
  const uint64_t flushed_bytes = DirectoryBytes(dir);
  store->reset();
  store = RocksDbStateStore::Open(options);
  if (!store.ok()) {
    std::fprintf(stderr, "reopen: %s\n", store.status().ToString().c_str());
    return 1;
  }
  absl::Status compacted = (*store)->CompactAll();
  if (!compacted.ok()) {
    std::fprintf(stderr, "compact: %s\n", compacted.ToString().c_str());
    return 1;
  }
  (void)(*store)->Close();
  const uint64_t compacted_bytes = DirectoryBytes(dir);
  store->reset();
  if (json) {
    std::printf(
        "{\"keys\": %lld, \"disk_bytes_per_key_flushed\": %.1f, "
        "\"disk_bytes_per_key_compacted\": %.1f, \"rss_end_mib\": %.1f, \"rss_peak_mib\": %.1f}\n",
        static_cast<long long>(n), static_cast<double>(flushed_bytes) / n,
        static_cast<double>(compacted_bytes) / n, StatusKib("VmRSS") / 1024.0,
        StatusKib("VmHWM") / 1024.0);
  } else {
    std::printf("keys %lld: disk %.1f bytes/key after a flush, %.1f after a full compaction\n",
                static_cast<long long>(n), static_cast<double>(flushed_bytes) / n,
                static_cast<double>(compacted_bytes) / n);
  }
  std::fflush(stdout);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_scale_bench [--keys=10000,1000000,10000000] [--limits=1,3,16] [--seconds=5] "
      "[--block_cache_mb=64] [--state_cache_mb=256] [--json]: throughput, memory and disk as keys "
      "and limits per "
      "request grow (RocksDB store, in process)");
  absl::ParseCommandLine(argc, argv);
  // As the server does: absl's lock-order graph would otherwise cost every multi-key decision.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::vector<int64_t> keys = ratelimit::ParseList("keys", absl::GetFlag(FLAGS_keys));
  const std::vector<int64_t> limits = ratelimit::ParseList("limits", absl::GetFlag(FLAGS_limits));
  std::string parent = absl::GetFlag(FLAGS_dir);
  if (parent.empty()) {
    const char* tmp = getenv("TMPDIR");
    parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  for (int64_t n : keys) {
    if (int rc = ratelimit::RunKeys(n, limits, parent); rc != 0) return rc;
  }
  return 0;
}
