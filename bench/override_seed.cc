// ratelimit_override_seed: writes runtime overrides of one limit into a store, as a server would
// keep them, so that a benchmark can start ratelimit-server on a store that already holds many.
//
// Opens the store with OpenStateStore, as the server does: the RocksDB data directory --dir
// (created if missing), or with --redis_address the Redis Cluster (or standalone server) there,
// under --redis_key_prefix. Then makes --overrides changes through its OverrideStore::Modify, each
// a "set" with its audit entry as the OverrideService writes it: half exact keys ("k<i>"), half
// patterns of three shapes in turn
// ("tenant-<i>-*", "*-<i>", "p<i>-*-x"), each raising the limit's capacity to --capacity. None
// matches a key without a digit, such as the load generator's hot key "hot"; with --match=KEY,
// the last pattern is "KEY*" instead, which matches KEY, so that decisions on KEY use an override.
// The server checks an override against the limits file when it is set; this tool does not, so
// --name must be a limit of the file the server is started with (else the overrides are inert).
//
// Every change is durable before the next (as the server's are): on RocksDB synced to the WAL,
// which on a disk costs an fsync each, so put --dir on tmpfs (/dev/shm) for large counts; on
// Redis one compare-and-set round trip each.
//
// Usage: ratelimit_override_seed (--dir=DIR | --redis_address=HOST:PORT[,...]) [--name=ovr]
//          [--overrides=1000] [--match=KEY] [--capacity=1e12] [--json]
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/clock.h"
#include "storage/factory/state_store_factory.h"
#include "storage/overrides/override_store.h"

ABSL_FLAG(std::string, dir, "",
          "RocksDB data directory (created if missing); required unless --redis_address");
ABSL_FLAG(std::string, redis_address, "",
          "a Redis Cluster's (or server's) seed nodes host:port[,host:port...]: the overrides go "
          "there instead of --dir");
ABSL_FLAG(std::string, redis_key_prefix, "ratelimit:", "--redis_address: prefix of every key");
ABSL_FLAG(std::string, name, "ovr", "the limit the overrides adjust (a name of the limits file)");
ABSL_FLAG(int64_t, overrides, 1000, "overrides to write: half exact keys, half patterns");
ABSL_FLAG(std::string, match, "",
          "a key one pattern (\"KEY*\", in place of the last pattern) matches; empty: none of "
          "the overrides matches a key without a digit");
ABSL_FLAG(double, capacity, 1e12, "the capacity every override sets");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");

namespace ratelimit {
namespace {

constexpr char kActor[] = "ratelimit_override_seed";

// The target of the i-th override of `name` among `n`: exact keys and patterns alternately, the
// patterns of three shapes in turn; the last pattern is "<match>*" when `match` is not empty.
OverrideTarget SeedTarget(const std::string& name, int64_t i, int64_t n, const std::string& match) {
  OverrideTarget t;
  t.name = name;
  t.pattern = i % 2 == 1;
  const int64_t last_pattern = n % 2 == 0 ? n - 1 : n - 2;
  if (!t.pattern) {
    t.key = absl::StrCat("k", i);
  } else if (!match.empty() && i == last_pattern) {
    t.key = absl::StrCat(match, "*");
  } else if (i / 2 % 3 == 0) {
    t.key = absl::StrCat("tenant-", i, "-*");
  } else if (i / 2 % 3 == 1) {
    t.key = absl::StrCat("*-", i);
  } else {
    t.key = absl::StrCat("p", i, "-*-x");
  }
  return t;
}

// Sets the override of `target` as OverrideService::SetOverride does: the record replaces the
// target's, remembering the action in force it replaced, with a "set" audit entry.
absl::Status SetOne(OverrideStore& store, const OverrideTarget& target, double capacity,
                    int64_t now_us) {
  Override made;
  made.target = target;
  made.action.capacity = capacity;
  made.reason = "benchmark seed";
  made.set_by = absl::StrCat(kActor, " (seed)");
  made.set_at_us = now_us;
  return store
      .Modify(target,
              [&](const std::optional<Override>& current) -> absl::StatusOr<OverrideStore::Change> {
                OverrideStore::Change change;
                change.record = made;
                if (current && current->ActiveAt(now_us)) change.record.replaced = current->action;
                change.audit.at_us = now_us;
                change.audit.action = "set";
                change.audit.authorized_by = "seed";
                change.audit.actor = kActor;
                change.audit.reason = made.reason;
                if (current && !current->deleted_at_us) change.audit.before = current;
                change.audit.after = change.record;
                return change;
              })
      .status();
}

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const std::string redis = absl::GetFlag(FLAGS_redis_address);
  const std::string name = absl::GetFlag(FLAGS_name);
  const int64_t n = absl::GetFlag(FLAGS_overrides);
  const std::string match = absl::GetFlag(FLAGS_match);
  const double capacity = absl::GetFlag(FLAGS_capacity);
  if (dir.empty() == redis.empty()) {
    std::fprintf(stderr, "--dir or --redis_address is required (one of them)\n");
    return 2;
  }
  if (name.empty()) {
    std::fprintf(stderr, "--name must not be empty\n");
    return 2;
  }
  if (n < 0 || (!match.empty() && n < 2)) {
    std::fprintf(stderr, "--overrides must be >= 0 (>= 2 with --match)\n");
    return 2;
  }
  if (!(capacity >= 0 && capacity <= 1e15)) {
    std::fprintf(stderr, "--capacity must be in [0, 1e15]\n");
    return 2;
  }

  StoreOptions options;
  if (redis.empty()) {
    options.rocksdb.path = dir;
  } else {
    options.backend = "redis";
    options.redis.address = redis;
    options.redis.key_prefix = absl::GetFlag(FLAGS_redis_key_prefix);
  }
  const std::string where = redis.empty() ? dir : redis;
  absl::StatusOr<OpenedStateStore> opened = OpenStateStore(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "open %s: %s\n", where.c_str(), opened.status().ToString().c_str());
    return 1;
  }
  OverrideStore* store = opened->store->overrides();
  if (store == nullptr) {
    std::fprintf(stderr, "the store of %s keeps no overrides\n", where.c_str());
    return 1;
  }

  const int64_t now_us = SystemClock::Default().NowMicros();
  const absl::Time start = absl::Now();
  for (int64_t i = 0; i < n; ++i) {
    if (absl::Status s = SetOne(*store, SeedTarget(name, i, n, match), capacity, now_us); !s.ok()) {
      std::fprintf(stderr, "override %lld: %s\n", static_cast<long long>(i), s.ToString().c_str());
      return 1;
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::StatusOr<uint64_t> version = store->Version();
  if (!version.ok()) {
    std::fprintf(stderr, "version: %s\n", version.status().ToString().c_str());
    return 1;
  }
  const double us_per_change = n > 0 ? seconds * 1e6 / static_cast<double>(n) : 0;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"overrides\": %lld, \"name\": \"%s\", \"match\": \"%s\", \"seconds\": %.3f, "
        "\"us_per_change\": %.1f, \"version\": %llu}\n",
        static_cast<long long>(n), name.c_str(), match.c_str(), seconds, us_per_change,
        static_cast<unsigned long long>(*version));
  } else {
    std::printf("wrote %lld overrides of %s in %.3f s (%.1f µs each); store version %llu\n",
                static_cast<long long>(n), name.c_str(), seconds, us_per_change,
                static_cast<unsigned long long>(*version));
  }
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes runtime overrides of one limit into a RocksDB or Redis store, for benchmarks");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
