#ifndef RATELIMIT_SERVER_SERVING_DECISION_SCHEDULER_H_
#define RATELIMIT_SERVER_SERVING_DECISION_SCHEDULER_H_

// Where and when the server's decisions are made. Every API (v1/, envoy/) translates its request
// into limit requests, hands them here, and translates the verdict back; nothing else in server/
// calls the Limiter. This is the one place that knows
//  - which thread a decision runs on: the serving thread that received the call, or a store
//    thread (store_executor.h) when the store may wait for a peer (Redis);
//  - whether it joins the serving loop's burst (decision_burst.h): on a store whose batches are
//    decided locally (RocksDB, memory), the decisions of one burst share one store call and one
//    WAL write;
//  - where the store writes (the write hint, StateStore::WritesHereScope, on store threads);
//  - how the store's errors reach a caller (StoreUnavailable, IsCallersError below).
//
// Thread safety: thread-safe. The Limiter and the executor are not owned and must outlive this.

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/serving/serving_loop.h"
#include "server/serving/store_executor.h"
#include "storage/limiter.h"

namespace ratelimit {

class DecisionScheduler {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<Verdict>) &&>;

  // `executor` null (or with no threads): everything runs on the calling thread.
  DecisionScheduler(Limiter& limiter, StoreExecutor* executor)
      : limiter_(limiter),
        executor_(executor != nullptr && executor->threads() > 0 ? executor : nullptr) {}
  DecisionScheduler(const DecisionScheduler&) = delete;
  DecisionScheduler& operator=(const DecisionScheduler&) = delete;

  // The serving loop's burst (ServingLoop::Handler::NewBurst and EndBurst delegate here):
  // EndBurst makes the burst's deferred decisions with one store call and answers them.
  std::unique_ptr<ServingLoop::Burst> NewBurst() const;
  void EndBurst(ServingLoop::Burst& burst);

  // Decides `limits` (resolved and validated, as for Limiter::EvaluateAsync) in `mode`; `done`
  // gets the verdict once it is durable, on the serving thread that called (or, from a thread
  // that is no serving thread, on whichever thread the store answers). Three routes:
  //  1. with a `burst` and a store that decides batches locally: deferred to the burst's end;
  //  2. on a store that may wait for a peer, with store threads: on a store thread, through the
  //     store's asynchronous path (the caller's store tracer installed there);
  //  3. otherwise here, through the store's asynchronous path.
  // `limits` must stay valid until `done` has run.
  void Decide(absl::Span<const LimitRequest> limits, Mode mode, ServingLoop::Burst* burst,
              Done done);

  using LeaseDone = StateStore::LeaseDone;
  // Decides a lease operation (Limiter::Lease); `done` gets the outcome once it is durable. The
  // routes of Decide: 1. with a `burst` and a store that decides batches locally, deferred to the
  // burst's end (Limiter::LeaseBatch); 2. on a store that may wait for a peer, with store
  // threads: on a store thread (`done` runs there); 3. otherwise here through the store's
  // asynchronous path (Limiter::LeaseAsync), `done` running on the serving thread that called.
  // `op` and the limits it names must stay valid until `done` has run.
  void DecideLease(const LeaseOperation& op, ServingLoop::Burst* burst, LeaseDone done);

  // Runs `work`, which makes synchronous store calls (the methods below), where waiting for the
  // store is allowed: on a store thread when there are any (with the write hint and the calling
  // thread's store tracer), else here.
  void RunBlocking(absl::AnyInvocable<void() &&> work);

  // Synchronous store calls, for work run by RunBlocking; each is the Limiter's of that name.
  absl::StatusOr<Verdict> Evaluate(absl::Span<const LimitRequest> limits, Mode mode) {
    return limiter_.Evaluate(limits, mode);
  }
  absl::StatusOr<Verdict> Evaluate(absl::Span<const LimitRequest> limits, Mode mode,
                                   const Remember& remember) {
    return limiter_.Evaluate(limits, mode, remember);
  }
  std::vector<absl::StatusOr<Verdict>> EvaluateBatch(absl::Span<const BatchItem> items) {
    return limiter_.EvaluateBatch(items);
  }
  absl::StatusOr<SettleVerdict> Settle(absl::Span<const SettleItem> items) {
    return limiter_.Settle(items);
  }
  absl::StatusOr<uint64_t> Reset(const std::string& name, const std::string& key,
                                 LimitSource source) {
    return limiter_.Reset(name, key, source);
  }
  absl::StatusOr<uint64_t> ResetAll(const std::string& name, LimitSource source) {
    return limiter_.ResetAll(name, source);
  }
  absl::StatusOr<LeaseOutcome> Lease(const LeaseOperation& op) { return limiter_.Lease(op); }
  absl::StatusOr<uint64_t> ResetAllLeases(const std::string& name, LimitSource source) {
    return limiter_.ResetAllLeases(name, source);
  }
  absl::StatusOr<StateStore::LeakedLeaseKeys> FindLeakedLeaseKeys(absl::string_view cursor) {
    return limiter_.FindLeakedLeaseKeys(cursor);
  }

 private:
  // Route 2 and 3: the store's asynchronous path; `done` on this thread's loop, if any.
  void DecideAsync(absl::Span<const LimitRequest> limits, Mode mode, Done done);

  Limiter& limiter_;
  StoreExecutor* const executor_;
};

// How the store's errors reach a caller. A request the store cannot take as asked
// (FAILED_PRECONDITION: limits of one request in different slots of a Redis Cluster, or a
// settlement the store cannot apply) is the caller's to change: returned as it is, never failed
// open. Every other error is the store's: UNAVAILABLE, "rate-limit store unavailable: <why>".
bool IsCallersError(const absl::Status& store_error);
absl::Status StoreUnavailable(const absl::Status& store_error);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_DECISION_SCHEDULER_H_
