#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_

#include <memory>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/decision_burst.h"
#include "server/envoy/envoy_convert.h"
#include "server/envoy/envoy_plan.h"
#include "server/envoy/envoy_registry.h"
#include "server/envoy/envoy_stats.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/parsed_unary.h"
#include "server/store_executor.h"
#include "storage/clock.h"
#include "storage/limiter.h"

namespace ratelimit {

// envoy.service.ratelimit.v3.RateLimitService, served by a ServingLoop (serving_loop.h): a drop-in
// replacement for envoyproxy/ratelimit, on the same Limiter and store as ratelimit.v1. The handler
// plans the request (envoy_convert.h), evaluates it all-or-nothing (envoy_evaluator.h), builds the
// response and finishes. Bad input: INVALID_ARGUMENT naming the field. Store failure:
// UNAVAILABLE, whatever the server's failure policy, so that Envoy's failure_mode_deny decides.
// The method is registered raw and parsed here (parsed_unary.h): a malformed body is
// INVALID_ARGUMENT.
//
// Thread safety: thread-safe; dependencies are not owned and must outlive the service.
class EnvoyRateLimitServiceImpl final
    : public ::envoy::service::ratelimit::v3::RateLimitService::WithRawMethod_ShouldRateLimit<
          ::envoy::service::ratelimit::v3::RateLimitService::Service>,
      public ServingLoop::Handler {
 public:
  static constexpr int kShouldRateLimitMethod = 0;

  // `ratelimit_headers`: add RateLimit-Limit / -Remaining / -Reset to every response that has a
  // limited descriptor. Default off, as in the reference.
  EnvoyRateLimitServiceImpl(Limiter& limiter, const Clock& clock,
                            const EnvoyConfigRegistry& registry, bool ratelimit_headers,
                            const Telemetry& telemetry)
      : limiter_(limiter),
        clock_(clock),
        registry_(registry),
        ratelimit_headers_(ratelimit_headers),
        telemetry_(telemetry) {}

  // Where the handler runs when the store's asynchronous path may wait (store_executor.h); null:
  // on the serving thread. Set before the service is registered; not owned, outlives the gRPC
  // server.
  void set_executor(StoreExecutor* executor) { executor_ = executor; }

  // ServingLoop::Handler.
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override {
    RequestShouldRateLimit(&call->context(), &call->request(), &call->writer(), cq, cq,
                           call->tag());
  }
  std::unique_ptr<ServingLoop::Burst> NewBurst() override {
    return std::make_unique<DecisionBurst>();
  }
  void OnCall(LoopCall* loop_call, ServingLoop::Burst* burst) override {
    auto call = std::make_unique<Call>(loop_call);
    if (!call->Parse()) return;
    if (executor_ == nullptr || ServesInline()) {
      // The common case joins the burst on a store whose batches are decided locally.
      Serve(loop_call->context(), std::move(call),
            limiter_.BatchesDecideLocally() ? static_cast<DecisionBurst*>(burst) : nullptr);
      return;
    }
    executor_->Run([this, loop_call, call = std::move(call)]() mutable {
      StateStore::WritesHereScope writes_here;
      Serve(loop_call->context(), std::move(call), nullptr);
    });
  }
  void EndBurst(ServingLoop::Burst& burst) override {
    static_cast<DecisionBurst&>(burst).Decide(limiter_);
  }

  const EnvoyStats& stats() const { return stats_; }

 private:
  using Call = ParsedLoopCall<::envoy::service::ratelimit::v3::RateLimitRequest,
                              ::envoy::service::ratelimit::v3::RateLimitResponse>;
  struct Evaluation;
  // Plans the request, evaluates it (EvaluateEnvoyPlanAsync: in the common case answered once
  // the decision is durable, possibly on a store thread) and finishes `call`. On a store whose
  // asynchronous path never waits it runs on the serving thread, and a plan that needs synchronous
  // transactions (checks, reservations, shadow rules) is handed to the store threads, if any.
  // With a `burst`, the common case's transaction is decided with the burst (decision_burst.h).
  void Serve(const grpc::ServerContext& context, std::unique_ptr<Call> call, DecisionBurst* burst);
  // Whether Serve hands work that waits to the store threads: the store's asynchronous path never
  // waits, so Serve runs on the serving thread.
  bool ServesInline() const { return limiter_.AsyncNeverWaits(); }
  // The reply and the call's status for the evaluation's outcomes; finishes the telemetry.
  grpc::Status Answer(Evaluation& evaluation, absl::StatusOr<std::vector<EnvoyOutcome>> outcomes,
                      ::envoy::service::ratelimit::v3::RateLimitResponse* response);

  Limiter& limiter_;
  StoreExecutor* executor_ = nullptr;
  const Clock& clock_;
  const EnvoyConfigRegistry& registry_;
  const bool ratelimit_headers_;
  const Telemetry& telemetry_;
  EnvoyStats stats_;
  // Logged once, then summarised (a failing store fails every call).
  RepeatedLog store_failure_log_{LogLevel::kError, "store failure (envoy api)"};
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_
