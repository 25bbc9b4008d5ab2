#include "server/serving/decision_burst.h"

#include <utility>

namespace ratelimit {

void DecisionBurst::Decide(Limiter& limiter) {
  DecideLeases(limiter);
  if (entries_.empty()) return;
  items_.clear();
  for (const Entry& e : entries_) items_.push_back(BatchItem{e.limits, e.mode});
  std::vector<absl::StatusOr<Verdict>> verdicts = limiter.EvaluateBatch(items_);
  // `done` may add to a burst no more: it runs after the batch, and the entries are taken first.
  std::vector<Entry> entries;
  entries.swap(entries_);
  verdicts.resize(entries.size(),
                  absl::InternalError("the store answered fewer operations than given"));
  // Each verdict is moved once, into its `done`.
  for (size_t i = 0; i < entries.size(); ++i) std::move(entries[i].done)(std::move(verdicts[i]));
  entries.clear();
  entries_.swap(entries);  // keeps the capacity
}

void DecisionBurst::DecideLeases(Limiter& limiter) {
  if (leases_.empty()) return;
  lease_ops_.clear();
  for (const LeaseEntry& e : leases_) lease_ops_.push_back(e.op);
  std::vector<absl::StatusOr<LeaseOutcome>> outcomes = limiter.LeaseBatch(lease_ops_);
  std::vector<LeaseEntry> entries;
  entries.swap(leases_);
  outcomes.resize(entries.size(),
                  absl::InternalError("the store answered fewer operations than given"));
  // Each outcome is moved once, into its `done`.
  for (size_t i = 0; i < entries.size(); ++i) std::move(entries[i].done)(std::move(outcomes[i]));
  entries.clear();
  leases_.swap(entries);  // keeps the capacity
}

}  // namespace ratelimit
