#include "storage/factory/state_store_factory.h"

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
  ro.path = options.path;
  ro.sync = options.sync;
  ro.state_cache_bytes = options.state_cache_bytes;
  ro.clock = options.clock;
  ro.salvage_wal = options.salvage_wal;
  ro.map_wal = options.map_wal;
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

absl::StatusOr<OpenedStateStore> OpenRedis(const StoreOptions& options) {
  if (options.redis_address.empty()) {
    return absl::InvalidArgumentError("redis_address: required by the redis store");
  }
  if (options.redis_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis_timeout: must be positive");
  }
  if (absl::Status s = ValidateRedisKeyPrefix(options.redis_key_prefix); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("redis_key_prefix: ", s.message()));
  }
  if (options.redis_wait_replicas < 0) {
    return absl::InvalidArgumentError("redis_wait_replicas: must not be negative");
  }
  if (options.redis_hold_ttl < 2 * options.redis_timeout) {
    return absl::InvalidArgumentError("redis_hold_ttl: must be at least twice redis_timeout");
  }
  redis::RedisClusterClient::Options co;
  co.wait_replicas = options.redis_wait_replicas;
  co.io_thread_scheduling = options.redis_io_scheduling;
  co.seeds = options.redis_address;
  co.connect_timeout = options.redis_timeout;
  co.command_timeout = options.redis_timeout;
  if (!options.redis_password_file.empty()) {
    absl::StatusOr<std::string> password = ReadFileToString(options.redis_password_file);
    if (!password.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("redis_password_file: ", password.status().message()));
    }
    co.password = std::string(absl::StripTrailingAsciiWhitespace(*password));
    if (co.password.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("redis_password_file: ", options.redis_password_file, " is empty"));
    }
  }
  const auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("redis at ", options.redis_address, ": ", s.message()));
  };
  absl::StatusOr<std::unique_ptr<redis::RedisClusterClient>> client =
      redis::RedisClusterClient::Connect(co);
  if (!client.ok()) return named(client.status());
  RedisStateStoreOptions ro;
  ro.key_prefix = options.redis_key_prefix;
  ro.claim_lease = 2 * options.redis_timeout;
  ro.hold_ttl = options.redis_hold_ttl;
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

absl::StatusOr<OpenedStateStore> OpenStateStore(const StoreOptions& options) {
  for (const Backend& backend : kBackends) {
    if (options.backend == backend.name) return backend.open(options);
  }
  return absl::InvalidArgumentError(absl::StrCat("backend: unknown state store \"", options.backend,
                                                 "\" (", KnownBackends(), ")"));
}

}  // namespace ratelimit
