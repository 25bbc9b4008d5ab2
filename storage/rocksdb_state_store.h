#ifndef RATELIMIT_STORAGE_ROCKSDB_STATE_STORE_H_
#define RATELIMIT_STORAGE_ROCKSDB_STATE_STORE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/clock.h"
#include "storage/state_store.h"

namespace rocksdb {
class ColumnFamilyHandle;
class CompactionFilter;
class DB;
}  // namespace rocksdb

namespace ratelimit {

struct RocksDbStateStoreOptions {
  // The data directory; created if missing. Required.
  std::string path;
  // false (default): every decision is written to the WAL before Update returns, so a killed
  // process loses nothing (the OS has the bytes). true: the WAL is also fsynced, so a power
  // failure loses nothing either, at the cost of one fsync per write group.
  bool sync = false;
  // The clock garbage collection compares `full_at` against. Default: the system clock. Not
  // owned; must outlive the store.
  const Clock* clock = &SystemClock::Default();
  // Mutex stripes serializing decisions per key. Default 4096.
  size_t lock_stripes = 4096;
  // Block cache for the states column family. Default 64 MiB.
  size_t block_cache_bytes = size_t{64} << 20;
};

// The production StateStore, on RocksDB.
//
// Layout: column family "states" holds the states (see state_codec.h); "meta" holds the format
// version; "default" is unused. A hot key's memtable entry is updated in place. Decisions on one
// key are serialized by a striped mutex; a multi-key Update locks its stripes in increasing order
// (so two Updates never deadlock), reads, decides and writes one WriteBatch. A compaction filter
// drops states whose `full_at` has passed: they are equivalent to no state, so idle keys do not
// accumulate on disk.
//
// Thread safety: all methods are thread-safe.
class RocksDbStateStore final : public StateStore {
 public:
  // Opens or creates the store. A directory written with state format 1 is upgraded to format
  // 2 first (every state moves to the limits file's namespace; see state_codec.h and
  // UpgradedStates()). Fails with FAILED_PRECONDITION when the directory was written with
  // another format version, UNAVAILABLE when RocksDB cannot open it.
  static absl::StatusOr<std::unique_ptr<RocksDbStateStore>> Open(
      const RocksDbStateStoreOptions& options);

  RocksDbStateStore(const RocksDbStateStore&) = delete;
  RocksDbStateStore& operator=(const RocksDbStateStore&) = delete;
  // Calls Close().
  ~RocksDbStateStore() override;

  // When Open upgraded the directory from format 1: how many states it moved; else nullopt.
  std::optional<uint64_t> UpgradedStates() const { return upgraded_states_; }

  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::Status Delete(const StateKey& key) override;
  absl::Status DeleteAll(LimitSource source, absl::string_view name) override;

  // Flushes memtables and the WAL and closes the database. Later calls of any method fail with
  // UNAVAILABLE. Idempotent.
  absl::Status Close();

  // Flushes and compacts the states column family (garbage collection runs during compaction).
  absl::Status CompactAll();

  // RocksDB's estimate of the number of stored states.
  uint64_t EstimateNumStates();
  // Bytes of SST files of the states column family.
  uint64_t LiveSstBytes();
  // Reads a RocksDB integer property of the states column family (e.g.
  // "rocksdb.estimate-pending-compaction-bytes"); 0 if unavailable.
  uint64_t IntProperty(const std::string& property);

 private:
  RocksDbStateStore(const RocksDbStateStoreOptions& options);
  absl::Status OpenDb();
  absl::Status UpgradeFromV1Locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);

  const RocksDbStateStoreOptions options_;
  std::unique_ptr<rocksdb::CompactionFilter> gc_filter_;
  std::unique_ptr<absl::Mutex[]> stripes_;

  // Guards the DB's lifetime (shared: in use; exclusive: Close).
  absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
  std::vector<rocksdb::ColumnFamilyHandle*> handles_ ABSL_GUARDED_BY(db_mu_);
  rocksdb::ColumnFamilyHandle* states_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  std::optional<uint64_t> upgraded_states_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_STATE_STORE_H_
