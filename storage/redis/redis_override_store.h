#ifndef RATELIMIT_STORAGE_REDIS_REDIS_OVERRIDE_STORE_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_OVERRIDE_STORE_H_

// An OverrideStore (storage/overrides/override_store.h) in Redis, beside the states of a
// RedisStateStore. Three keys share the hash tag {ovr}, so they live in one slot of a cluster
// (on one shard) and a change is one atomic EVAL on the primary of that slot:
//   <prefix>overrides:{ovr}:records  hash: EncodeOverrideKey(target) -> EncodeOverride(record)
//   <prefix>overrides:{ovr}:version  string: the version counter, in decimal
//   <prefix>overrides:{ovr}:audit    sorted set: EncodeAuditEntry(entry), scored by its sequence
// The encodings are those of storage/overrides/override_codec.h, as in the RocksDB store.
//
// Modify is an optimistic transaction: one EVAL reads the version and the target's record, the
// ChangeFn runs in C++, and one EVAL writes only if the version is still the one read (any change
// in between, of any target, increments it): the record, the version + 1, the audit entry with
// that version as its sequence, and the trim of the audit to its newest max_audit_entries. A
// lost race reads and decides again, at most kMaxModifyAttempts times, then ABORTED. Versions
// and sequences are exact below 2^53 (a sorted set's score is a double).
//
// ChangesSince reads the audit (its entries record their target) and the records it names.
//
// Durability is Redis's: a change is acknowledged once the primary ran it; what survives a crash
// of that primary is what its AOF (appendfsync) and its replicas hold, as for the states.
//
// Errors: UNAVAILABLE for a transport failure (a broken connection, a timeout, a closed store) and
// for an error reply of Redis (TRYAGAIN during a migration, CLUSTERDOWN, OOM, ...); INTERNAL for a
// reply of an unexpected shape; DATA_LOSS for bytes the codec cannot read.
//
// Thread safety: thread-safe (the CommandFn must be).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/overrides/override_store.h"
#include "storage/redis/cluster/redis_reply.h"

namespace ratelimit {

struct RedisOverrideStoreOptions {
  // The audit keeps this many newest entries. REQUIRES: > 0. Tests lower it.
  uint64_t max_audit_entries = kMaxOverrideAuditEntries;
};

class RedisOverrideStore final : public OverrideStore {
 public:
  // Sends one command to the node serving `routing_key`'s slot and waits for its reply.
  using CommandFn = std::function<absl::StatusOr<redis::Reply>(const std::string& routing_key,
                                                               std::vector<std::string> argv)>;
  // A Modify reads and decides again after a conflicting change at most this often.
  static constexpr int kMaxModifyAttempts = 16;

  RedisOverrideStore(std::string key_prefix, CommandFn command,
                     RedisOverrideStoreOptions options = {});
  RedisOverrideStore(const RedisOverrideStore&) = delete;
  RedisOverrideStore& operator=(const RedisOverrideStore&) = delete;

  absl::StatusOr<OverrideAuditEntry> Modify(const OverrideTarget& target, ChangeFn change) override;
  absl::StatusOr<std::optional<Override>> Get(const OverrideTarget& target) override;
  // GET of the version, HGETALL of the records, GET of the version again: the records are those
  // of that version when the two agree (else read again, at most kMaxModifyAttempts times, then
  // ABORTED). Records in the order of their encoded targets, as RocksDB iterates them.
  absl::StatusOr<Snapshot> LoadAll() override;
  absl::StatusOr<uint64_t> Version() override;
  // One EVAL reads the version and the audit entries after `version`, a second the changed
  // targets' records and the version again: the records are those of that version when the two
  // agree (else read again, at most kMaxModifyAttempts times, then ABORTED).
  absl::StatusOr<std::optional<Changes>> ChangesSince(uint64_t version) override;
  absl::StatusOr<std::vector<OverrideAuditEntry>> ListAudit(uint64_t before, absl::string_view name,
                                                            size_t limit) override;

  // The key of `part` ("records", "version" or "audit").
  std::string KeyOf(const char* part) const;

 private:
  absl::StatusOr<redis::Reply> Run(std::vector<std::string> argv);

  const std::string prefix_;
  const std::string records_key_;
  const std::string version_key_;
  const std::string audit_key_;
  const CommandFn command_;
  const RedisOverrideStoreOptions options_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_OVERRIDE_STORE_H_
