#ifndef RATELIMIT_SERVER_SERVING_DECISION_BURST_H_
#define RATELIMIT_SERVER_SERVING_DECISION_BURST_H_

// Decisions deferred to the end of a serving loop's burst (serving_loop.h) and made there together
// with one Limiter::EvaluateBatch (and the lease operations with one Limiter::LeaseBatch): one
// store call and, on RocksDB, one WAL write for the whole burst instead of one each. Each decision
// is made exactly as Limiter::EvaluateAsync would make it alone, in the order added, each seeing
// the effect of the earlier ones; every `done` runs once the burst's decisions are durable. For
// stores whose batches are decided locally (Limiter::BatchesDecideLocally): a store that waits for
// a peer would hold the serving thread.

#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/serving/serving_loop.h"
#include "storage/limiter.h"

namespace ratelimit {

// Thread safety: belongs to one serving thread.
class DecisionBurst final : public ServingLoop::Burst {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<Verdict>) &&>;

  // Defers a decision on `limits` (resolved and validated, as for Limiter::EvaluateAsync) in
  // `mode`. `limits` must stay valid until `done` has run.
  void Add(absl::Span<const LimitRequest> limits, Mode mode, Done done) {
    entries_.push_back(Entry{limits, mode, std::move(done)});
  }

  using LeaseDone = StateStore::LeaseDone;
  // Defers a lease operation (Limiter::Lease). `op` must stay valid until `done` has run.
  void AddLease(const LeaseOperation& op, LeaseDone done) {
    leases_.push_back(LeaseEntry{&op, std::move(done)});
  }

  // Makes every deferred decision with one EvaluateBatch, and every deferred lease operation
  // with one Limiter::LeaseBatch, then runs each `done` in the order added (decisions first),
  // and empties the burst.
  void Decide(Limiter& limiter);

 private:
  struct LeaseEntry {
    const LeaseOperation* op;
    LeaseDone done;
  };
  void DecideLeases(Limiter& limiter);
  std::vector<LeaseEntry> leases_;
  std::vector<const LeaseOperation*> lease_ops_;  // kept for its capacity

  struct Entry {
    absl::Span<const LimitRequest> limits;
    Mode mode;
    Done done;
  };
  std::vector<Entry> entries_;
  std::vector<BatchItem> items_;  // kept for its capacity
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_DECISION_BURST_H_
