#include "server/rate_limit_service.h"

#include <optional>

#include "absl/strings/str_join.h"
#include "server/convert.h"
#include "server/log.h"
#include "server/tls.h"

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

}  // namespace

grpc::ServerUnaryReactor* RateLimitServiceImpl::Consume(grpc::CallbackServerContext* context,
                                                        const v1::RateLimitRequest* request,
                                                        v1::RateLimitResponse* response) {
  return Decide(context, *request, Mode::kConsume, response);
}

grpc::ServerUnaryReactor* RateLimitServiceImpl::Check(grpc::CallbackServerContext* context,
                                                      const v1::RateLimitRequest* request,
                                                      v1::RateLimitResponse* response) {
  return Decide(context, *request, Mode::kCheck, response);
}

grpc::ServerUnaryReactor* RateLimitServiceImpl::Reserve(grpc::CallbackServerContext* context,
                                                        const v1::RateLimitRequest* request,
                                                        v1::RateLimitResponse* response) {
  return Decide(context, *request, Mode::kReserve, response);
}

grpc::ServerUnaryReactor* RateLimitServiceImpl::Decide(grpc::CallbackServerContext* context,
                                                       const v1::RateLimitRequest& request,
                                                       Mode mode, v1::RateLimitResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, MethodName(mode), SpanName(mode), *context);
  const std::shared_ptr<const LimitSet> limits = registry_.Current();
  absl::StatusOr<std::vector<LimitRequest>> resolved =
      ResolveRequest(request, *limits, inline_limits_);
  if (!resolved.ok()) return FinishRpc(reactor, rpc, ToGrpcStatus(resolved.status()));
  rpc.SetLimits(*resolved);

  rpc.StoreStarted();
  absl::StatusOr<Verdict> verdict = limiter_.Evaluate(*resolved, mode);
  rpc.StoreFinished(verdict.status());
  if (verdict.ok()) {
    rpc.SetVerdict(*verdict, mode);
    VerdictToProto(*verdict, *resolved, response);
    return FinishRpc(reactor, rpc, grpc::Status::OK);
  }
  Log(LogLevel::kError, "store failure",
      {{"error", std::string(verdict.status().message())},
       {"policy", policy_ == FailurePolicy::kOpen ? "open" : "closed"},
       {"trace_id", rpc.TraceId()}});
  if (policy_ == FailurePolicy::kOpen) {
    rpc.SetFailedOpen();
    FailedOpenToProto(*resolved, response);
    return FinishRpc(reactor, rpc, grpc::Status::OK);
  }
  return FinishRpc(
      reactor, rpc,
      grpc::Status(grpc::StatusCode::UNAVAILABLE,
                   "rate-limit store unavailable: " + std::string(verdict.status().message())));
}

grpc::ServerUnaryReactor* RateLimitServiceImpl::Reset(grpc::CallbackServerContext* context,
                                                      const v1::ResetRequest* request,
                                                      v1::ResetResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Telemetry::Rpc rpc =
      telemetry_.StartRpc(kService, "Reset", "ratelimit.v1.RateLimitService/Reset", *context);
  std::optional<absl::string_view> authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  const std::string peer = context->peer();
  const std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  const std::vector<std::string> identities =
      auth ? PeerIdentities(*auth) : std::vector<std::string>();
  absl::StatusOr<std::string> admin = admin_.AuthorizeCall(authorization, identities);
  if (!admin.ok()) {
    Log(LogLevel::kWarning, "reset refused",
        {{"peer", peer},
         {"peer_identities", absl::StrJoin(identities, ",")},
         {"limit", request->name()},
         {"reason", std::string(admin.status().message())},
         {"trace_id", rpc.TraceId()}});
    return FinishRpc(reactor, rpc, ToGrpcStatus(admin.status()));
  }
  absl::StatusOr<ResetTarget> target = ResetFromProto(*request);
  if (!target.ok()) return FinishRpc(reactor, rpc, ToGrpcStatus(target.status()));
  rpc.StoreStarted();
  absl::Status s = target->all_keys ? limiter_.ResetAll(target->name, target->source)
                                    : limiter_.Reset(target->name, target->key, target->source);
  rpc.StoreFinished(s);
  const std::string key = target->all_keys ? std::string("(all keys)") : target->key;
  if (s.ok()) {
    Log(LogLevel::kInfo, "reset",
        {{"peer", peer},
         {"authorized_by", *admin},
         {"source", std::string(LimitSourceName(target->source))},
         {"limit", target->display_name},
         {"key", key},
         {"trace_id", rpc.TraceId()}});
    return FinishRpc(reactor, rpc, grpc::Status::OK);
  }
  Log(LogLevel::kError, "reset failed",
      {{"peer", peer},
       {"limit", target->display_name},
       {"key", key},
       {"error", std::string(s.message())},
       {"trace_id", rpc.TraceId()}});
  return FinishRpc(reactor, rpc,
                   grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "rate-limit store unavailable: " + std::string(s.message())));
}

}  // namespace ratelimit
