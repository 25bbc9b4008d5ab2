#ifndef RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_OVERRIDE_STORE_H_
#define RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_OVERRIDE_STORE_H_

#include "absl/synchronization/mutex.h"
#include "storage/overrides/override_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"

namespace ratelimit {

// The OverrideStore of a RocksDbStateStore, in its "overrides" column family (layout:
// storage/overrides/override_codec.h): the records, the audit entries and the version counter.
// Each change is one WriteBatch (record, audit entry, the oldest entry past
// kMaxOverrideAuditEntries deleted, version + 1), written to the WAL with sync, so that it is on
// disk before Modify returns. A store whose writes are
// stopped by an earlier failure refuses changes with its UNAVAILABLE; reads go on.
//
// Ownership: made and owned by the RocksDbStateStore (RocksDbStateStore::overrides()).
// Thread safety: thread-safe; Modify calls are serialized by a mutex of their own.
class RocksDbOverrideStore final : public OverrideStore {
 public:
  explicit RocksDbOverrideStore(RocksDbStateStore& store) : store_(store) {}
  RocksDbOverrideStore(const RocksDbOverrideStore&) = delete;
  RocksDbOverrideStore& operator=(const RocksDbOverrideStore&) = delete;

  absl::StatusOr<OverrideAuditEntry> Modify(const OverrideTarget& target, ChangeFn change) override;
  absl::StatusOr<std::optional<Override>> Get(const OverrideTarget& target) override;
  absl::StatusOr<Snapshot> LoadAll() override;
  absl::StatusOr<uint64_t> Version() override;
  // From the audit entries after `version` and the records, in one RocksDB snapshot.
  absl::StatusOr<std::optional<Changes>> ChangesSince(uint64_t version) override;
  absl::StatusOr<std::vector<OverrideAuditEntry>> ListAudit(uint64_t before, absl::string_view name,
                                                            size_t limit) override;

 private:
  // The newest audit sequence number (0: none), read under the database lock.
  absl::StatusOr<uint64_t> LastSequence();

  RocksDbStateStore& store_;
  absl::Mutex modify_mu_;  // serializes Modify's read-modify-write
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_OVERRIDE_STORE_H_
