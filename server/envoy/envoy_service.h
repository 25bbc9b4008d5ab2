#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_

#include <memory>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/envoy/envoy_convert.h"
#include "server/envoy/envoy_plan.h"
#include "server/envoy/envoy_registry.h"
#include "server/envoy/envoy_stats.h"
#include "server/observability/telemetry.h"
#include "server/parsed_unary.h"
#include "server/store_executor.h"
#include "storage/clock.h"
#include "storage/limiter.h"

namespace ratelimit {

// envoy.service.ratelimit.v3.RateLimitService on the gRPC callback API: a drop-in replacement
// for envoyproxy/ratelimit, on the same Limiter and store as ratelimit.v1. The handler plans the
// request (envoy_convert.h), evaluates it all-or-nothing (envoy_evaluator.h), builds the
// response and finishes. Bad input: INVALID_ARGUMENT naming the field. Store failure:
// UNAVAILABLE, whatever the server's failure policy, so that Envoy's failure_mode_deny decides.
// The method is registered raw and parsed by ServeParsed (parsed_unary.h): a malformed body is
// INVALID_ARGUMENT.
//
// Thread safety: thread-safe; dependencies are not owned and must outlive the service.
class EnvoyRateLimitServiceImpl final
    : public ::envoy::service::ratelimit::v3::RateLimitService::
          WithRawCallbackMethod_ShouldRateLimit<
              ::envoy::service::ratelimit::v3::RateLimitService::CallbackService> {
 public:
  // The generated base's other overloads of the method (the synchronous one it disables), named
  // so that the overrides below do not hide them.
  using WithRawCallbackMethod_ShouldRateLimit::ShouldRateLimit;

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

  // Where the handler runs (store_executor.h); null: inline on gRPC's callback thread. Set
  // before the service is registered; not owned, outlives the gRPC server.
  void set_executor(StoreExecutor* executor) { executor_ = executor; }

  // The registered (raw) method: parse, then the typed handler below.
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override {
    return ServeParsedAsync<::envoy::service::ratelimit::v3::RateLimitRequest,
                            ::envoy::service::ratelimit::v3::RateLimitResponse>(
        context, request, response,
        [this, context](std::unique_ptr<Call> call) { Serve(context, std::move(call)); }, executor_,
        [this](const auto&) { return ServesInline(); });
  }

  const EnvoyStats& stats() const { return stats_; }

 private:
  using Call = PendingUnary<::envoy::service::ratelimit::v3::RateLimitRequest,
                            ::envoy::service::ratelimit::v3::RateLimitResponse>;
  struct Evaluation;
  // Plans the request, evaluates it (EvaluateEnvoyPlanAsync: in the common case answered once
  // the decision is durable, possibly on a store thread) and finishes `call`. On a store whose
  // asynchronous path never waits it runs on gRPC's thread, and a plan that needs synchronous
  // transactions (checks, reservations, shadow rules) is handed to the store threads, if any.
  void Serve(grpc::CallbackServerContext* context, std::unique_ptr<Call> call);
  // Whether Serve runs on gRPC's thread (ShouldRateLimit) and so hands work that waits to the
  // store threads: the store's asynchronous path never waits.
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
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_
