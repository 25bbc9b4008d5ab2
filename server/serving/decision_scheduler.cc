#include "server/serving/decision_scheduler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/serving/decision_burst.h"
#include "storage/state_store.h"
#include "storage/store_trace.h"

namespace ratelimit {

std::unique_ptr<ServingLoop::Burst> DecisionScheduler::NewBurst() const {
  return std::make_unique<DecisionBurst>();
}

void DecisionScheduler::EndBurst(ServingLoop::Burst& burst) {
  static_cast<DecisionBurst&>(burst).Decide(limiter_);
}

void DecisionScheduler::Decide(absl::Span<const LimitRequest> limits, Mode mode,
                               ServingLoop::Burst* burst, Done done) {
  if (burst != nullptr && limiter_.BatchesDecideLocally()) {
    static_cast<DecisionBurst*>(burst)->Add(limits, mode, std::move(done));
    return;
  }
  if (executor_ != nullptr && !limiter_.AsyncNeverWaits()) {
    executor_->Run(
        [this, limits, mode, done = std::move(done), tracer = CurrentStoreTracer()]() mutable {
          StateStore::WritesHereScope writes_here;
          ScopedStoreTracer tracing(tracer);
          DecideAsync(limits, mode, std::move(done));
        });
    return;
  }
  DecideAsync(limits, mode, std::move(done));
}

void DecisionScheduler::DecideAsync(absl::Span<const LimitRequest> limits, Mode mode, Done done) {
  // The store answers once the decision is durable, here or on a thread of its own (the Redis
  // client's I/O thread); the answer is handed back to the loop thread the call came from.
  LoopInbox* const inbox = ServingLoop::ThreadInbox();
  limiter_.EvaluateAsync(
      limits, mode, [inbox, done = std::move(done)](absl::StatusOr<Verdict> verdict) mutable {
        RunOnLoopThread(inbox, [done = std::move(done), verdict = std::move(verdict)]() mutable {
          std::move(done)(std::move(verdict));
        });
      });
}

void DecisionScheduler::DecideLease(const LeaseOperation& op, ServingLoop::Burst* burst,
                                    LeaseDone done) {
  if (burst != nullptr && limiter_.BatchesDecideLocally()) {
    static_cast<DecisionBurst*>(burst)->AddLease(op, std::move(done));
    return;
  }
  if (executor_ != nullptr && !limiter_.AsyncNeverWaits()) {
    executor_->Run([this, &op, done = std::move(done), tracer = CurrentStoreTracer()]() mutable {
      StateStore::WritesHereScope writes_here;
      ScopedStoreTracer tracing(tracer);
      std::move(done)(limiter_.Lease(op));
    });
    return;
  }
  LoopInbox* const inbox = ServingLoop::ThreadInbox();
  limiter_.LeaseAsync(
      op, [inbox, done = std::move(done)](absl::StatusOr<LeaseOutcome>&& outcome) mutable {
        RunOnLoopThread(inbox, [done = std::move(done), outcome = std::move(outcome)]() mutable {
          std::move(done)(std::move(outcome));
        });
      });
}

void DecisionScheduler::RunBlocking(absl::AnyInvocable<void() &&> work) {
  if (executor_ == nullptr) {
    std::move(work)();
    return;
  }
  // The store's round trips stay children of the caller's store span on that thread.
  executor_->Run([work = std::move(work), tracer = CurrentStoreTracer()]() mutable {
    StateStore::WritesHereScope writes_here;
    ScopedStoreTracer tracing(tracer);
    std::move(work)();
  });
}

bool IsCallersError(const absl::Status& store_error) {
  return store_error.code() == absl::StatusCode::kFailedPrecondition;
}

absl::Status StoreUnavailable(const absl::Status& store_error) {
  return absl::UnavailableError(
      absl::StrCat("rate-limit store unavailable: ", store_error.message()));
}

}  // namespace ratelimit
