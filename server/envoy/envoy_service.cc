#include "server/envoy/envoy_service.h"

#include <algorithm>

#include "server/envoy/envoy_convert.h"
#include "server/envoy/envoy_evaluator.h"
#include "server/envoy/envoy_metadata.h"
#include "server/envoy/envoy_overrides.h"
#include "server/observability/log.h"
#include "server/serving/grpc_convert.h"
#include "server/serving/serving_loop.h"
#include "storage/store_trace.h"

namespace ratelimit {

namespace {

constexpr char kEnvoyService[] = "envoy.service.ratelimit.v3.RateLimitService";

}  // namespace

// One ShouldRateLimit between its store call and its answer.
struct EnvoyRateLimitServiceImpl::Evaluation {
  explicit Evaluation(Telemetry::Rpc r) : rpc(std::move(r)) {}
  Telemetry::Rpc rpc;
  std::string domain;
  // Held until the reply is built: the plan points into this snapshot.
  std::shared_ptr<const EnvoyConfig> config;
  std::vector<EnvoyDescriptorPlan> plan;
  // The call's request (owned by the call, which outlives the evaluation's answer).
  const rlsv3::RateLimitRequest* request = nullptr;
};

void EnvoyRateLimitServiceImpl::OnCall(LoopCall* loop_call, ServingLoop::Burst* burst) {
  auto call = std::make_unique<Call>(loop_call);
  if (!call->Parse()) return;
  auto evaluation = std::make_unique<Evaluation>(telemetry_.StartRpc(
      kEnvoyService, "ShouldRateLimit",
      "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", call->context()));
  Telemetry::Rpc& rpc = evaluation->rpc;
  const rlsv3::RateLimitRequest& request = call->request;
  evaluation->domain = request.domain();
  evaluation->request = &request;
  evaluation->config = registry_.Current();
  absl::StatusOr<std::vector<EnvoyDescriptorPlan>> plan = PlanEnvoyRequest(
      request, *evaluation->config, EnvoyPolicy{options_.shadow_mode, options_.quota_mode});
  if (!plan.ok()) {
    call->Finish(FinishRpc(rpc, ToGrpcStatus(plan.status())));
    return;
  }
  evaluation->plan = *std::move(plan);
  // A plan for an unknown domain has no limit at all; only then is the domain looked up again.
  const bool no_limit = std::all_of(
      evaluation->plan.begin(), evaluation->plan.end(),
      [](const EnvoyDescriptorPlan& p) { return p.kind == EnvoyDescriptorPlan::Kind::kNoLimit; });
  if (no_limit && evaluation->config->FindDomain(request.domain()) == nullptr) {
    // Answered OK with no limit, as the reference does; counted, since a domain misspelt in
    // Envoy's configuration turns its limits off without another sign.
    stats_.RecordDomainNotFound(request.domain());
  }
  if (overrides_ != nullptr) {
    const std::shared_ptr<const OverrideIndex> index = overrides_->Current();
    if (!index->empty() && ApplyEnvoyOverrides(*index, overrides_clock_->NowMicros(),
                                               absl::MakeSpan(evaluation->plan)) > 0) {
      for (const EnvoyDescriptorPlan& p : evaluation->plan) {
        if (!p.runtime_override.empty()) rpc.RecordOverrideDecision(p.config_rule->limit_name);
      }
    }
  }
  if (rpc.span().recording()) {
    rpc.span().SetAttribute("ratelimit.domain", request.domain());
    std::vector<absl::string_view> names;
    for (const EnvoyDescriptorPlan& p : evaluation->plan) {
      if (p.kind == EnvoyDescriptorPlan::Kind::kLimited ||
          p.kind == EnvoyDescriptorPlan::Kind::kRefund ||
          p.kind == EnvoyDescriptorPlan::Kind::kAcquire ||
          p.kind == EnvoyDescriptorPlan::Kind::kRelease) {
        names.push_back(p.rule()->limit_name);
      }
    }
    rpc.SetLimitNames(names);
  }

  rpc.StoreStarted();
  // The store tracer is installed for the store's part on this thread (and handed to a store
  // thread with work that waits).
  std::unique_ptr<ScopedStoreTracer> tracing = rpc.TakeStoreTracerScope();
  Evaluation& e = *evaluation;
  // An answer made on another thread (the Redis client's I/O thread, a store thread) is finished
  // on the loop thread that received the call.
  LoopInbox* const inbox = ServingLoop::ThreadInbox();
  EvaluateEnvoyPlanAsync(
      scheduler_, clock_, e.plan, burst,
      [this, inbox, evaluation = std::move(evaluation),
       call = std::move(call)](absl::StatusOr<std::vector<EnvoyOutcome>> outcomes) mutable {
        evaluation->rpc.StoreFinished(outcomes.status());
        RunOnLoopThread(inbox, [this, evaluation = std::move(evaluation), call = std::move(call),
                                outcomes = std::move(outcomes)]() mutable {
          call->Finish(Answer(*evaluation, std::move(outcomes), &call->response));
        });
      });
}

grpc::Status EnvoyRateLimitServiceImpl::Answer(Evaluation& evaluation,
                                               absl::StatusOr<std::vector<EnvoyOutcome>> outcomes,
                                               rlsv3::RateLimitResponse* response) {
  Telemetry::Rpc& rpc = evaluation.rpc;
  const std::vector<EnvoyDescriptorPlan>& plan = evaluation.plan;
  if (!outcomes.ok()) {
    store_failure_log_.Log({{"domain", evaluation.domain},
                            {"error", std::string(outcomes.status().message())},
                            {"trace_id", rpc.TraceId()}});
    return FinishRpc(rpc, ToGrpcStatus(StoreUnavailable(outcomes.status())));
  }
  EnvoyResponseOptions response_options;
  response_options.ratelimit_headers = options_.ratelimit_headers;
  response_options.shadow_mode = options_.shadow_mode;
  response_options.header_names = options_.header_names;
  if (BuildEnvoyResponse(plan, *outcomes, response_options, response)) {
    stats_.RecordGlobalShadow();
  }
  if (options_.response_dynamic_metadata) {
    *response->mutable_dynamic_metadata() =
        EnvoyDynamicMetadata(*evaluation.request, plan, response->statuses());
  }
  AddEnvoyLeaseToken(*outcomes, response);
  stats_.Record(plan, *outcomes);
  CountLeases(plan, *outcomes);
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    if (p.kind != EnvoyDescriptorPlan::Kind::kLimited &&
        p.kind != EnvoyDescriptorPlan::Kind::kBlocked &&
        p.kind != EnvoyDescriptorPlan::Kind::kRefund &&
        p.kind != EnvoyDescriptorPlan::Kind::kAcquire &&
        p.kind != EnvoyDescriptorPlan::Kind::kRelease) {
      continue;
    }
    const char* outcome = p.kind == EnvoyDescriptorPlan::Kind::kRefund    ? "refunded"
                          : p.kind == EnvoyDescriptorPlan::Kind::kRelease ? "released"
                          : !(*outcomes)[i].over                          ? "allowed"
                          : p.shadow                                      ? "shadow_denied"
                                                                          : "denied";
    rpc.RecordDecision(
        p.kind == EnvoyDescriptorPlan::Kind::kBlocked ? p.stat_key : p.rule()->limit_name, outcome);
  }
  rpc.SetDecision(response->overall_code() == rlsv3::RateLimitResponse::OK);
  return FinishRpc(rpc, grpc::Status::OK);
}

// The lease metrics of a request's concurrency descriptors, as the ratelimit.v1 API counts its
// Acquire and Release calls, under the rule's limit name.
void EnvoyRateLimitServiceImpl::CountLeases(absl::Span<const EnvoyDescriptorPlan> plan,
                                            absl::Span<const EnvoyOutcome> outcomes) const {
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    const EnvoyOutcome& o = outcomes[i];
    if (p.kind == EnvoyDescriptorPlan::Kind::kAcquire && !p.check_only) {
      telemetry_.CountLeaseAcquire(p.rule()->limit_name,
                                   o.lease_token.empty() ? "refused" : "acquired");
    } else if (p.kind == EnvoyDescriptorPlan::Kind::kRelease) {
      telemetry_.CountLeaseRelease(p.rule()->limit_name, o.released ? "released" : "not_held");
    } else {
      continue;
    }
    telemetry_.CountLeasesExpired(p.rule()->limit_name, o.leases_expired);
    if (lease_observer_ && o.lease_decided) {
      lease_observer_(StateKey{p.rule()->limit_name, p.lease.key.key, LimitSource::kEnvoy},
                      o.lease_held, p.lease.config.max_lease_ttl_us, o.lease_seq);
    }
  }
}

}  // namespace ratelimit
