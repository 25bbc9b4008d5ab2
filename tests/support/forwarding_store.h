#ifndef RATELIMIT_TESTS_SUPPORT_FORWARDING_STORE_H_
#define RATELIMIT_TESTS_SUPPORT_FORWARDING_STORE_H_

// A StateStore that hands every call to an in-memory store: the base of test stores that observe
// how they are called (count transactions, see batches) and override only those methods.

#include <optional>
#include <utility>
#include <vector>

#include "storage/leases/lease.h"
#include "storage/memory/memory_state_store.h"
#include "storage/state_store.h"

namespace ratelimit::testing {

class ForwardingStore : public StateStore {
 public:
  absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock) override {
    return inner_.Apply(op, clock);
  }
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override {
    inner_.ApplyAsync(op, clock, std::move(done));
  }
  std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                  const Clock& clock) override {
    return inner_.ApplyBatch(ops, clock);
  }
  bool ApplyAsyncMayWait() const override { return inner_.ApplyAsyncMayWait(); }
  bool BatchesDecideLocally() const override { return inner_.BatchesDecideLocally(); }
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override {
    return inner_.Update(keys, decide);
  }
  absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                 absl::Span<const RecordSpec> records, const Clock& clock,
                                 RecordDecideFn decide) override {
    return inner_.UpdateWithRecords(keys, records, clock, decide);
  }
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override { return inner_.Get(key); }
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override { return inner_.Delete(key); }
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override {
    return inner_.DeleteAll(source, name);
  }
  absl::StatusOr<LeaseOutcome> ApplyLease(const LeaseOperation& op, const Clock& clock) override {
    return inner_.ApplyLease(op, clock);
  }
  void ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock, LeaseDone done) override {
    inner_.ApplyLeaseAsync(op, clock, std::move(done));
  }
  std::vector<absl::StatusOr<LeaseOutcome>> ApplyLeaseBatch(
      absl::Span<const LeaseOperation* const> ops, const Clock& clock) override {
    return inner_.ApplyLeaseBatch(ops, clock);
  }
  absl::string_view backend_name() const override { return inner_.backend_name(); }

 private:
  MemoryStateStore inner_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_FORWARDING_STORE_H_
