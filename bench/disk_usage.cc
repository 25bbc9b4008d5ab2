// ratelimit_disk_usage: bytes on disk per idle key, before and after garbage collection.
//
// Writes --keys distinct keys through the Limiter on a RocksDbStateStore in a new directory (one
// Consume each, of a token bucket of capacity 10 refilled 10 per --period, so each state is
// non-full for period/10), flushes and compacts, and reports the states column family's SST
// bytes per key. Then it moves its clock past every state's refill time and compacts again: the
// compaction filter drops states that are full again, so the bytes per key should fall to about
// zero; that one collection (CollectGarbage, what the server's --gc_interval timer runs) is
// timed. The clock is this program's own (SteppingClock), given to both the Limiter and the
// store's garbage collector, so nothing sleeps.
//
// Usage: ratelimit_disk_usage [--keys=1000000] [--dir=DIR] [--json]
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "storage/clock.h"
#include "storage/limiter.h"
#include "storage/rocksdb/rocksdb_state_store.h"

ABSL_FLAG(int64_t, keys, 1000000, "number of distinct keys to write");
ABSL_FLAG(std::string, dir, "",
          "data directory to create (must not exist); default: a new directory under $TMPDIR, "
          "removed at exit");
ABSL_FLAG(std::string, name, "disk_usage", "limit name");
ABSL_FLAG(std::string, key_format, "user-%07d", "printf format of the i-th key");
ABSL_FLAG(absl::Duration, period, absl::Seconds(60), "refill period of the limit");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");

namespace ratelimit {
namespace {

// A clock that only moves when told to. Starts at 2023-11-14T22:13:20Z.
class SteppingClock final : public Clock {
 public:
  int64_t NowMicros() const override { return now_us_.load(std::memory_order_relaxed); }
  void Advance(absl::Duration d) {
    now_us_.fetch_add(absl::ToInt64Microseconds(d), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> now_us_{int64_t{1700000000} * 1000000};
};

// Total size of the regular files under `dir` (SSTs, WAL, MANIFEST, OPTIONS, ...).
uint64_t DirectoryBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) total += entry.file_size(ec);
  }
  return total;
}

struct Snapshot {
  uint64_t sst_bytes = 0;
  uint64_t dir_bytes = 0;
  uint64_t estimated_states = 0;
};

Snapshot Measure(RocksDbStateStore& store, const std::string& dir) {
  return Snapshot{store.LiveSstBytes(), DirectoryBytes(dir), store.EstimateNumStates()};
}

int Run(const std::string& dir) {
  const int64_t n = absl::GetFlag(FLAGS_keys);
  const std::string name = absl::GetFlag(FLAGS_name);
  const absl::Duration period = absl::GetFlag(FLAGS_period);
  const std::unique_ptr<absl::ParsedFormat<'d'>> format =
      absl::ParsedFormat<'d'>::New(absl::GetFlag(FLAGS_key_format));
  if (n <= 0 || format == nullptr) {
    std::fprintf(stderr, "--keys must be > 0 and --key_format take one integer (%%d)\n");
    return 2;
  }

  SteppingClock clock;
  RocksDbStateStoreOptions options;
  options.path = dir;
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "open %s: %s\n", dir.c_str(), opened.status().ToString().c_str());
    return 1;
  }
  RocksDbStateStore& store = **opened;
  Limiter limiter(store, clock);

  std::vector<LimitRequest> request(1);
  request[0].name = name;
  request[0].config.kind = LimitKind::kTokenBucket;
  request[0].config.rate = 10;
  request[0].config.capacity = 10;
  request[0].config.period_us = absl::ToInt64Microseconds(period);
  uint64_t key_bytes = 0;
  const absl::Time write_start = absl::Now();
  for (int64_t i = 0; i < n; ++i) {
    request[0].key = absl::StrFormat(*format, i);
    key_bytes += request[0].key.size();
    absl::StatusOr<Verdict> verdict = limiter.Evaluate(request, Mode::kConsume);
    if (!verdict.ok() || !verdict->allowed) {
      std::fprintf(stderr, "consume %s failed: %s\n", request[0].key.c_str(),
                   verdict.ok() ? "denied" : verdict.status().ToString().c_str());
      return 1;
    }
  }
  const double write_seconds = absl::ToDoubleSeconds(absl::Now() - write_start);

  if (absl::Status s = store.CompactAll(); !s.ok()) {
    std::fprintf(stderr, "compact: %s\n", s.ToString().c_str());
    return 1;
  }
  const Snapshot before = Measure(store, dir);

  // Every state refills within period/10 of its write; step well past that.
  // Then one collection, as the server's --gc_interval timer runs it, with no write meanwhile.
  clock.Advance(period + absl::Seconds(1));
  const absl::Time gc_start = absl::Now();
  if (absl::Status s = store.CollectGarbage(); !s.ok()) {
    std::fprintf(stderr, "collect garbage: %s\n", s.ToString().c_str());
    return 1;
  }
  const double gc_seconds = absl::ToDoubleSeconds(absl::Now() - gc_start);
  const Snapshot after = Measure(store, dir);

  const double keys = static_cast<double>(n);
  // Encoded key: 2-byte name length + name + key; value: 24 bytes (state_codec.h).
  const double payload = static_cast<double>((2 + name.size()) * n + key_bytes + 24 * n) / keys;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"keys\": %lld, \"payload_bytes_per_key\": %.1f, \"write_seconds\": %.2f, "
        "\"sst_bytes_before_gc\": %llu, \"sst_bytes_per_key_before_gc\": %.2f, "
        "\"dir_bytes_before_gc\": %llu, \"estimated_states_before_gc\": %llu, "
        "\"sst_bytes_after_gc\": %llu, \"sst_bytes_per_key_after_gc\": %.4f, "
        "\"dir_bytes_after_gc\": %llu, \"estimated_states_after_gc\": %llu, "
        "\"gc_seconds\": %.3f}\n",
        static_cast<long long>(n), payload, write_seconds,
        static_cast<unsigned long long>(before.sst_bytes), before.sst_bytes / keys,
        static_cast<unsigned long long>(before.dir_bytes),
        static_cast<unsigned long long>(before.estimated_states),
        static_cast<unsigned long long>(after.sst_bytes), after.sst_bytes / keys,
        static_cast<unsigned long long>(after.dir_bytes),
        static_cast<unsigned long long>(after.estimated_states), gc_seconds);
  } else {
    std::printf("keys written:                %lld (%.2f s, one Consume each)\n",
                static_cast<long long>(n), write_seconds);
    std::printf("encoded key+value per key:   %.1f bytes\n", payload);
    std::printf(
        "before GC (compacted):       %llu SST bytes = %.2f bytes/key; directory %llu "
        "bytes; ~%llu states\n",
        static_cast<unsigned long long>(before.sst_bytes), before.sst_bytes / keys,
        static_cast<unsigned long long>(before.dir_bytes),
        static_cast<unsigned long long>(before.estimated_states));
    std::printf(
        "after GC (all refilled):     %llu SST bytes = %.4f bytes/key; directory %llu "
        "bytes; ~%llu states\n",
        static_cast<unsigned long long>(after.sst_bytes), after.sst_bytes / keys,
        static_cast<unsigned long long>(after.dir_bytes),
        static_cast<unsigned long long>(after.estimated_states));
    std::printf("one collection (CollectGarbage) of %lld idle keys: %.3f s\n",
                static_cast<long long>(n), gc_seconds);
  }
  if (absl::Status s = store.Close(); !s.ok()) {
    std::fprintf(stderr, "close: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_disk_usage [--keys=N] [--dir=DIR] [--json]: bytes on disk per idle key before "
      "and after compaction");
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_dir);
  const bool temporary = dir.empty();
  if (temporary) {
    const char* tmp = getenv("TMPDIR");
    dir =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ratelimit-disk-usage-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
  } else if (std::filesystem::exists(dir)) {
    std::fprintf(stderr, "--dir %s already exists\n", dir.c_str());
    return 2;
  }
  const int rc = ratelimit::Run(dir);
  if (temporary) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return rc;
}
