#include "server/rate_limit_service.h"

#include <optional>

#include "server/convert.h"
#include "server/log.h"

namespace ratelimit {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

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
  const std::shared_ptr<const LimitSet> limits = registry_.Current();
  absl::StatusOr<std::vector<LimitRequest>> resolved = ResolveRequest(request, *limits);
  if (!resolved.ok()) {
    reactor->Finish(ToGrpcStatus(resolved.status()));
    return reactor;
  }
  absl::StatusOr<Verdict> verdict = limiter_.Evaluate(*resolved, mode);
  if (verdict.ok()) {
    VerdictToProto(*verdict, *resolved, response);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  Log(LogLevel::kError, "store failure",
      {{"error", std::string(verdict.status().message())},
       {"policy", policy_ == FailurePolicy::kOpen ? "open" : "closed"}});
  if (policy_ == FailurePolicy::kOpen) {
    FailedOpenToProto(*resolved, response);
    reactor->Finish(grpc::Status::OK);
  } else {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     "rate-limit store unavailable: " + std::string(verdict.status().message())));
  }
  return reactor;
}

grpc::ServerUnaryReactor* RateLimitServiceImpl::Reset(grpc::CallbackServerContext* context,
                                                      const v1::ResetRequest* request,
                                                      v1::ResetResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::optional<absl::string_view> authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  const std::string peer = context->peer();
  if (absl::Status s = admin_.Authorize(authorization); !s.ok()) {
    Log(LogLevel::kWarning, "reset refused",
        {{"peer", peer}, {"limit", request->name()}, {"reason", std::string(s.message())}});
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  if (absl::Status s = ValidateResetRequest(*request); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  absl::Status s = request->all_keys() ? limiter_.ResetAll(request->name())
                                       : limiter_.Reset(request->name(), request->key());
  const std::string key = request->all_keys() ? std::string("(all keys)") : request->key();
  if (s.ok()) {
    Log(LogLevel::kInfo, "reset", {{"peer", peer}, {"limit", request->name()}, {"key", key}});
  } else {
    Log(LogLevel::kError, "reset failed",
        {{"peer", peer},
         {"limit", request->name()},
         {"key", key},
         {"error", std::string(s.message())}});
  }
  if (!s.ok()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "rate-limit store unavailable: " + std::string(s.message())));
  } else {
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

}  // namespace ratelimit
