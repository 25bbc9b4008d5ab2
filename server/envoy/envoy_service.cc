#include "server/envoy/envoy_service.h"

#include "server/envoy/envoy_convert.h"
#include "server/envoy/envoy_evaluator.h"
#include "server/grpc_convert.h"
#include "server/log.h"

namespace ratelimit {

namespace {

constexpr char kEnvoyService[] = "envoy.service.ratelimit.v3.RateLimitService";

}  // namespace

grpc::Status EnvoyRateLimitServiceImpl::HandleShouldRateLimit(
    grpc::CallbackServerContext* context, const rlsv3::RateLimitRequest* request,
    rlsv3::RateLimitResponse* response) {
  Telemetry::Rpc rpc =
      telemetry_.StartRpc(kEnvoyService, "ShouldRateLimit",
                          "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", *context);
  // Held until the reply is built: the plan points into this snapshot.
  const std::shared_ptr<const EnvoyConfig> config = registry_.Current();
  absl::StatusOr<std::vector<EnvoyDescriptorPlan>> plan = PlanEnvoyRequest(*request, *config);
  if (!plan.ok()) return FinishRpc(rpc, ToGrpcStatus(plan.status()));
  if (rpc.span().recording()) {
    rpc.span().SetAttribute("ratelimit.domain", request->domain());
    std::vector<absl::string_view> names;
    for (const EnvoyDescriptorPlan& p : *plan) {
      if (p.kind == EnvoyDescriptorPlan::Kind::kLimited) names.push_back(p.rule()->limit_name);
    }
    rpc.SetLimitNames(names);
  }

  rpc.StoreStarted();
  absl::StatusOr<std::vector<EnvoyOutcome>> outcomes = EvaluateEnvoyPlan(limiter_, clock_, *plan);
  rpc.StoreFinished(outcomes.status());
  if (!outcomes.ok()) {
    Log(LogLevel::kError, "store failure (envoy api)",
        {{"domain", request->domain()},
         {"error", std::string(outcomes.status().message())},
         {"trace_id", rpc.TraceId()}});
    return FinishRpc(rpc, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                       "rate-limit store unavailable: " +
                                           std::string(outcomes.status().message())));
  }
  BuildEnvoyResponse(*plan, *outcomes, ratelimit_headers_, response);
  stats_.Record(*plan, *outcomes);
  for (size_t i = 0; i < plan->size(); ++i) {
    const EnvoyDescriptorPlan& p = (*plan)[i];
    if (p.kind != EnvoyDescriptorPlan::Kind::kLimited &&
        p.kind != EnvoyDescriptorPlan::Kind::kBlocked) {
      continue;
    }
    const char* outcome = !(*outcomes)[i].over ? "allowed"
                          : p.shadow()         ? "shadow_denied"
                                               : "denied";
    rpc.RecordDecision(
        p.kind == EnvoyDescriptorPlan::Kind::kLimited ? p.rule()->limit_name : p.stat_key, outcome);
  }
  rpc.SetDecision(response->overall_code() == rlsv3::RateLimitResponse::OK);
  return FinishRpc(rpc, grpc::Status::OK);
}

}  // namespace ratelimit
