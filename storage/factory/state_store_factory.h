#ifndef RATELIMIT_STORAGE_FACTORY_STATE_STORE_FACTORY_H_
#define RATELIMIT_STORAGE_FACTORY_STATE_STORE_FACTORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/clock.h"
#include "storage/state_store.h"
#include "storage/worker_thread.h"

namespace ratelimit {

// The RocksDB store's settings (the server's --data_dir, --sync, --salvage_wal, --wal_mmap,
// --state_cache_mb).
struct RocksDbOptions {
  // The data directory; created if missing. Required.
  std::string path;
  // Also fsync every write (see RocksDbStateStoreOptions::sync). Default false.
  bool sync = false;
  // Open a store whose log does not replay cleanly, dropping what follows the damage
  // (see RocksDbStateStoreOptions::salvage_wal). Default false.
  bool salvage_wal = false;
  // Write the WAL through a shared memory mapping (see RocksDbStateStoreOptions::map_wal).
  // Default true.
  bool map_wal = true;
  // Memory bound of the cache of hot states, in bytes (see
  // RocksDbStateStoreOptions::state_cache_bytes). At most 2^50. Default 256 MiB.
  size_t state_cache_bytes = size_t{256} << 20;
  // The cache of lease sets (RocksDbStateStoreOptions::lease_cache_bytes). At most 2^50. Default
  // 64 MiB.
  size_t lease_cache_bytes = size_t{64} << 20;
};

// The Redis store's settings (the server's --redis_* flags): a Redis Cluster or one standalone
// server (detected at open), see storage/redis/redis_state_store.h.
struct RedisOptions {
  // Seed nodes "host:port[,host:port...]". Required.
  std::string address;
  // A file holding the AUTH password (one line; a trailing newline is ignored). Empty: no AUTH.
  std::string password_file;
  // Connecting to a node, and one command's round trip (redirections included). Positive.
  // Default 1 s.
  absl::Duration timeout = absl::Seconds(1);
  // How long the take of a request whose keys span slots is remembered (RedisStateStoreOptions::
  // hold_ttl). At least twice `timeout`. Default 10 s.
  absl::Duration hold_ttl = absl::Seconds(10);
  // Every Redis key starts with it; no '{' or '}'. Default "ratelimit:".
  std::string key_prefix = "ratelimit:";
  // Replicas that must acknowledge each pipelined batch of writes to a primary (one WAIT per
  // batch) before its decisions are answered; fewer: UNAVAILABLE. Not negative. Default 0: no
  // WAIT.
  int wait_replicas = 0;
  // The scheduling of the Redis client's I/O thread (storage/worker_thread.h). Default: the
  // process's policy.
  WorkerScheduling io_scheduling = WorkerScheduling::kDefault;
};

// Which store to open, and the settings of each backend. The backend is chosen here and nowhere
// else: a new backend is a new StateStore implementation in a folder of its own
// (storage/memory/ is the smallest), one more line in OpenStateStore's table of backends and,
// if it has settings, one more nested struct here.
struct StoreOptions {
  // "rocksdb" (default): durable, in rocksdb.path. "redis": shared by every replica. "memory":
  // nothing survives the process (for trying out, tests and benchmarks).
  std::string backend = "rocksdb";
  RocksDbOptions rocksdb;
  RedisOptions redis;
  // The clock that garbage collection compares against. Not owned; must outlive the store.
  // Default: the system clock.
  const Clock* clock = &SystemClock::Default();
};

// Every rule of `options`, checked once, here: OK, or INVALID_ARGUMENT naming the server flag
// that sets the offending field (--store, --data_dir, --redis_timeout, ...): an unknown
// backend, a missing required setting, a value out of its range, or the settings of one
// backend given to another (--redis_address with --store=rocksdb, --sync with --store=redis).
// OpenStateStore checks it first; the server checks it before anything starts.
absl::Status ValidateStoreOptions(const StoreOptions& options);

// What opening found, for the operator's log; empty for a backend with nothing to say.
struct StoreOpenReport {
  // How the store recovered its data (e.g. the log files replayed); empty when not applicable.
  std::string recovery;
  // Recovery dropped writes after a damaged record (only with salvage_wal).
  bool salvaged = false;
  // Things the operator should fix, e.g. a data directory other local users can read.
  std::vector<std::string> warnings;
  // When opening upgraded the stored format: how many states it moved.
  std::optional<uint64_t> upgraded_states;
};

struct OpenedStateStore {
  std::unique_ptr<StateStore> store;  // never null
  StoreOpenReport report;
};

// Opens the store `options` describe. INVALID_ARGUMENT as ValidateStoreOptions; otherwise the
// errors of the backend's Open (for RocksDB: DATA_LOSS for a damaged log without
// salvage_wal, FAILED_PRECONDITION for another format version, UNAVAILABLE when it cannot open;
// for Redis: INVALID_ARGUMENT naming the bad field, UNAVAILABLE when no seed answers as Redis or
// some slot is unserved, UNAUTHENTICATED for a refused password, each naming the address).
// The caller owns the result.
//
// Thread safety: safe to call from any thread; the store it returns is thread-safe.
absl::StatusOr<OpenedStateStore> OpenStateStore(const StoreOptions& options);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_FACTORY_STATE_STORE_FACTORY_H_
