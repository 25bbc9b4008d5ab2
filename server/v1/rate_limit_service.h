#ifndef RATELIMIT_SERVER_V1_RATE_LIMIT_SERVICE_H_
#define RATELIMIT_SERVER_V1_RATE_LIMIT_SERVICE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/admin/admin_auth.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/serving/decision_scheduler.h"
#include "server/serving/parsed_unary.h"
#include "server/serving/serving_loop.h"
#include "server/v1/convert.h"
#include "server/v1/held_slots.h"
#include "server/v1/lease_convert.h"
#include "server/v1/limit_registry.h"
#include "server/v1/settle.h"
#include "storage/clock.h"
#include "storage/overrides/override_index.h"

namespace ratelimit {

// What the server does when the store fails.
enum class FailurePolicy {
  kClosed,  // answer UNAVAILABLE (default): nothing is allowed that was not counted
  kOpen,    // allow, and say so in the reply (failed_open = true)
};

// ratelimit.v1.RateLimitService, served by a ServingLoop (serving_loop.h): the service is its
// Handler for every method. Each handler converts the request (convert.h), has it decided
// (server/serving/decision_scheduler.h: which thread, which burst, the store's errors), converts
// the verdict back and finishes; it holds no state of its own. The methods are registered raw and
// parsed here (parsed_unary.h), so that a malformed body is INVALID_ARGUMENT.
//
// Thread safety: thread-safe; dependencies are not owned and must outlive the service.
// Every method of the service, registered raw.
using RawRateLimitService = v1::RateLimitService::WithRawMethod_Consume<
    v1::RateLimitService::WithRawMethod_Check<v1::RateLimitService::WithRawMethod_Reserve<
        v1::RateLimitService::WithRawMethod_Reset<v1::RateLimitService::WithRawMethod_Settle<
            v1::RateLimitService::WithRawMethod_Batch<v1::RateLimitService::WithRawMethod_Acquire<
                v1::RateLimitService::WithRawMethod_Release<
                    v1::RateLimitService::WithRawMethod_Extend<
                        v1::RateLimitService::WithRawMethod_ListLeases<
                            v1::RateLimitService::WithRawMethod_LeaseStream<
                                v1::RateLimitService::Service>>>>>>>>>>>;

class RateLimitServiceImpl final : public RawRateLimitService, public ServingLoop::Handler {
 public:
  // The indexes of the methods (their order in the proto's service).
  static constexpr int kConsumeMethod = 0;
  static constexpr int kCheckMethod = 1;
  static constexpr int kReserveMethod = 2;
  static constexpr int kResetMethod = 3;
  static constexpr int kSettleMethod = 4;
  static constexpr int kBatchMethod = 5;
  static constexpr int kAcquireMethod = 6;
  static constexpr int kReleaseMethod = 7;
  static constexpr int kExtendMethod = 8;
  static constexpr int kListLeasesMethod = 9;
  // LeaseStream (method 10) is a stream, served by LeaseStreams (lease_stream.h).
  // The methods callers send at volume (every one but Reset and ListLeases), and those two.
  static std::vector<int> TrafficMethods() {
    return {kConsumeMethod, kCheckMethod,   kReserveMethod, kSettleMethod,
            kBatchMethod,   kAcquireMethod, kReleaseMethod, kExtendMethod};
  }
  static std::vector<int> AdminMethods() { return {kResetMethod, kListLeasesMethod}; }

  RateLimitServiceImpl(DecisionScheduler& scheduler, const LimitRegistry& registry,
                       const AdminAuthenticator& admin, FailurePolicy policy,
                       const Telemetry& telemetry,
                       InlineLimits inline_limits = InlineLimits::kAllow,
                       SettleOptions settle = SettleOptions())
      : scheduler_(scheduler),
        registry_(registry),
        admin_(admin),
        policy_(policy),
        telemetry_(telemetry),
        inline_limits_(inline_limits),
        settle_(settle) {}

  // How Reset names the states of an Envoy target (source ENVOY: a domain and a descriptor
  // path): their state name and, for a rule with several limits, the key suffixes of its other
  // states (ResetTarget::key_suffixes), or NOT_FOUND naming the field when the Envoy
  // configuration has no such target. The composition root binds it to the Envoy API; unset (no
  // Envoy API), every Envoy target is NOT_FOUND. Set before the service is registered.
  struct EnvoyResetResolution {
    std::string name;
    std::vector<std::string> key_suffixes;
    bool concurrency = false;  // a concurrency rule: its reset ends its leases
  };
  using EnvoyResetResolver =
      std::function<absl::StatusOr<EnvoyResetResolution>(const ResetTarget&)>;
  void set_envoy_reset_resolver(EnvoyResetResolver resolve) {
    envoy_reset_resolver_ = std::move(resolve);
  }

  // The runtime overrides decisions apply (storage/overrides/override_index.h), read at
  // `clock`'s time; unset: none. Both must outlive the service. Set before the service is
  // registered.
  void set_overrides(const ConfigSnapshot<OverrideIndex>* overrides, const Clock* clock) {
    overrides_ = overrides;
    overrides_clock_ = clock;
  }

  // One op of a lease stream (lease_stream.h), decided as the call it stands for (Acquire,
  // Release or Extend: the same checks, store transaction, metrics and span, the span and the
  // metrics under that call's method). `done` gets the op's result (its id, and the answer or the
  // error the call would have ended with) once the decision is durable, on the thread it completes
  // on, or at once when the op is refused before deciding. `context` is the stream's.
  using StreamOpDone = absl::AnyInvocable<void(v1::LeaseOpResult&&) &&>;
  void DecideStreamOp(const v1::LeaseOp& op, const grpc::ServerContextBase& context,
                      ServingLoop::Burst* burst, StreamOpDone done);

  // Where the slots held of concurrency limits are reported (the gauge); unset: nowhere. Must
  // outlive the service. Set before the service is registered.
  void set_held_slots(HeldSlots* held) { held_slots_ = held; }

  // What the leak sweep knows of a concurrency key of the Envoy API (source ENVOY), by its state
  // name: the rule's readable name, which its metrics and the gauge are labelled with, and its
  // limit's configuration; nullopt when no configured rule has the state name. The composition
  // root binds it to the Envoy API; unset, or nullopt: such a key is swept under its state name.
  // Set before the sweep runs.
  struct SweptLimit {
    std::string label;
    LimitConfig config;
  };
  using EnvoyLeaseRule = std::function<std::optional<SweptLimit>(absl::string_view state_name)>;
  void set_envoy_lease_rule(EnvoyLeaseRule rule) { envoy_lease_rule_ = std::move(rule); }

  // The leak sweep (docs/leases.md, the leak detector): one pass over the concurrency keys the
  // store names as holding a lease that expired unreleased (StateStore::FindLeakedLeaseKeys),
  // each decided as a listing of one lease. The decision drops the expired leases and counts
  // them in ratelimit_leases_expired_total, once whoever else decides on the key, and the gauge
  // shows the slots left held, though no caller touches the key again. Returns how many leases
  // the pass counted, or the first store error (the pass goes on past a key whose decision
  // fails). The server runs it every --lease_sweep_interval, on a thread of its own.
  absl::StatusOr<int64_t> SweepLeakedLeases();

  // ServingLoop::Handler.
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override;
  std::unique_ptr<ServingLoop::Burst> NewBurst() override;
  void OnCall(LoopCall* call, ServingLoop::Burst* burst) override;
  void EndBurst(ServingLoop::Burst& burst) override;

 private:
  // The typed handlers, run by ServeParsed (on the store executor when there is one); each
  // fills the response and returns the call's status.
  grpc::Status HandleReset(const grpc::ServerContext& context, const v1::ResetRequest* request,
                           v1::ResetResponse* response);
  grpc::Status HandleSettle(const grpc::ServerContext& context, const v1::SettleRequest* request,
                            v1::SettleResponse* response);
  // Each entry exactly as its method would decide it (Decide), in order (DecideBatch);
  // per-entry errors and failure policy in the entry's result.
  grpc::Status HandleBatch(const grpc::ServerContext& context, const v1::BatchRequest* request,
                           v1::BatchResponse* response);
  // The valid entries' verdicts, in order: runs of entries with one call of the store's batch
  // operation each (Limiter::EvaluateBatch; one call for a batch without a CHECK of slots); a
  // CHECK entry naming a concurrency limit as Check decides one (CheckWithLeases), between the
  // runs before and after it.
  std::vector<absl::StatusOr<Verdict>> DecideBatch(absl::Span<const BatchEntryPlan> plans);
  // One result per entry of `plans`: its error, its verdict (with receipts), or its store failure
  // under the failure policy; `verdicts` are the valid entries', in order.
  void AnswerBatch(Telemetry::Rpc& rpc, absl::Span<const BatchEntryPlan> plans,
                   const std::vector<absl::StatusOr<Verdict>>& verdicts,
                   v1::BatchResponse* response) const;

  // Consume, Check and Reserve: validates, has it decided (DecisionScheduler::Decide, or for a
  // request_id DecideRemembered) and answers.
  void OnDecideCall(LoopCall* call, Mode mode, ServingLoop::Burst* burst);
  // Consume, Check and Reserve, parsed.
  using DecideCall = ParsedLoopCall<v1::RateLimitRequest, v1::RateLimitResponse>;
  struct DecideState;
  // A call with a request_id: the answer is remembered in the decision's own transaction, which
  // holds its keys until written; run where the store may be waited for (RunBlocking).
  void DecideRemembered(std::unique_ptr<DecideCall> call, std::unique_ptr<DecideState> state);
  // Resolves and validates the request into `state`; the refusal to answer, if any.
  std::optional<grpc::Status> Prepare(const v1::RateLimitRequest& request,
                                      DecideState& state) const;
  // The reply for `verdict` (receipts included), and the call's status; finishes the telemetry.
  grpc::Status Answer(DecideState& state, const v1::RateLimitRequest& request,
                      absl::StatusOr<Verdict> verdict, v1::RateLimitResponse* response) const;
  static void ToProto(const DecideState& state, const Verdict& verdict, v1::RateLimitResponse* out);

  // Concurrency limits (lease_methods.cc): Acquire, Release, Extend and ListLeases, and Check of
  // a request with a concurrency limit (each limit decided on its own, nothing written).
  // Acquire, Release and Extend: parsed, prepared (the store operation, or the refusal), decided
  // by DecisionScheduler::DecideLease and answered once durable.
  struct LeaseCallState;
  template <typename Request, typename Response>
  struct LeaseCall;
  void OnAcquireCall(LoopCall* call, ServingLoop::Burst* burst);
  void OnReleaseCall(LoopCall* call, ServingLoop::Burst* burst);
  void OnExtendCall(LoopCall* call, ServingLoop::Burst* burst);
  template <typename Request, typename Response>
  void ServeLeaseCall(LoopCall* loop_call, ServingLoop::Burst* burst, const char* method,
                      const char* span_name,
                      std::optional<grpc::Status> (RateLimitServiceImpl::*prepare)(const Request&,
                                                                                   LeaseCallState&),
                      grpc::Status (RateLimitServiceImpl::*answer)(LeaseCallState&,
                                                                   const LeaseOutcome&, Response*));
  std::optional<grpc::Status> PrepareAcquire(const v1::AcquireRequest& request,
                                             LeaseCallState& state);
  grpc::Status AnswerAcquire(LeaseCallState& state, const LeaseOutcome& outcome,
                             v1::AcquireResponse* response);
  std::optional<grpc::Status> PrepareRelease(const v1::ReleaseRequest& request,
                                             LeaseCallState& state);
  grpc::Status AnswerRelease(LeaseCallState& state, const LeaseOutcome& outcome,
                             v1::ReleaseResponse* response);
  std::optional<grpc::Status> PrepareExtend(const v1::ExtendRequest& request,
                                            LeaseCallState& state);
  grpc::Status AnswerExtend(LeaseCallState& state, const LeaseOutcome& outcome,
                            v1::ExtendResponse* response);
  // DecideStreamOp for one kind of op: `prepare` and `answer` as ServeLeaseCall's; the answer goes
  // to the result's field `answer_of` gives.
  template <typename Request, typename Response>
  void DecideStreamOpAs(
      const Request& request, uint64_t id, const grpc::ServerContextBase& context,
      ServingLoop::Burst* burst, const char* method, const char* span_name,
      std::optional<grpc::Status> (RateLimitServiceImpl::*prepare)(const Request&, LeaseCallState&),
      grpc::Status (RateLimitServiceImpl::*answer)(LeaseCallState&, const LeaseOutcome&, Response*),
      Response* (v1::LeaseOpResult::*answer_of)(), StreamOpDone done);
  grpc::Status HandleListLeases(const grpc::ServerContext& context,
                                const v1::ListLeasesRequest* request,
                                v1::ListLeasesResponse* response);
  absl::StatusOr<Verdict> CheckWithLeases(absl::Span<const LimitRequest> limits);
  // A lease call's store transaction, bracketed by the call's store span.
  absl::StatusOr<LeaseOutcome> DecideLeaseOp(Telemetry::Rpc& rpc, const LeaseOperation& op);
  // A lease call's failed transaction as its answer: the caller's error as it is, a store failure
  // UNAVAILABLE (never failed open).
  grpc::Status LeaseFailure(Telemetry::Rpc& rpc, const absl::Status& error) const;
  // A lease decision's effects on the metrics: the leases it found expired, the slots held.
  void ObserveLease(const LeaseOp& op, const LeaseDecision& decision) const;
  // The same, counted and gauged under `label` instead of the key's name (SweptLimitOf).
  void ObserveLeaseAs(const std::string& label, const LeaseOp& op,
                      const LeaseDecision& decision) const;
  // Reset of a concurrency limit's key (or every key): ends its leases; how many it ended. Seen in
  // the metrics under SweptLimitOf's label, as the limit's calls are.
  absl::StatusOr<uint64_t> ResetLeases(const ResetTarget& target);
  // The configuration and metric label the sweep decides a concurrency key with: a defined
  // limit's, an Envoy rule's (envoy_lease_rule_), else (an inline limit, or one no longer
  // configured) the key's name and AnyConcurrencyConfig.
  SweptLimit SweptLimitOf(const StateKey& key) const;
  // The admin credential of a call, or the refusal (logged to `refused_log`, the call's own).
  absl::StatusOr<std::string> AuthorizeAdmin(const grpc::ServerContext& context,
                                             Telemetry::Rpc& rpc, absl::string_view limit,
                                             RepeatedLog& refused_log) const;

  // Names the states `target` resets (ENVOY: through set_envoy_reset_resolver), or NOT_FOUND
  // naming the field when it names no configured limit. Inline limits have no configuration:
  // every name is accepted.
  absl::Status ResolveResetTarget(ResetTarget& target) const;
  // The store's failure as the call's answer: logged (once, then summarised) and UNAVAILABLE.
  grpc::Status StoreFailure(Telemetry::Rpc& rpc, const absl::Status& error) const;

  // Adjusts the limits of the limits file by the overrides in force, if any.
  void ApplyOverridesTo(absl::Span<LimitRequest> limits) const;

  DecisionScheduler& scheduler_;
  EnvoyResetResolver envoy_reset_resolver_;
  EnvoyLeaseRule envoy_lease_rule_;
  const ConfigSnapshot<OverrideIndex>* overrides_ = nullptr;
  HeldSlots* held_slots_ = nullptr;
  const Clock* overrides_clock_ = nullptr;
  const LimitRegistry& registry_;
  const AdminAuthenticator& admin_;
  const FailurePolicy policy_;
  const Telemetry& telemetry_;
  const InlineLimits inline_limits_;
  const SettleOptions settle_;
  // Events that can repeat as often as calls arrive: logged once, then summarised.
  mutable RepeatedLog store_failure_log_{LogLevel::kError, "store failure"};
  mutable RepeatedLog reset_refused_log_{LogLevel::kWarning, "reset refused"};
  mutable RepeatedLog list_leases_refused_log_{LogLevel::kWarning, "list leases refused"};
  mutable RepeatedLog reset_failed_log_{LogLevel::kError, "reset failed"};
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_RATE_LIMIT_SERVICE_H_
