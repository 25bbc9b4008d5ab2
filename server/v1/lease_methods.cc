// RateLimitServiceImpl's methods for concurrency limits (docs/leases.md): Acquire, Release,
// Extend, ListLeases, Check of a request naming a concurrency limit, and Reset of one.

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "server/serving/grpc_convert.h"
#include "server/serving/parsed_unary.h"
#include "server/v1/lease_convert.h"
#include "server/v1/rate_limit_service.h"
#include "storage/leases/lease_id.h"

namespace ratelimit {
namespace {

constexpr char kService[] = "ratelimit.v1.RateLimitService";

// The lease op as a store operation of its own (no rate limits).
LeaseOperation Alone(LeaseOp op) { return LeaseOperation{std::move(op), {}}; }

// A valid configuration of a concurrency limit, for decisions that read no field of it (a listing,
// a reset) on a key whose limit has no configuration here (an inline limit, one removed since).
LimitConfig AnyConcurrencyConfig() {
  LimitConfig config;
  config.kind = LimitKind::kConcurrency;
  config.capacity = 1;
  FillLeaseTtlDefaults(config);
  return config;
}

}  // namespace

absl::StatusOr<LeaseOutcome> RateLimitServiceImpl::DecideLeaseOp(Telemetry::Rpc& rpc,
                                                                 const LeaseOperation& op) {
  rpc.StoreStarted();
  absl::StatusOr<LeaseOutcome> outcome = scheduler_.Lease(op);
  rpc.StoreFinished(outcome.status());
  return outcome;
}

grpc::Status RateLimitServiceImpl::LeaseFailure(Telemetry::Rpc& rpc,
                                                const absl::Status& error) const {
  // No failure policy for leases: a slot handed out uncounted is a slot over capacity.
  if (IsCallersError(error)) return FinishRpc(rpc, ToGrpcStatus(error));
  return StoreFailure(rpc, error);
}

// Called before the answer is sent, never after: a caller who has its answer and then scrapes the
// metrics sees the gauge with its call in it. (Applying a burst's observations together once its
// answers are sent would save the gauge's cache misses at many keys, but leave that window open.)
void RateLimitServiceImpl::ObserveLease(const LeaseOp& op, const LeaseDecision& decision) const {
  ObserveLeaseAs(op.key.name, op, decision);
}

void RateLimitServiceImpl::ObserveLeaseAs(const std::string& label, const LeaseOp& op,
                                          const LeaseDecision& decision) const {
  telemetry_.CountLeasesExpired(label, decision.expired_unreleased);
  // Every decision reports, a check included: one that finds a lease expired frees its slots.
  if (held_slots_ != nullptr) {
    held_slots_->Observe(op.key.source, label, op.key.key, decision.held,
                         op.config.max_lease_ttl_us, decision.seq);
  }
}

// Acquire, Release and Extend are answered when the store has written their decision, without
// holding the serving thread meanwhile (DecisionScheduler::DecideLease): RocksDB then writes the
// decisions of many calls in one WAL group, as it does Consume's.
struct RateLimitServiceImpl::LeaseCallState {
  // The call's Rpc is moved once, into the state (its two spans are costly to move).
  explicit LeaseCallState(Telemetry::Rpc&& rpc) : rpc(std::move(rpc)) {}
  Telemetry::Rpc rpc;
  // Acquire: the resolved limits (the concurrency one at plan->concurrency; its lease op moved
  // into `operation`) and the rate limits' store ops, which `operation` names. On a heap block
  // of its own, so that a state stays small enough for the allocator's per-thread cache (a lease
  // call's state came to 1.5 KB with it inside, and its allocation cost more than a Consume's).
  std::unique_ptr<AcquirePlan> plan;
  std::vector<LimitOp> rate;
  LeaseOperation operation;
};

// A lease call in flight: the call, its state and how it is answered, in one block, so that the
// decision's callback holds one pointer (and fits in the callback's own storage, not the heap).
template <typename Request, typename Response>
struct RateLimitServiceImpl::LeaseCall {
  using Answer = grpc::Status (RateLimitServiceImpl::*)(LeaseCallState&, const LeaseOutcome&,
                                                        Response*);
  LeaseCall(std::unique_ptr<ParsedLoopCall<Request, Response>> c, Telemetry::Rpc&& rpc, Answer a)
      : call(std::move(c)), state(std::move(rpc)), answer(a) {}
  std::unique_ptr<ParsedLoopCall<Request, Response>> call;
  LeaseCallState state;
  const Answer answer;
};

template <typename Request, typename Response>
void RateLimitServiceImpl::ServeLeaseCall(
    LoopCall* loop_call, ServingLoop::Burst* burst, const char* method, const char* span_name,
    std::optional<grpc::Status> (RateLimitServiceImpl::*prepare)(const Request&, LeaseCallState&),
    grpc::Status (RateLimitServiceImpl::*answer)(LeaseCallState&, const LeaseOutcome&, Response*)) {
  using Pending = LeaseCall<Request, Response>;
  // glibc's per-thread cache takes blocks up to 1032 bytes: a call's blocks stay within it.
  static_assert(sizeof(Pending) <= 1024 && sizeof(AcquirePlan) <= 1024);
  static_assert(sizeof(ParsedLoopCall<Request, Response>) <= 1024);
  auto call = std::make_unique<ParsedLoopCall<Request, Response>>(loop_call);
  if (!call->Parse()) return;
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, method, span_name, call->context());
  auto pending = std::make_unique<Pending>(std::move(call), std::move(rpc), answer);
  LeaseCallState& state = pending->state;
  if (std::optional<grpc::Status> refused = (this->*prepare)(pending->call->request, state)) {
    pending->call->Finish(FinishRpc(state.rpc, *refused));
    return;
  }
  state.rpc.StoreStarted();
  // The store tracer is installed for the store's part on this thread (and handed to a store
  // thread with the decision).
  std::unique_ptr<ScopedStoreTracer> tracing = state.rpc.TakeStoreTracerScope();
  const LeaseOperation& operation = state.operation;  // on the heap: stays where it is
  scheduler_.DecideLease(
      operation, burst,
      [this, pending = std::move(pending)](absl::StatusOr<LeaseOutcome>&& outcome) mutable {
        LeaseCallState& state = pending->state;
        ParsedLoopCall<Request, Response>& call = *pending->call;
        state.rpc.StoreFinished(outcome.status());
        if (!outcome.ok()) {
          call.Finish(LeaseFailure(state.rpc, outcome.status()));
          return;
        }
        ObserveLease(state.operation.lease, outcome->lease);
        call.Finish(
            FinishRpc(state.rpc, (this->*pending->answer)(state, *outcome, &call.response)));
      });
}

std::optional<grpc::Status> RateLimitServiceImpl::PrepareAcquire(const v1::AcquireRequest& request,
                                                                 LeaseCallState& state) {
  state.plan = std::make_unique<AcquirePlan>();
  AcquirePlan& p = *state.plan;
  if (absl::Status s =
          AcquireFromProto(request, *registry_.Current(), inline_limits_, LeaseId::New(), p);
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  // Overrides adjust the rate limits (a concurrency limit has none), when the request has any.
  if (p.limits.size() > 1) {
    const absl::Span<LimitRequest> all = absl::MakeSpan(p.limits);
    ApplyOverridesTo(all.subspan(0, p.concurrency));
    ApplyOverridesTo(all.subspan(p.concurrency + 1));
  }
  state.rpc.SetLimits(p.limits);
  state.rate.reserve(p.limits.size() - 1);
  for (size_t i = 0; i < p.limits.size(); ++i) {
    if (i == p.concurrency) continue;
    const LimitRequest& l = p.limits[i];
    state.rate.push_back(LimitOp{StateKey{l.name, l.key, l.source}, l.config, l.count});
  }
  // The lease op moves into the store operation: the answer reads it there.
  state.operation.lease = std::move(p.lease);
  state.operation.limits = state.rate;
  state.operation.lease_at = p.concurrency;
  return std::nullopt;
}

grpc::Status RateLimitServiceImpl::AnswerAcquire(LeaseCallState& state, const LeaseOutcome& outcome,
                                                 v1::AcquireResponse* response) {
  const LeaseOp& op = state.operation.lease;
  if (outcome.lease.replayed && outcome.lease.lease) {
    // The store answered an earlier acquire with this request_id, which took nothing: a request
    // that asks for something else under it is refused, as Consume refuses one.
    if (absl::Status s = CheckSameAcquire(op, *outcome.lease.lease); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  telemetry_.CountLeaseAcquire(op.key.name, outcome.lease.replayed ? "replayed"
                                            : outcome.allowed      ? "acquired"
                                                                   : "refused");
  if (outcome.lease.replayed) telemetry_.CountReplay("Acquire");
  AcquireToProto(*state.plan, outcome, response);
  Telemetry::Rpc& rpc = state.rpc;
  rpc.SetDecision(response->allowed());
  if (rpc.span().recording()) {
    rpc.span().SetAttribute("ratelimit.lease.count", op.count);
    rpc.span().SetAttribute("ratelimit.lease.held", outcome.lease.held);
    if (response->has_lease())
      rpc.span().SetAttribute("ratelimit.lease.id", response->lease().id());
    if (outcome.lease.replayed) rpc.span().SetAttribute("ratelimit.replayed", true);
  }
  return grpc::Status::OK;
}

std::optional<grpc::Status> RateLimitServiceImpl::PrepareRelease(const v1::ReleaseRequest& request,
                                                                 LeaseCallState& state) {
  absl::StatusOr<LeaseOp> op = ReleaseFromProto(request, *registry_.Current(), inline_limits_);
  if (!op.ok()) return ToGrpcStatus(op.status());
  state.operation.lease = *std::move(op);
  return std::nullopt;
}

grpc::Status RateLimitServiceImpl::AnswerRelease(LeaseCallState& state, const LeaseOutcome& outcome,
                                                 v1::ReleaseResponse* response) {
  const LeaseOp& op = state.operation.lease;
  const bool released = outcome.lease.state == LeaseState::kReleased;
  telemetry_.CountLeaseRelease(op.key.name, released ? "released" : "not_held");
  ReleaseToProto(outcome.lease, response);
  if (state.rpc.span().recording()) {
    state.rpc.span().SetAttribute("ratelimit.lease.id", op.lease_id.ToString());
    state.rpc.span().SetAttribute("ratelimit.lease.released", released);
  }
  return grpc::Status::OK;
}

std::optional<grpc::Status> RateLimitServiceImpl::PrepareExtend(const v1::ExtendRequest& request,
                                                                LeaseCallState& state) {
  absl::StatusOr<LeaseOp> op = ExtendFromProto(request, *registry_.Current(), inline_limits_);
  if (!op.ok()) return ToGrpcStatus(op.status());
  state.operation.lease = *std::move(op);
  return std::nullopt;
}

grpc::Status RateLimitServiceImpl::AnswerExtend(LeaseCallState& state, const LeaseOutcome& outcome,
                                                v1::ExtendResponse* response) {
  const LeaseOp& op = state.operation.lease;
  const bool held = outcome.lease.state == LeaseState::kHeld;
  telemetry_.CountLeaseExtend(op.key.name, held ? "held" : "not_held");
  ExtendToProto(op, outcome.lease, response);
  if (state.rpc.span().recording()) {
    state.rpc.span().SetAttribute("ratelimit.lease.id", op.lease_id.ToString());
    state.rpc.span().SetAttribute("ratelimit.lease.held", held);
  }
  return grpc::Status::OK;
}

void RateLimitServiceImpl::OnAcquireCall(LoopCall* call, ServingLoop::Burst* burst) {
  ServeLeaseCall<v1::AcquireRequest, v1::AcquireResponse>(
      call, burst, "Acquire", "ratelimit.v1.RateLimitService/Acquire",
      &RateLimitServiceImpl::PrepareAcquire, &RateLimitServiceImpl::AnswerAcquire);
}

void RateLimitServiceImpl::OnReleaseCall(LoopCall* call, ServingLoop::Burst* burst) {
  ServeLeaseCall<v1::ReleaseRequest, v1::ReleaseResponse>(
      call, burst, "Release", "ratelimit.v1.RateLimitService/Release",
      &RateLimitServiceImpl::PrepareRelease, &RateLimitServiceImpl::AnswerRelease);
}

void RateLimitServiceImpl::OnExtendCall(LoopCall* call, ServingLoop::Burst* burst) {
  ServeLeaseCall<v1::ExtendRequest, v1::ExtendResponse>(
      call, burst, "Extend", "ratelimit.v1.RateLimitService/Extend",
      &RateLimitServiceImpl::PrepareExtend, &RateLimitServiceImpl::AnswerExtend);
}

template <typename Request, typename Response>
void RateLimitServiceImpl::DecideStreamOpAs(
    const Request& request, uint64_t id, const grpc::ServerContextBase& context,
    ServingLoop::Burst* burst, const char* method, const char* span_name,
    std::optional<grpc::Status> (RateLimitServiceImpl::*prepare)(const Request&, LeaseCallState&),
    grpc::Status (RateLimitServiceImpl::*answer)(LeaseCallState&, const LeaseOutcome&, Response*),
    Response* (v1::LeaseOpResult::*answer_of)(), StreamOpDone done) {
  // The op in flight: its state, its result being built and where the result goes, in one block.
  struct Pending {
    explicit Pending(Telemetry::Rpc&& rpc) : state(std::move(rpc)) {}
    LeaseCallState state;
    v1::LeaseOpResult result;
    StreamOpDone done;
  };
  auto pending =
      std::make_unique<Pending>(telemetry_.StartRpc(kService, method, span_name, context));
  pending->result.set_id(id);
  pending->done = std::move(done);
  // The op's status into its result: an error replaces any answer.
  auto complete = [](Pending& p, const grpc::Status& status) {
    if (!status.ok()) {
      p.result.clear_result();
      p.result.set_code(static_cast<int32_t>(status.error_code()));
      p.result.set_message(status.error_message());
    }
    std::move(p.done)(std::move(p.result));
  };
  LeaseCallState& state = pending->state;
  if (std::optional<grpc::Status> refused = (this->*prepare)(request, state)) {
    complete(*pending, FinishRpc(state.rpc, *refused));
    return;
  }
  state.rpc.StoreStarted();
  std::unique_ptr<ScopedStoreTracer> tracing = state.rpc.TakeStoreTracerScope();
  const LeaseOperation& operation = state.operation;  // on the heap: stays where it is
  scheduler_.DecideLease(
      operation, burst,
      [this, pending = std::move(pending), answer, answer_of,
       complete](absl::StatusOr<LeaseOutcome>&& outcome) mutable {
        LeaseCallState& state = pending->state;
        state.rpc.StoreFinished(outcome.status());
        if (!outcome.ok()) {
          complete(*pending, LeaseFailure(state.rpc, outcome.status()));
          return;
        }
        ObserveLease(state.operation.lease, outcome->lease);
        complete(*pending, FinishRpc(state.rpc, (this->*answer)(state, *outcome,
                                                                (pending->result.*answer_of)())));
      });
}

void RateLimitServiceImpl::DecideStreamOp(const v1::LeaseOp& op,
                                          const grpc::ServerContextBase& context,
                                          ServingLoop::Burst* burst, StreamOpDone done) {
  switch (op.op_case()) {
    case v1::LeaseOp::kAcquire:
      return DecideStreamOpAs<v1::AcquireRequest, v1::AcquireResponse>(
          op.acquire(), op.id(), context, burst, "Acquire", "ratelimit.v1.RateLimitService/Acquire",
          &RateLimitServiceImpl::PrepareAcquire, &RateLimitServiceImpl::AnswerAcquire,
          &v1::LeaseOpResult::mutable_acquire, std::move(done));
    case v1::LeaseOp::kRelease:
      return DecideStreamOpAs<v1::ReleaseRequest, v1::ReleaseResponse>(
          op.release(), op.id(), context, burst, "Release", "ratelimit.v1.RateLimitService/Release",
          &RateLimitServiceImpl::PrepareRelease, &RateLimitServiceImpl::AnswerRelease,
          &v1::LeaseOpResult::mutable_release, std::move(done));
    case v1::LeaseOp::kExtend:
      return DecideStreamOpAs<v1::ExtendRequest, v1::ExtendResponse>(
          op.extend(), op.id(), context, burst, "Extend", "ratelimit.v1.RateLimitService/Extend",
          &RateLimitServiceImpl::PrepareExtend, &RateLimitServiceImpl::AnswerExtend,
          &v1::LeaseOpResult::mutable_extend, std::move(done));
    case v1::LeaseOp::OP_NOT_SET:
      break;
  }
  v1::LeaseOpResult result;
  result.set_id(op.id());
  result.set_code(static_cast<int32_t>(grpc::StatusCode::INVALID_ARGUMENT));
  result.set_message("op: one of acquire, release or extend is required");
  std::move(done)(std::move(result));
}

absl::StatusOr<std::string> RateLimitServiceImpl::AuthorizeAdmin(const grpc::ServerContext& context,
                                                                 Telemetry::Rpc& rpc,
                                                                 absl::string_view limit,
                                                                 RepeatedLog& refused_log) const {
  return admin_.AuthorizeRpc(context, rpc, {"limit", std::string(limit)}, refused_log);
}

grpc::Status RateLimitServiceImpl::HandleListLeases(const grpc::ServerContext& context,
                                                    const v1::ListLeasesRequest* request,
                                                    v1::ListLeasesResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, "ListLeases",
                                           "ratelimit.v1.RateLimitService/ListLeases", context);
  // Refusals under the call's own name (a refused ListLeases was logged as a reset).
  absl::StatusOr<std::string> admin =
      AuthorizeAdmin(context, rpc, request->name(), list_leases_refused_log_);
  if (!admin.ok()) return FinishRpc(rpc, ToGrpcStatus(admin.status()));
  absl::StatusOr<LeaseOp> op = ListLeasesFromProto(*request, *registry_.Current(), inline_limits_);
  if (!op.ok()) return FinishRpc(rpc, ToGrpcStatus(op.status()));
  absl::StatusOr<LeaseOutcome> outcome = DecideLeaseOp(rpc, Alone(*op));
  if (!outcome.ok()) return LeaseFailure(rpc, outcome.status());
  ObserveLease(*op, outcome->lease);  // a listing drops, and counts, the leases it finds expired
  ListLeasesToProto(*op, outcome->lease, response);
  return FinishRpc(rpc, grpc::Status::OK);
}

absl::StatusOr<Verdict> RateLimitServiceImpl::CheckWithLeases(
    absl::Span<const LimitRequest> limits) {
  Outcome merged;
  merged.allowed = true;
  merged.decisions.resize(limits.size());
  LimitRequests rate;
  std::vector<size_t> rate_at;
  for (size_t i = 0; i < limits.size(); ++i) {
    const LimitRequest& l = limits[i];
    if (l.config.kind != LimitKind::kConcurrency) {
      rate.push_back(l);
      rate_at.push_back(i);
      continue;
    }
    LeaseOp op;
    op.key = StateKey{l.name, l.key, l.source};
    op.config = l.config;
    op.action = LeaseAction::kCheck;
    op.count = static_cast<int64_t>(l.count);
    absl::StatusOr<LeaseOutcome> outcome = scheduler_.Lease(Alone(op));
    if (!outcome.ok()) return outcome.status();
    ObserveLease(op, outcome->lease);
    merged.decisions[i] = LeaseAsDecision(outcome->lease);
    merged.allowed = merged.allowed && outcome->lease.allowed;
    merged.now_us = std::max(merged.now_us, outcome->now_us);
  }
  if (!rate.empty()) {
    absl::StatusOr<Verdict> checked = scheduler_.Evaluate(rate, Mode::kCheck);
    if (!checked.ok()) return checked.status();
    for (size_t j = 0; j < rate_at.size(); ++j) {
      merged.decisions[rate_at[j]] = checked->decisions[j];
    }
    merged.allowed = merged.allowed && checked->allowed;
    merged.now_us = std::max(merged.now_us, checked->now_us);
  }
  return VerdictOf(std::move(merged));
}

absl::StatusOr<uint64_t> RateLimitServiceImpl::ResetLeases(const ResetTarget& target) {
  LeaseOp op;
  op.key = StateKey{target.name, target.key, target.source};
  // Seen under the limit's label, as its calls are (an Envoy rule's name, not its state's).
  SweptLimit limit = SweptLimitOf(op.key);
  if (target.all_keys) {
    absl::StatusOr<uint64_t> ended = scheduler_.ResetAllLeases(target.name, target.source);
    // Forgotten even when the store failed part-way: a key still held shows again at its next
    // decision, where a key shown after its leases ended would stay until its max_lease_ttl.
    if (held_slots_ != nullptr) held_slots_->ForgetLimit(target.source, limit.label);
    return ended;
  }
  op.config = std::move(limit.config);  // the gauge keeps the key's slots its max_lease_ttl
  op.action = LeaseAction::kList;
  absl::StatusOr<LeaseOutcome> listed = scheduler_.Lease(Alone(op));
  if (!listed.ok()) return listed.status();
  // The leases it found expired are dropped and counted here.
  ObserveLeaseAs(limit.label, op, listed->lease);
  op.action = LeaseAction::kReset;
  absl::StatusOr<LeaseOutcome> reset = scheduler_.Lease(Alone(op));
  if (!reset.ok()) return reset.status();
  ObserveLeaseAs(limit.label, op, reset->lease);
  return listed->lease.held_leases.size();
}

RateLimitServiceImpl::SweptLimit RateLimitServiceImpl::SweptLimitOf(const StateKey& key) const {
  if (key.source == LimitSource::kDefined) {
    const std::shared_ptr<const LimitSet> limits = registry_.Current();
    const LimitConfig* defined = limits->Find(key.name);
    if (defined != nullptr && defined->kind == LimitKind::kConcurrency) {
      return SweptLimit{key.name, *defined};
    }
  } else if (key.source == LimitSource::kEnvoy && envoy_lease_rule_) {
    if (std::optional<SweptLimit> rule = envoy_lease_rule_(key.name)) return *std::move(rule);
  }
  return SweptLimit{key.name, AnyConcurrencyConfig()};
}

absl::StatusOr<int64_t> RateLimitServiceImpl::SweepLeakedLeases() {
  int64_t counted = 0;
  absl::Status first_error;
  std::string cursor;
  do {
    absl::StatusOr<StateStore::LeakedLeaseKeys> page = scheduler_.FindLeakedLeaseKeys(cursor);
    if (!page.ok()) return page.status();
    for (StateKey& key : page->keys) {
      SweptLimit limit = SweptLimitOf(key);
      LeaseOp op;
      op.key = std::move(key);
      op.config = std::move(limit.config);
      op.action = LeaseAction::kList;  // reads one lease; drops and counts the expired ones
      op.list_limit = 1;
      absl::StatusOr<LeaseOutcome> outcome = scheduler_.Lease(Alone(op));
      if (!outcome.ok()) {
        if (first_error.ok()) first_error = outcome.status();
        continue;
      }
      ObserveLeaseAs(limit.label, op, outcome->lease);
      counted += outcome->lease.expired_unreleased;
    }
    cursor = std::move(page->next);
  } while (!cursor.empty());
  if (!first_error.ok()) return first_error;
  return counted;
}

}  // namespace ratelimit
