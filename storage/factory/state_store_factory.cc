#include "storage/factory/state_store_factory.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "storage/file_util.h"
#include "storage/memory/memory_state_store.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"

namespace ratelimit {
namespace {

absl::StatusOr<OpenedStateStore> OpenMemory(const StoreOptions& /*options*/) {
  return OpenedStateStore{std::make_unique<MemoryStateStore>(), StoreOpenReport{}};
}

absl::StatusOr<OpenedStateStore> OpenRocksDb(const StoreOptions& options) {
  RocksDbStateStoreOptions ro;
  ro.path = options.rocksdb.path;
  ro.sync = options.rocksdb.sync;
  ro.state_cache_bytes = options.rocksdb.state_cache_bytes;
  ro.lease_cache_bytes = options.rocksdb.lease_cache_bytes;
  ro.clock = options.clock;
  ro.salvage_wal = options.rocksdb.salvage_wal;
  ro.map_wal = options.rocksdb.map_wal;
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(ro);
  if (!opened.ok()) return opened.status();
  OpenedStateStore result;
  const RocksDbOpenReport& report = (*opened)->open_report();
  result.report.recovery = report.recovery;
  result.report.salvaged = report.salvaged;
  result.report.warnings = report.warnings;
  result.report.upgraded_states = (*opened)->UpgradedStates();
  result.store = *std::move(opened);
  return result;
}

absl::StatusOr<OpenedStateStore> OpenRedis(const StoreOptions& store_options) {
  const RedisOptions& options = store_options.redis;
  redis::RedisClusterClient::Options co;
  co.wait_replicas = options.wait_replicas;
  co.io_thread_scheduling = options.io_scheduling;
  co.seeds = options.address;
  co.connect_timeout = options.timeout;
  co.command_timeout = options.timeout;
  if (!options.password_file.empty()) {
    absl::StatusOr<std::string> password = ReadFileToString(options.password_file);
    if (!password.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--redis_password_file: ", password.status().message()));
    }
    co.password = std::string(absl::StripTrailingAsciiWhitespace(*password));
    if (co.password.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--redis_password_file: ", options.password_file, " is empty"));
    }
  }
  const auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("redis at ", options.address, ": ", s.message()));
  };
  absl::StatusOr<std::unique_ptr<redis::RedisClusterClient>> client =
      redis::RedisClusterClient::Connect(co);
  if (!client.ok()) return named(client.status());
  RedisStateStoreOptions ro;
  ro.key_prefix = options.key_prefix;
  ro.claim_lease = 2 * options.timeout;
  ro.hold_ttl = options.hold_ttl;
  absl::StatusOr<std::unique_ptr<RedisStateStore>> store =
      RedisStateStore::Open(*std::move(client), ro);
  if (!store.ok()) return named(store.status());
  return OpenedStateStore{*std::move(store), StoreOpenReport{}};
}

// Every backend: its StoreOptions::backend name and how to open it from the options. A new
// backend is one more line here (and its folder, linked by this target).
struct Backend {
  absl::string_view name;
  absl::StatusOr<OpenedStateStore> (*open)(const StoreOptions& options);
};
constexpr Backend kBackends[] = {
    {"rocksdb", OpenRocksDb},
    {"redis", OpenRedis},
    {"memory", OpenMemory},
};

// The backends' names as an error message lists them: "rocksdb, redis or memory".
std::string KnownBackends() {
  std::string out;
  for (size_t i = 0; i < std::size(kBackends); ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 < std::size(kBackends) ? ", " : " or ");
    absl::StrAppend(&out, kBackends[i].name);
  }
  return out;
}

}  // namespace

absl::Status ValidateStoreOptions(const StoreOptions& options) {
  const auto invalid = [](absl::string_view flag, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
  };
  if (std::none_of(std::begin(kBackends), std::end(kBackends),
                   [&](const Backend& b) { return b.name == options.backend; })) {
    return invalid("--store", absl::StrCat("unknown state store \"", options.backend, "\" (",
                                           KnownBackends(), ")"));
  }
  const RocksDbOptions& rocksdb = options.rocksdb;
  const RedisOptions& redis = options.redis;
  if (rocksdb.state_cache_bytes > (size_t{1} << 50)) {
    return invalid("--state_cache_mb", "must be between 0 and 2^30");
  }
  if (rocksdb.lease_cache_bytes > (size_t{1} << 50)) {
    return invalid("--lease_cache_mb", "must be between 0 and 2^30");
  }
  if (options.backend == "rocksdb") {
    if (rocksdb.path.empty()) return invalid("--data_dir", "required by --store=rocksdb");
  } else if (rocksdb.sync || rocksdb.salvage_wal) {
    return invalid("--sync and --salvage_wal", "apply to --store=rocksdb only");
  }
  if (options.backend != "redis") {
    if (!redis.address.empty() || !redis.password_file.empty() || redis.wait_replicas != 0) {
      return invalid("--redis_address, --redis_password_file and --redis_wait_replicas",
                     "require --store=redis");
    }
    return absl::OkStatus();
  }
  if (redis.address.empty()) return invalid("--redis_address", "required by --store=redis");
  if (redis.timeout <= absl::ZeroDuration()) return invalid("--redis_timeout", "must be positive");
  if (absl::Status s = ValidateRedisKeyPrefix(redis.key_prefix); !s.ok()) {
    return invalid("--redis_key_prefix", s.message());
  }
  if (redis.wait_replicas < 0) return invalid("--redis_wait_replicas", "must not be negative");
  if (redis.hold_ttl < 2 * redis.timeout) {
    return invalid("--redis_hold_ttl", absl::StrCat("(", absl::FormatDuration(redis.hold_ttl),
                                                    ") must be at least twice --redis_timeout (",
                                                    absl::FormatDuration(redis.timeout), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenedStateStore> OpenStateStore(const StoreOptions& options) {
  if (absl::Status s = ValidateStoreOptions(options); !s.ok()) return s;
  for (const Backend& backend : kBackends) {
    if (options.backend == backend.name) return backend.open(options);
  }
  return absl::InternalError("unreachable: a validated backend has an entry");
}

}  // namespace ratelimit
