#ifndef RATELIMIT_SERVER_RATE_LIMIT_SERVICE_H_
#define RATELIMIT_SERVER_RATE_LIMIT_SERVICE_H_

#include <memory>
#include <optional>

#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/admin_auth.h"
#include "server/convert.h"
#include "server/grpc_convert.h"
#include "server/limit_registry.h"
#include "server/observability/telemetry.h"
#include "server/parsed_unary.h"
#include "server/settle.h"
#include "server/store_executor.h"
#include "storage/limiter.h"

namespace ratelimit {

// What the server does when the store fails.
enum class FailurePolicy {
  kClosed,  // answer UNAVAILABLE (default): nothing is allowed that was not counted
  kOpen,    // allow, and say so in the reply (failed_open = true)
};

// ratelimit.v1.RateLimitService on the gRPC callback API. Each handler converts the request
// (convert.h), asks the Limiter, converts the verdict back and finishes; it holds no state of
// its own. The methods are registered raw and parsed by ServeParsed (parsed_unary.h), so that a
// malformed body is INVALID_ARGUMENT.
//
// Thread safety: thread-safe; dependencies are not owned and must outlive the service.
class RateLimitServiceImpl final
    : public v1::RateLimitService::WithRawCallbackMethod_Consume<
          v1::RateLimitService::WithRawCallbackMethod_Check<
              v1::RateLimitService::WithRawCallbackMethod_Reserve<
                  v1::RateLimitService::WithRawCallbackMethod_Reset<
                      v1::RateLimitService::WithRawCallbackMethod_Settle<
                          v1::RateLimitService::WithRawCallbackMethod_Batch<
                              v1::RateLimitService::CallbackService>>>>>> {
 public:
  // The generated bases' other overloads of each method (the synchronous ones they disable),
  // named so that the overrides below do not hide them.
  using WithRawCallbackMethod_Batch::Batch;
  using WithRawCallbackMethod_Check::Check;
  using WithRawCallbackMethod_Consume::Consume;
  using WithRawCallbackMethod_Reserve::Reserve;
  using WithRawCallbackMethod_Reset::Reset;
  using WithRawCallbackMethod_Settle::Settle;

  RateLimitServiceImpl(Limiter& limiter, const LimitRegistry& registry,
                       const AdminAuthenticator& admin, FailurePolicy policy,
                       const Telemetry& telemetry,
                       InlineLimits inline_limits = InlineLimits::kAllow,
                       SettleOptions settle = SettleOptions())
      : limiter_(limiter),
        registry_(registry),
        admin_(admin),
        policy_(policy),
        telemetry_(telemetry),
        inline_limits_(inline_limits),
        settle_(settle) {}

  // Where the handlers run (store_executor.h); null: inline on gRPC's callback thread. Set
  // before the service is registered; not owned, outlives the gRPC server.
  void set_executor(StoreExecutor* executor) { executor_ = executor; }

  // The registered (raw) methods: parse, then the typed handlers above.
  grpc::ServerUnaryReactor* Consume(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    return ServeParsedAsync<v1::RateLimitRequest, v1::RateLimitResponse>(
        context, request, response,
        [this, context](std::unique_ptr<DecideCall> call) {
          ServeDecide(context, std::move(call), Mode::kConsume);
        },
        executor_,
        [this](const v1::RateLimitRequest& r) { return DecidesInline(r, Mode::kConsume); });
  }
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override {
    return ServeParsedAsync<v1::RateLimitRequest, v1::RateLimitResponse>(
        context, request, response,
        [this, context](std::unique_ptr<DecideCall> call) {
          ServeDecide(context, std::move(call), Mode::kCheck);
        },
        executor_,
        [this](const v1::RateLimitRequest& r) { return DecidesInline(r, Mode::kCheck); });
  }
  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    return ServeParsedAsync<v1::RateLimitRequest, v1::RateLimitResponse>(
        context, request, response,
        [this, context](std::unique_ptr<DecideCall> call) {
          ServeDecide(context, std::move(call), Mode::kReserve);
        },
        executor_,
        [this](const v1::RateLimitRequest& r) { return DecidesInline(r, Mode::kReserve); });
  }
  grpc::ServerUnaryReactor* Reset(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override {
    return ServeParsed<v1::ResetRequest, v1::ResetResponse>(
        context, request, response,
        [this, context](auto* req, auto* resp) { return HandleReset(context, req, resp); },
        executor_);
  }

  grpc::ServerUnaryReactor* Settle(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override {
    return ServeParsed<v1::SettleRequest, v1::SettleResponse>(
        context, request, response,
        [this, context](auto* req, auto* resp) { return HandleSettle(context, req, resp); },
        executor_);
  }
  grpc::ServerUnaryReactor* Batch(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override {
    return ServeParsed<v1::BatchRequest, v1::BatchResponse>(
        context, request, response,
        [this, context](auto* req, auto* resp) { return HandleBatch(context, req, resp); },
        executor_);
  }

 private:
  // The typed handlers, run by ServeParsed (on the store executor when there is one); each
  // fills the response and returns the call's status.
  grpc::Status HandleReset(grpc::CallbackServerContext* context, const v1::ResetRequest* request,
                           v1::ResetResponse* response);
  grpc::Status HandleSettle(grpc::CallbackServerContext* context, const v1::SettleRequest* request,
                            v1::SettleResponse* response);
  // Each entry exactly as its method would decide it (Decide), all with one store call
  // (Limiter::EvaluateBatch); per-entry errors and failure policy in the entry's result.
  grpc::Status HandleBatch(grpc::CallbackServerContext* context, const v1::BatchRequest* request,
                           v1::BatchResponse* response);

  // Whether ServeDecide answers `request` without waiting on the calling thread: through the
  // store's asynchronous path (no request_id to remember) on a store whose asynchronous path never
  // waits for its peer. Such calls skip the store executor.
  bool DecidesInline(const v1::RateLimitRequest& request, Mode mode) const {
    return limiter_.AsyncNeverWaits() && (mode == Mode::kCheck || request.request_id().empty());
  }
  // Consume, Check and Reserve: validates, decides (answered by the store once the decision is
  // durable, possibly on a store thread; with a request_id, on this thread) and finishes `call`.
  using DecideCall = PendingUnary<v1::RateLimitRequest, v1::RateLimitResponse>;
  struct DecideState;
  void ServeDecide(grpc::CallbackServerContext* context, std::unique_ptr<DecideCall> call,
                   Mode mode);
  // Resolves and validates the request into `state`; the refusal to answer, if any.
  std::optional<grpc::Status> Prepare(const v1::RateLimitRequest& request,
                                      DecideState& state) const;
  // The reply for `verdict` (receipts included), and the call's status; finishes the telemetry.
  grpc::Status Answer(DecideState& state, const v1::RateLimitRequest& request,
                      absl::StatusOr<Verdict> verdict, v1::RateLimitResponse* response) const;
  static void ToProto(const DecideState& state, const Verdict& verdict, v1::RateLimitResponse* out);

  Limiter& limiter_;
  StoreExecutor* executor_ = nullptr;
  const LimitRegistry& registry_;
  const AdminAuthenticator& admin_;
  const FailurePolicy policy_;
  const Telemetry& telemetry_;
  const InlineLimits inline_limits_;
  const SettleOptions settle_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RATE_LIMIT_SERVICE_H_
