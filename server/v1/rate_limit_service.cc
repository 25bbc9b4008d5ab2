#include "server/v1/rate_limit_service.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "server/serving/grpc_convert.h"
#include "server/v1/convert.h"
#include "server/v1/lease_stream.h"

namespace ratelimit {

namespace {
constexpr char kService[] = "ratelimit.v1.RateLimitService";

const char* SpanName(Mode mode) {
  switch (mode) {
    case Mode::kCheck:
      return "ratelimit.v1.RateLimitService/Check";
    case Mode::kConsume:
      return "ratelimit.v1.RateLimitService/Consume";
    case Mode::kReserve:
      return "ratelimit.v1.RateLimitService/Reserve";
  }
  return "ratelimit.v1.RateLimitService/Consume";
}

const char* MethodName(Mode mode) {
  switch (mode) {
    case Mode::kCheck:
      return "Check";
    case Mode::kConsume:
      return "Consume";
    case Mode::kReserve:
      return "Reserve";
  }
  return "Consume";
}

// The keys a reply's receipts are signed with: the current ones when the server signs receipts
// and the caller `wants` them, else the empty key set, which signs none.
std::shared_ptr<const ReceiptKeys> SigningKeys(const SettleOptions& settle, bool wants) {
  if (settle.keys && wants) return settle.keys->Current();
  // Never destroyed: handlers may still run while static destructors do.
  static const auto* const none =
      new std::shared_ptr<const ReceiptKeys>(std::make_shared<const ReceiptKeys>());
  return *none;
}

}  // namespace

// One Consume, Check or Reserve between its store call and its answer.
struct RateLimitServiceImpl::DecideState {
  DecideState(Telemetry::Rpc r, Mode m) : rpc(std::move(r)), mode(m) {}
  Telemetry::Rpc rpc;
  const Mode mode;
  LimitRequests limits;  // the request's, resolved and validated
  std::shared_ptr<const ReceiptKeys> keys;
  // Receipt ids, drawn before deciding, so that the answer remembered for a request_id (built
  // inside the store's transaction) and the answer sent are the same bytes.
  std::vector<std::array<uint8_t, 16>> ids;
  std::string fingerprint;  // of a request with a request_id
};

void RateLimitServiceImpl::RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) {
  grpc::ServerContext* context = &call->context();
  grpc::ByteBuffer* request = &call->request();
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* writer = &call->writer();
  switch (call->method()) {
    case kConsumeMethod:
      return RequestConsume(context, request, writer, cq, cq, call->tag());
    case kCheckMethod:
      return RequestCheck(context, request, writer, cq, cq, call->tag());
    case kReserveMethod:
      return RequestReserve(context, request, writer, cq, cq, call->tag());
    case kResetMethod:
      return RequestReset(context, request, writer, cq, cq, call->tag());
    case kSettleMethod:
      return RequestSettle(context, request, writer, cq, cq, call->tag());
    case kBatchMethod:
      return RequestBatch(context, request, writer, cq, cq, call->tag());
    case kAcquireMethod:
      return RequestAcquire(context, request, writer, cq, cq, call->tag());
    case kReleaseMethod:
      return RequestRelease(context, request, writer, cq, cq, call->tag());
    case kExtendMethod:
      return RequestExtend(context, request, writer, cq, cq, call->tag());
    case kListLeasesMethod:
      return RequestListLeases(context, request, writer, cq, cq, call->tag());
  }
}

std::unique_ptr<ServingLoop::Burst> RateLimitServiceImpl::NewBurst() {
  return scheduler_.NewBurst();
}

void RateLimitServiceImpl::EndBurst(ServingLoop::Burst& burst) {
  scheduler_.EndBurst(burst);
  // The lease streams' results decided in the burst leave in one message per stream.
  LeaseStreams::FlushThisThread();
}

void RateLimitServiceImpl::OnCall(LoopCall* call, ServingLoop::Burst* burst) {
  switch (call->method()) {
    case kConsumeMethod:
      return OnDecideCall(call, Mode::kConsume, burst);
    case kCheckMethod:
      return OnDecideCall(call, Mode::kCheck, burst);
    case kReserveMethod:
      return OnDecideCall(call, Mode::kReserve, burst);
    case kResetMethod:
      return ServeLoopParsed<v1::ResetRequest, v1::ResetResponse>(
          call,
          [this, call](auto* req, auto* resp) { return HandleReset(call->context(), req, resp); },
          &scheduler_);
    case kSettleMethod:
      return ServeLoopParsed<v1::SettleRequest, v1::SettleResponse>(
          call,
          [this, call](auto* req, auto* resp) { return HandleSettle(call->context(), req, resp); },
          &scheduler_);
    case kBatchMethod:
      return ServeLoopParsed<v1::BatchRequest, v1::BatchResponse>(
          call,
          [this, call](auto* req, auto* resp) { return HandleBatch(call->context(), req, resp); },
          &scheduler_);
    case kAcquireMethod:
      return OnAcquireCall(call, burst);
    case kReleaseMethod:
      return OnReleaseCall(call, burst);
    case kExtendMethod:
      return OnExtendCall(call, burst);
    case kListLeasesMethod:
      return ServeLoopParsed<v1::ListLeasesRequest, v1::ListLeasesResponse>(
          call,
          [this, call](auto* req, auto* resp) {
            return HandleListLeases(call->context(), req, resp);
          },
          &scheduler_);
  }
}

void RateLimitServiceImpl::OnDecideCall(LoopCall* loop_call, Mode mode, ServingLoop::Burst* burst) {
  auto call = std::make_unique<DecideCall>(loop_call);
  if (!call->Parse()) return;
  auto state = std::make_unique<DecideState>(
      telemetry_.StartRpc(kService, MethodName(mode), SpanName(mode), call->context()), mode);
  if (std::optional<grpc::Status> refused = Prepare(call->request, *state)) {
    call->Finish(FinishRpc(state->rpc, *refused));
    return;
  }
  if (mode == Mode::kCheck && NamesConcurrencyLimit(state->limits)) {
    scheduler_.RunBlocking([this, call = std::move(call), state = std::move(state)]() mutable {
      state->rpc.StoreStarted();
      absl::StatusOr<Verdict> verdict = CheckWithLeases(state->limits);
      state->rpc.StoreFinished(verdict.status());
      call->Finish(Answer(*state, call->request, std::move(verdict), &call->response));
    });
    return;
  }
  if (mode != Mode::kCheck && !call->request.request_id().empty()) {
    scheduler_.RunBlocking([this, call = std::move(call), state = std::move(state)]() mutable {
      DecideRemembered(std::move(call), std::move(state));
    });
    return;
  }
  state->rpc.StoreStarted();
  // The store tracer is installed for the store's part on this thread (and handed to a store
  // thread with the decision).
  std::unique_ptr<ScopedStoreTracer> tracing = state->rpc.TakeStoreTracerScope();
  DecideState& s = *state;
  scheduler_.Decide(
      s.limits, s.mode, burst,
      [this, state = std::move(state),
       call = std::move(call)](absl::StatusOr<Verdict> verdict) mutable {
        state->rpc.StoreFinished(verdict.status());
        call->Finish(Answer(*state, call->request, std::move(verdict), &call->response));
      });
}

void RateLimitServiceImpl::DecideRemembered(std::unique_ptr<DecideCall> call,
                                            std::unique_ptr<DecideState> state) {
  state->rpc.StoreStarted();
  const v1::RateLimitRequest& request = call->request;
  state->fingerprint = RequestFingerprint(MethodName(state->mode), request);
  Remember remember;
  remember.record.key = RequestIdRecordKey(request.request_id());
  remember.record.expires_at_us = settle_.clock->NowMicros() + settle_.request_id_ttl_us;
  remember.encode = [&](const Verdict& v) {
    v1::RateLimitResponse answer;
    ToProto(*state, v, &answer);
    return RememberedAnswer(state->fingerprint, answer);
  };
  absl::StatusOr<Verdict> verdict = scheduler_.Evaluate(state->limits, state->mode, remember);
  state->rpc.StoreFinished(verdict.status());
  call->Finish(Answer(*state, request, std::move(verdict), &call->response));
}

std::optional<grpc::Status> RateLimitServiceImpl::Prepare(const v1::RateLimitRequest& request,
                                                          DecideState& state) const {
  const std::shared_ptr<const LimitSet> limits = registry_.Current();
  absl::StatusOr<LimitRequests> resolved = ResolveRequest(request, *limits, inline_limits_);
  if (!resolved.ok()) return ToGrpcStatus(resolved.status());
  state.limits = *std::move(resolved);
  // Only Check reads concurrency limits (their free slots), for a whole number of slots.
  if (absl::Status st = state.mode == Mode::kCheck
                            ? CheckSlotCounts(state.limits)
                            : RefuseConcurrencyLimits(state.limits, MethodName(state.mode));
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  ApplyOverridesTo(absl::MakeSpan(state.limits));
  state.rpc.SetLimits(state.limits);
  if (state.mode != Mode::kCheck) {
    if (absl::Status st = ValidateRequestId(request); !st.ok()) return ToGrpcStatus(st);
  }
  state.keys = SigningKeys(settle_, !request.omit_receipts());
  if (state.mode != Mode::kCheck && !state.keys->empty()) {
    for (size_t i = 0; i < state.limits.size(); ++i) state.ids.push_back(NewReceiptId());
  }
  return std::nullopt;
}

void RateLimitServiceImpl::ApplyOverridesTo(absl::Span<LimitRequest> limits) const {
  if (overrides_ == nullptr) return;
  const std::shared_ptr<const OverrideIndex> index = overrides_->Current();
  if (index->empty()) return;
  ApplyOverrides(*index, overrides_clock_->NowMicros(), limits);
}

void RateLimitServiceImpl::ToProto(const DecideState& state, const Verdict& verdict,
                                   v1::RateLimitResponse* out) {
  VerdictToProto(verdict, state.limits, out);
  AddReceipts(*state.keys, verdict, state.limits, state.mode, state.ids, out);
}

grpc::Status RateLimitServiceImpl::Answer(DecideState& state, const v1::RateLimitRequest& request,
                                          absl::StatusOr<Verdict> verdict,
                                          v1::RateLimitResponse* response) const {
  Telemetry::Rpc& rpc = state.rpc;
  const Mode mode = state.mode;
  if (verdict.ok() && verdict->remembered) {
    absl::StatusOr<v1::RateLimitResponse> replay =
        ReplayAnswer(*verdict->remembered, state.fingerprint);
    if (!replay.ok()) return FinishRpc(rpc, ToGrpcStatus(replay.status()));
    telemetry_.CountReplay(MethodName(mode));
    rpc.span().SetAttribute("ratelimit.replayed", true);
    *response = *std::move(replay);
    rpc.SetDecision(response->allowed());
    return FinishRpc(rpc, grpc::Status::OK);
  }
  if (verdict.ok()) {
    rpc.SetVerdict(*verdict, mode);
    ToProto(state, *verdict, response);
    return FinishRpc(rpc, grpc::Status::OK);
  }
  // A request the store cannot take as asked is the caller's to change, not a store failure: no
  // fail-open. Nor for a request_id in progress elsewhere (ABORTED: retry) or used for another
  // request (INVALID_ARGUMENT): answering "allowed" would decide it twice.
  const absl::StatusCode code = verdict.status().code();
  if (IsCallersError(verdict.status()) ||
      (!request.request_id().empty() &&
       (code == absl::StatusCode::kAborted || code == absl::StatusCode::kInvalidArgument))) {
    return FinishRpc(rpc, ToGrpcStatus(verdict.status()));
  }
  if (policy_ == FailurePolicy::kOpen) {
    store_failure_log_.Log({{"error", std::string(verdict.status().message())},
                            {"policy", "open"},
                            {"trace_id", rpc.TraceId()}});
    rpc.SetFailedOpen();
    FailedOpenToProto(state.limits, response);
    return FinishRpc(rpc, grpc::Status::OK);
  }
  return StoreFailure(rpc, verdict.status());
}

grpc::Status RateLimitServiceImpl::StoreFailure(Telemetry::Rpc& rpc,
                                                const absl::Status& error) const {
  store_failure_log_.Log({{"error", std::string(error.message())},
                          {"policy", policy_ == FailurePolicy::kOpen ? "open" : "closed"},
                          {"trace_id", rpc.TraceId()}});
  return FinishRpc(rpc, ToGrpcStatus(StoreUnavailable(error)));
}

grpc::Status RateLimitServiceImpl::HandleBatch(const grpc::ServerContext& context,
                                               const v1::BatchRequest* request,
                                               v1::BatchResponse* response) {
  Telemetry::Rpc rpc =
      telemetry_.StartRpc(kService, "Batch", "ratelimit.v1.RateLimitService/Batch", context);
  if (rpc.span().recording()) {
    rpc.span().SetAttribute("ratelimit.batch.entries", int64_t{request->entries_size()});
  }
  absl::StatusOr<std::vector<BatchEntryPlan>> plans =
      ResolveBatch(*request, *registry_.Current(), inline_limits_);
  if (!plans.ok()) return FinishRpc(rpc, ToGrpcStatus(plans.status()));
  for (BatchEntryPlan& plan : *plans) ApplyOverridesTo(absl::MakeSpan(plan.limits));
  std::vector<absl::StatusOr<Verdict>> verdicts;
  // Every entry invalid: no store call.
  if (std::any_of(plans->begin(), plans->end(),
                  [](const BatchEntryPlan& plan) { return plan.error.ok(); })) {
    rpc.StoreStarted();
    verdicts = DecideBatch(*plans);
    absl::Status store_status;
    for (const absl::StatusOr<Verdict>& v : verdicts) {
      if (!v.ok()) {
        store_status = v.status();
        break;
      }
    }
    rpc.StoreFinished(store_status);
  }
  AnswerBatch(rpc, *plans, verdicts, response);
  return FinishRpc(rpc, grpc::Status::OK);
}

std::vector<absl::StatusOr<Verdict>> RateLimitServiceImpl::DecideBatch(
    absl::Span<const BatchEntryPlan> plans) {
  std::vector<absl::StatusOr<Verdict>> verdicts;
  verdicts.reserve(plans.size());
  std::vector<BatchItem> run;  // valid entries since the last one that reads slots
  // A valid entry naming a concurrency limit is a CHECK (ResolveBatch refuses the others).
  auto decide_run = [&] {
    if (run.empty()) return;
    std::vector<absl::StatusOr<Verdict>> decided = scheduler_.EvaluateBatch(run);
    std::move(decided.begin(), decided.end(), std::back_inserter(verdicts));
    run.clear();
  };
  for (const BatchEntryPlan& plan : plans) {
    if (!plan.error.ok()) continue;
    if (!NamesConcurrencyLimit(plan.limits)) {
      run.push_back(BatchItem{plan.limits, plan.mode});
      continue;
    }
    // After the entries before it and before those after it, as if each were a call of its own.
    decide_run();
    verdicts.push_back(CheckWithLeases(plan.limits));
  }
  decide_run();
  return verdicts;
}

namespace {

// Decisions are counted per run of one (limit, outcome): a batch is mostly the same few limits,
// and each count is a lookup in the metric family.
class DecisionRuns {
 public:
  explicit DecisionRuns(Telemetry::Rpc& rpc) : rpc_(rpc) {}
  ~DecisionRuns() {
    if (limit_ != nullptr) rpc_.RecordDecision(*limit_, outcome_, length_);
  }
  void Record(absl::Span<const LimitRequest> limits, const char* outcome) {
    for (const LimitRequest& l : limits) Record(l.name, outcome);
  }

 private:
  void Record(const std::string& limit, const char* outcome) {
    if (limit_ != nullptr && *limit_ == limit && outcome_ == outcome) {
      ++length_;
      return;
    }
    if (limit_ != nullptr) rpc_.RecordDecision(*limit_, outcome_, length_);
    limit_ = &limit;
    outcome_ = outcome;
    length_ = 1;
  }

  Telemetry::Rpc& rpc_;
  const std::string* limit_ = nullptr;
  const char* outcome_ = nullptr;
  uint64_t length_ = 0;
};

}  // namespace

void RateLimitServiceImpl::AnswerBatch(Telemetry::Rpc& rpc, absl::Span<const BatchEntryPlan> plans,
                                       const std::vector<absl::StatusOr<Verdict>>& verdicts,
                                       v1::BatchResponse* response) const {
  // Whether an entry wants receipts is its own (plan.receipts).
  const std::shared_ptr<const ReceiptKeys> keys = SigningKeys(settle_, true);
  std::vector<std::array<uint8_t, 16>> ids;
  int store_failures = 0;
  absl::Status first_failure;  // for the log
  size_t next = 0;
  {
    DecisionRuns runs(rpc);
    response->mutable_results()->Reserve(static_cast<int>(plans.size()));
    for (const BatchEntryPlan& plan : plans) {
      v1::BatchResult* result = response->add_results();
      if (!plan.error.ok()) {
        EntryErrorToProto(plan.error, result);
        continue;
      }
      const absl::StatusOr<Verdict>& verdict = verdicts[next++];
      if (verdict.ok()) {
        if (plan.mode != Mode::kCheck) {
          runs.Record(plan.limits, Telemetry::Rpc::DecisionOutcome(*verdict, plan.mode));
          rpc.RecordOverrideDecisions(plan.limits);
        }
        VerdictToProto(*verdict, plan.limits, result->mutable_response());
        if (verdict->allowed && plan.mode != Mode::kCheck && plan.receipts && !keys->empty()) {
          ids.clear();
          for (size_t i = 0; i < plan.limits.size(); ++i) ids.push_back(NewReceiptId());
          AddReceipts(*keys, *verdict, plan.limits, plan.mode, ids, result->mutable_response());
        }
      } else if (IsCallersError(verdict.status())) {  // as for Consume
        EntryErrorToProto(verdict.status(), result);
      } else {
        if (++store_failures == 1) first_failure = verdict.status();
        if (policy_ == FailurePolicy::kOpen) {
          runs.Record(plan.limits, "failed_open");
          FailedOpenToProto(plan.limits, result->mutable_response());
        } else {
          EntryErrorToProto(StoreUnavailable(verdict.status()), result);
        }
      }
    }
  }
  if (store_failures == 0) return;
  store_failure_log_.Log({{"error", std::string(first_failure.message())},
                          {"policy", policy_ == FailurePolicy::kOpen ? "open" : "closed"},
                          {"batch_entries_failed", absl::StrCat(store_failures)},
                          {"trace_id", rpc.TraceId()}},
                         static_cast<uint64_t>(store_failures));
  if (policy_ == FailurePolicy::kOpen) rpc.span().SetAttribute("ratelimit.failed_open", true);
}

grpc::Status RateLimitServiceImpl::HandleSettle(const grpc::ServerContext& context,
                                                const v1::SettleRequest* request,
                                                v1::SettleResponse* response) {
  Telemetry::Rpc rpc =
      telemetry_.StartRpc(kService, "Settle", "ratelimit.v1.RateLimitService/Settle", context);
  if (settle_.keys == nullptr) {
    return FinishRpc(rpc,
                     grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                  "this server issues no receipts, so there is nothing to settle"));
  }
  const std::shared_ptr<const ReceiptKeys> keys = settle_.keys->Current();
  const std::shared_ptr<const LimitSet> limits = registry_.Current();
  absl::StatusOr<std::vector<SettleItem>> items =
      SettleFromProto(*request, *keys, *limits, settle_.receipt_ttl_us, settle_.clock->NowMicros());
  if (!items.ok()) {
    telemetry_.CountSettlement("rejected", request->settlements_size());
    return FinishRpc(rpc, ToGrpcStatus(items.status()));
  }
  rpc.StoreStarted();
  absl::StatusOr<SettleVerdict> verdict = scheduler_.Settle(*items);
  rpc.StoreFinished(verdict.status());
  if (!verdict.ok()) {
    // Receipts of limits in different slots of a Redis Cluster: the caller's to split.
    if (IsCallersError(verdict.status())) return FinishRpc(rpc, ToGrpcStatus(verdict.status()));
    return StoreFailure(rpc, verdict.status());
  }
  if (verdict->already_settled) {
    telemetry_.CountSettlement("rejected", request->settlements_size());
    return FinishRpc(rpc,
                     grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                                  absl::StrCat("settlements[", *verdict->already_settled,
                                               "].receipt: already settled; nothing was settled")));
  }
  SettleToProto(*verdict, *items, response);
  // One array element per settlement, in request order.
  std::vector<absl::string_view> names;
  std::vector<double> used, returned, charged, uncharged;
  for (size_t i = 0; i < items->size(); ++i) {
    const Settled& settled = verdict->results[i];
    telemetry_.CountSettled(settled.returned, settled.charged);
    names.push_back((*items)[i].name);
    used.push_back((*items)[i].used);
    returned.push_back(settled.returned);
    charged.push_back(settled.charged);
    uncharged.push_back(settled.uncharged);
  }
  rpc.span().SetAttribute("ratelimit.limits", absl::MakeConstSpan(names));
  rpc.span().SetAttribute("ratelimit.settle.used", absl::MakeConstSpan(used));
  rpc.span().SetAttribute("ratelimit.settle.returned", absl::MakeConstSpan(returned));
  rpc.span().SetAttribute("ratelimit.settle.charged", absl::MakeConstSpan(charged));
  rpc.span().SetAttribute("ratelimit.settle.uncharged", absl::MakeConstSpan(uncharged));
  return FinishRpc(rpc, grpc::Status::OK);
}

absl::Status RateLimitServiceImpl::ResolveResetTarget(ResetTarget& target) const {
  switch (target.source) {
    case LimitSource::kDefined:
      if (registry_.Current()->Find(target.name) != nullptr) return absl::OkStatus();
      return absl::NotFoundError(absl::StrCat("name: no limit \"", target.name,
                                              "\" in the limits file (inline limits: "
                                              "source=INLINE)"));
    case LimitSource::kEnvoy: {
      if (!envoy_reset_resolver_) {
        return absl::NotFoundError(
            "source: this server does not serve the Envoy API (--envoy_config_dir is not set)");
      }
      absl::StatusOr<EnvoyResetResolution> resolved = envoy_reset_resolver_(target);
      if (!resolved.ok()) return resolved.status();
      target.name = std::move(resolved->name);
      target.key_suffixes = std::move(resolved->key_suffixes);
      target.envoy_concurrency = resolved->concurrency;
      return absl::OkStatus();
    }
    case LimitSource::kInline:
      break;
  }
  return absl::OkStatus();
}

grpc::Status RateLimitServiceImpl::HandleReset(const grpc::ServerContext& context,
                                               const v1::ResetRequest* request,
                                               v1::ResetResponse* response) {
  Telemetry::Rpc rpc =
      telemetry_.StartRpc(kService, "Reset", "ratelimit.v1.RateLimitService/Reset", context);
  const std::string peer = context.peer();
  absl::StatusOr<std::string> admin =
      AuthorizeAdmin(context, rpc, request->name(), reset_refused_log_);
  if (!admin.ok()) return FinishRpc(rpc, ToGrpcStatus(admin.status()));
  absl::StatusOr<ResetTarget> target = ResetFromProto(*request);
  if (!target.ok()) return FinishRpc(rpc, ToGrpcStatus(target.status()));
  if (absl::Status s = ResolveResetTarget(*target); !s.ok()) {
    return FinishRpc(rpc, ToGrpcStatus(s));
  }
  rpc.StoreStarted();
  const std::shared_ptr<const LimitSet> defined = registry_.Current();
  const LimitConfig* config =
      target->source == LimitSource::kDefined ? defined->Find(target->name) : nullptr;
  const bool concurrency =
      (config != nullptr && config->kind == LimitKind::kConcurrency) || target->envoy_concurrency;
  absl::StatusOr<uint64_t> deleted =
      concurrency        ? ResetLeases(*target)
      : target->all_keys ? scheduler_.ResetAll(target->name, target->source)
                         : scheduler_.Reset(target->name, target->key, target->source);
  uint64_t leases_ended = concurrency && deleted.ok() ? *deleted : 0;
  if (deleted.ok() && target->source == LimitSource::kInline) {
    // An inline name may be a concurrency limit's too: its leases end with its states.
    absl::StatusOr<uint64_t> leases = ResetLeases(*target);
    if (leases.ok()) {
      deleted = *deleted + *leases;
      leases_ended = *leases;
    } else if (!absl::IsUnimplemented(leases.status())) {
      deleted = leases.status();
    }
  }
  for (const std::string& suffix : target->key_suffixes) {
    if (!deleted.ok() || target->all_keys) break;
    absl::StatusOr<uint64_t> more =
        scheduler_.Reset(target->name, target->key + suffix, target->source);
    deleted = more.ok() ? absl::StatusOr<uint64_t>(*deleted + *more) : more;
  }
  const absl::Status s = deleted.status();
  rpc.StoreFinished(s);
  const std::string key = target->all_keys ? std::string("(all keys)") : target->key;
  if (s.ok()) {
    Log(LogLevel::kInfo, "reset",
        {{"peer", peer},
         {"authorized_by", *admin},
         {"source", std::string(LimitSourceName(target->source))},
         {"limit", target->display_name},
         {"key", key},
         {"deleted", absl::StrCat(*deleted)},
         {"leases", absl::StrCat(leases_ended)},
         {"trace_id", rpc.TraceId()}});
    response->set_deleted(*deleted);
    response->set_leases(leases_ended);
    return FinishRpc(rpc, grpc::Status::OK);
  }
  reset_failed_log_.Log({{"peer", peer},
                         {"limit", target->display_name},
                         {"key", key},
                         {"error", std::string(s.message())},
                         {"trace_id", rpc.TraceId()}});
  return FinishRpc(rpc, ToGrpcStatus(StoreUnavailable(s)));
}

}  // namespace ratelimit
