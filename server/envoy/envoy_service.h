#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/config/watched_config.h"
#include "server/envoy/envoy_convert.h"
#include "server/envoy/envoy_plan.h"
#include "server/envoy/envoy_registry.h"
#include "server/envoy/envoy_stats.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/serving/decision_scheduler.h"
#include "server/serving/parsed_unary.h"
#include "storage/clock.h"
#include "storage/overrides/override_index.h"

namespace ratelimit {

// The server-wide switches of the Envoy API (flags --envoy_*; all off by default, as in the
// reference).
struct EnvoyServiceOptions {
  // Add the rate-limit headers (named by header_names) to every response that has a limited
  // descriptor (LIMIT_RESPONSE_HEADERS_ENABLED).
  bool ratelimit_headers = false;
  // --envoy_shadow_mode and --envoy_quota_mode (EnvoyPolicy): SHADOW_MODE, QUOTA_MODE.
  bool shadow_mode = false;
  bool quota_mode = false;
  // NEAR_LIMIT_RATIO: the share of a limit past which hits count as near_limit. In (0, 1].
  double near_limit_ratio = 0.8;
  // RESPONSE_DYNAMIC_METADATA: fill the response's dynamic_metadata (envoy_metadata.h).
  bool response_dynamic_metadata = false;
  // LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER.
  EnvoyHeaderNames header_names;
};

// envoy.service.ratelimit.v3.RateLimitService, served by a ServingLoop (serving_loop.h): a drop-in
// replacement for envoyproxy/ratelimit, on the same decisions and store as ratelimit.v1. The
// handler plans the request (envoy_convert.h), evaluates it all-or-nothing (envoy_evaluator.h,
// scheduled by server/serving/decision_scheduler.h), builds the response and finishes. Bad input:
// INVALID_ARGUMENT naming the field. Store failure: UNAVAILABLE, whatever the server's failure
// policy, so that Envoy's failure_mode_deny decides. The method is registered raw and parsed here
// (parsed_unary.h): a malformed body is INVALID_ARGUMENT.
//
// Thread safety: thread-safe; dependencies are not owned and must outlive the service.
class EnvoyRateLimitServiceImpl final
    : public ::envoy::service::ratelimit::v3::RateLimitService::WithRawMethod_ShouldRateLimit<
          ::envoy::service::ratelimit::v3::RateLimitService::Service>,
      public ServingLoop::Handler {
 public:
  static constexpr int kShouldRateLimitMethod = 0;

  // REQUIRES: options.near_limit_ratio in (0, 1], header names valid.
  EnvoyRateLimitServiceImpl(DecisionScheduler& scheduler, const Clock& clock,
                            const EnvoyConfigRegistry& registry, EnvoyServiceOptions options,
                            const Telemetry& telemetry)
      : scheduler_(scheduler),
        clock_(clock),
        registry_(registry),
        options_(std::move(options)),
        telemetry_(telemetry),
        stats_(options_.near_limit_ratio) {}

  // ServingLoop::Handler.
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override {
    RequestShouldRateLimit(&call->context(), &call->request(), &call->writer(), cq, cq,
                           call->tag());
  }
  std::unique_ptr<ServingLoop::Burst> NewBurst() override { return scheduler_.NewBurst(); }
  void OnCall(LoopCall* loop_call, ServingLoop::Burst* burst) override;
  void EndBurst(ServingLoop::Burst& burst) override { scheduler_.EndBurst(burst); }

  const EnvoyStats& stats() const { return stats_; }

  // Called with each lease decision of a concurrency rule that took, refused or released slots:
  // the key (named by the rule's limit name), the slots held on it after the decision, the rule's
  // longest lease and the decision's number (LeaseDecision::seq). The server feeds its
  // held-slots gauge with it. Set before serving.
  using LeaseObserver = std::function<void(const StateKey& key, int64_t held,
                                           int64_t max_lease_ttl_us, uint64_t seq)>;
  void set_lease_observer(LeaseObserver observe) { lease_observer_ = std::move(observe); }

  // Applies the runtime overrides of `overrides` (those of Envoy rules) to every call, as of
  // `clock`'s time (envoy_overrides.h). Call before serving; both must outlive the service.
  void set_overrides(const ConfigSnapshot<OverrideIndex>* overrides, const Clock* clock) {
    overrides_ = overrides;
    overrides_clock_ = clock;
  }

 private:
  using Call = ParsedLoopCall<::envoy::service::ratelimit::v3::RateLimitRequest,
                              ::envoy::service::ratelimit::v3::RateLimitResponse>;
  struct Evaluation;
  // The reply and the call's status for the evaluation's outcomes; finishes the telemetry.
  grpc::Status Answer(Evaluation& evaluation, absl::StatusOr<std::vector<EnvoyOutcome>> outcomes,
                      ::envoy::service::ratelimit::v3::RateLimitResponse* response);
  void CountLeases(absl::Span<const EnvoyDescriptorPlan> plan,
                   absl::Span<const EnvoyOutcome> outcomes) const;

  DecisionScheduler& scheduler_;
  const Clock& clock_;
  const EnvoyConfigRegistry& registry_;
  const EnvoyServiceOptions options_;
  const Telemetry& telemetry_;
  EnvoyStats stats_;
  LeaseObserver lease_observer_;
  const ConfigSnapshot<OverrideIndex>* overrides_ = nullptr;
  const Clock* overrides_clock_ = nullptr;
  // Logged once, then summarised (a failing store fails every call).
  RepeatedLog store_failure_log_{LogLevel::kError, "store failure (envoy api)"};
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_SERVICE_H_
