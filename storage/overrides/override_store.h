#ifndef RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_STORE_H_
#define RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/overrides/override.h"

namespace ratelimit {

// One change of the overrides, as the audit history keeps it.
struct OverrideAuditEntry {
  // Assigned by the store: increasing with each change, from 1.
  uint64_t sequence = 0;
  int64_t at_us = 0;
  std::string action;  // "set" or "delete"
  std::string authorized_by;
  std::string actor;
  std::string peer;
  std::string reason;
  // The target changed: set by the store to the record's target as it writes the entry (unset in
  // entries written before the stores recorded it).
  std::optional<OverrideTarget> target;
  // The target's override before and after the change (a tombstone reads as none).
  std::optional<Override> before;
  std::optional<Override> after;

  friend bool operator==(const OverrideAuditEntry&, const OverrideAuditEntry&) = default;
};

// The audit history keeps this many latest entries.
inline constexpr uint64_t kMaxOverrideAuditEntries = 10000;

// Where the overrides and their audit history are kept, beside the states. A version counter,
// increased by every change in the same atomic write, tells a replica whether its copy is current
// without reading the overrides.
//
// Every implementation guarantees: a change and its audit entry are written together or not at
// all, durably (RocksDB: synced to the WAL) before Modify returns; errors are returned as a
// status (UNAVAILABLE for I/O trouble), never thrown.
//
// Thread safety: thread-safe; changes are serialized.
class OverrideStore {
 public:
  virtual ~OverrideStore() = default;

  // What a change writes: the target's new record (a tombstone for a deletion) and its audit
  // entry (sequence assigned by the store).
  struct Change {
    Override record;
    OverrideAuditEntry audit;
  };
  // Given the target's current record (nullopt: none), returns the change to make, or an error
  // that makes Modify write nothing and return it.
  using ChangeFn =
      absl::FunctionRef<absl::StatusOr<Change>(const std::optional<Override>& current)>;

  // Reads the record of `target` and writes what `change` makes of it, atomically with respect
  // to every other Modify. Returns the audit entry written.
  virtual absl::StatusOr<OverrideAuditEntry> Modify(const OverrideTarget& target,
                                                    ChangeFn change) = 0;

  // The record of `target` (a tombstone included), or nullopt.
  virtual absl::StatusOr<std::optional<Override>> Get(const OverrideTarget& target) = 0;

  // Every record (tombstones included) and the version they are at.
  struct Snapshot {
    uint64_t version = 0;
    std::vector<Override> overrides;
  };
  virtual absl::StatusOr<Snapshot> LoadAll() = 0;

  // The version counter: 0 before the first change.
  virtual absl::StatusOr<uint64_t> Version() = 0;

  // What changed after a version, read from the audit history (whose sequence is the version
  // each change made): one entry per target changed, in the order of the target's latest change,
  // with the target's record at `version` (the version the changes end at, one the store had).
  // Applying them to the records at the version asked gives exactly LoadAll's at `version`.
  struct ChangedTarget {
    // The sequence (version) of the target's latest change.
    uint64_t sequence = 0;
    OverrideTarget target;
    // Its record at `version` (a tombstone included); nullopt: the target has none.
    std::optional<Override> record;

    friend bool operator==(const ChangedTarget&, const ChangedTarget&) = default;
  };
  struct Changes {
    uint64_t version = 0;
    std::vector<ChangedTarget> changed;
  };
  // The changes after `version` up to the store's version (none when it is the store's). nullopt
  // when the store cannot tell: its history no longer reaches back to version + 1 (it keeps the
  // newest kMaxOverrideAuditEntries), an entry does not record its target, or `version` is ahead
  // of the store's; the caller then loads everything (LoadAll). This default always answers
  // nullopt.
  virtual absl::StatusOr<std::optional<Changes>> ChangesSince(uint64_t version) {
    (void)version;
    return std::optional<Changes>();
  }

  // Audit entries newest first: those with a sequence below `before` (0: from the newest), of
  // limit `name` only when it is not empty, at most `limit` of them.
  virtual absl::StatusOr<std::vector<OverrideAuditEntry>> ListAudit(uint64_t before,
                                                                    absl::string_view name,
                                                                    size_t limit) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_STORE_H_
