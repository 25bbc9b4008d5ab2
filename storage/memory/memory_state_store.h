#ifndef RATELIMIT_STORAGE_MEMORY_MEMORY_STATE_STORE_H_
#define RATELIMIT_STORAGE_MEMORY_MEMORY_STATE_STORE_H_

#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage/state_store.h"

namespace ratelimit {

// A StateStore in a std::map behind one mutex: the reference model the RocksDB store is tested
// against, and a store for tests. Nothing survives the process.
//
// Also the smallest complete backend (storage/state_store.h, "Writing a backend"): the required
// methods, the records, leases (as records) and secrets capabilities, garbage collection of expired
// records, and the two scheduling hints of a local store; every other method keeps its default
// (Apply is one Update running the algebra).
//
// Thread safety: thread-safe (one mutex around everything).
class MemoryStateStore final : public StateStore {
 public:
  MemoryStateStore() = default;
  MemoryStateStore(const MemoryStateStore&) = delete;
  MemoryStateStore& operator=(const MemoryStateStore&) = delete;

  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  // Records live in a map beside the states, under the same mutex; expired ones are dropped by
  // CollectGarbage.
  absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                 absl::Span<const RecordSpec> records, const Clock& clock,
                                 RecordDecideFn decide) override;
  // Kept for the store's (the process's) lifetime.
  absl::StatusOr<std::string> Secret(absl::string_view name,
                                     absl::FunctionRef<std::string()> generate) override;
  // Lease sets are records (storage/leases/apply_lease.h).
  absl::StatusOr<LeaseOutcome> ApplyLease(const LeaseOperation& op, const Clock& clock) override;
  // Removes the lease set records of the limit; counts those not expired holding a lease.
  absl::StatusOr<uint64_t> DeleteAllLeases(LimitSource source, absl::string_view name,
                                           int64_t now_us) override;
  // Reads the lease set records in key order, at most kLeakPageRecords of them a page; the cursor
  // is the record key to read from.
  absl::StatusOr<LeakedLeaseKeys> FindLeakedLeaseKeys(absl::string_view cursor,
                                                      int64_t now_us) override;
  static constexpr size_t kLeakPageRecords = 1024;
  absl::Status CollectGarbage() override;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override;
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override;
  absl::string_view backend_name() const override { return "memory"; }
  bool ApplyAsyncMayWait() const override { return false; }
  bool BatchesDecideLocally() const override { return true; }

  // Number of stored states.
  size_t Size() const;

 private:
  using Key = std::tuple<LimitSource, std::string, std::string>;
  mutable absl::Mutex mu_;
  std::map<Key, State> states_ ABSL_GUARDED_BY(mu_);
  struct Record {
    std::string value;
    int64_t expires_at_us = 0;
  };
  std::map<std::string, Record> records_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> secrets_ ABSL_GUARDED_BY(mu_);
  int64_t last_record_time_us_ ABSL_GUARDED_BY(mu_) = 0;  // for CollectGarbage
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_MEMORY_MEMORY_STATE_STORE_H_
