#include "server/overrides/override_service.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "server/envoy/envoy_config.h"
#include "server/observability/log.h"
#include "server/overrides/override_convert.h"
#include "server/serving/grpc_convert.h"
#include "server/serving/parsed_unary.h"
#include "storage/overrides/override_codec.h"

namespace ratelimit {
namespace {

constexpr char kService[] = "ratelimit.v1.OverrideService";

// "alice (token)": the caller's actor and the credential that authorised it.
std::string SetBy(absl::string_view actor, absl::string_view authorized_by) {
  if (actor.empty()) return std::string(authorized_by);
  return absl::StrCat(actor, " (", authorized_by, ")");
}

// "api key k1", or for an Envoy rule "envoy edge/path=/a/user key k1".
std::string TargetName(const OverrideTarget& t) {
  std::string name = t.name;
  if (t.source == LimitSource::kEnvoy) {
    if (std::optional<EnvoyStatePath> rule = ParseEnvoyStateName(t.name)) {
      name = absl::StrCat("envoy ", rule->domain);
      for (const auto& [key, value] : rule->path) {
        absl::StrAppend(&name, "/", key, value.empty() ? "" : "=", value);
      }
    }
  }
  return absl::StrCat(name, t.pattern ? " pattern " : " key ", t.key);
}

// The stored keys ListOverrides shows: those of `source`, and with a name of that limit (ENVOY:
// of every rule of that domain, whose state names all begin alike).
std::string ListPrefix(v1::LimitSource source, absl::string_view name) {
  if (source == v1::ENVOY) {
    std::string prefix = OverrideNamePrefix(LimitSource::kEnvoy, "");
    prefix.pop_back();  // the name's terminator: the rules' names continue past the domain
    if (!name.empty()) {
      prefix += EnvoyStateName(name, {}, /*override_limit=*/false);
    }
    return prefix;
  }
  if (name.empty()) {
    std::string prefix = OverrideNamePrefix(LimitSource::kDefined, "");
    prefix.pop_back();
    return prefix;
  }
  return OverrideNamePrefix(LimitSource::kDefined, name);
}

}  // namespace

void OverrideServiceImpl::RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) {
  grpc::ServerContext* context = &call->context();
  grpc::ByteBuffer* request = &call->request();
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* writer = &call->writer();
  switch (call->method()) {
    case kSetMethod:
      return RequestSetOverride(context, request, writer, cq, cq, call->tag());
    case kDeleteMethod:
      return RequestDeleteOverride(context, request, writer, cq, cq, call->tag());
    case kGetMethod:
      return RequestGetOverride(context, request, writer, cq, cq, call->tag());
    case kListMethod:
      return RequestListOverrides(context, request, writer, cq, cq, call->tag());
    case kAuditMethod:
      return RequestListOverrideAudit(context, request, writer, cq, cq, call->tag());
  }
}

void OverrideServiceImpl::OnCall(LoopCall* call, ServingLoop::Burst* /*burst*/) {
  switch (call->method()) {
    case kSetMethod:
      return ServeLoopParsed<v1::SetOverrideRequest, v1::SetOverrideResponse>(
          call, [this, call](auto* req, auto* resp) { return Set(call->context(), *req, resp); },
          &scheduler_);
    case kDeleteMethod:
      return ServeLoopParsed<v1::DeleteOverrideRequest, v1::DeleteOverrideResponse>(
          call, [this, call](auto* req, auto* resp) { return Delete(call->context(), *req, resp); },
          &scheduler_);
    case kGetMethod:
      return ServeLoopParsed<v1::GetOverrideRequest, v1::GetOverrideResponse>(
          call, [this, call](auto* req, auto* resp) { return Get(call->context(), *req, resp); },
          &scheduler_);
    case kListMethod:
      return ServeLoopParsed<v1::ListOverridesRequest, v1::ListOverridesResponse>(
          call, [this, call](auto* req, auto* resp) { return List(call->context(), *req, resp); },
          &scheduler_);
    case kAuditMethod:
      return ServeLoopParsed<v1::ListOverrideAuditRequest, v1::ListOverrideAuditResponse>(
          call, [this, call](auto* req, auto* resp) { return Audit(call->context(), *req, resp); },
          &scheduler_);
  }
}

absl::StatusOr<OverrideServiceImpl::Caller> OverrideServiceImpl::Admit(
    const grpc::ServerContext& context, Telemetry::Rpc& rpc, absl::string_view method) const {
  absl::StatusOr<std::string> admin =
      admin_.AuthorizeRpc(context, rpc, {"method", std::string(method)}, refused_log_);
  if (!admin.ok()) return admin.status();
  Caller caller{*std::move(admin), context.peer()};
  if (store_ == nullptr) {
    return absl::FailedPreconditionError(
        "this server's store keeps no overrides (the RocksDB and Redis stores do)");
  }
  return caller;
}

grpc::Status OverrideServiceImpl::StoreError(const absl::Status& error) {
  const absl::StatusCode code = error.code();
  if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument) {
    return ToGrpcStatus(error);
  }
  return ToGrpcStatus(StoreUnavailable(error));
}

OverridableLimits OverrideServiceImpl::Limits() const {
  return OverridableLimits(limits_.Current(), envoy_ != nullptr ? envoy_->Current() : nullptr);
}

void OverrideServiceImpl::RefreshNow() {
  if (refresher_ != nullptr) refresher_->Refresh().IgnoreError();
}

grpc::Status OverrideServiceImpl::Set(const grpc::ServerContext& context,
                                      const v1::SetOverrideRequest& request,
                                      v1::SetOverrideResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, "SetOverride",
                                           "ratelimit.v1.OverrideService/SetOverride", context);
  absl::StatusOr<Caller> caller = Admit(context, rpc, "SetOverride");
  if (!caller.ok()) return FinishRpc(rpc, ToGrpcStatus(caller.status()));
  const OverridableLimits limits = Limits();
  const int64_t now = clock_.NowMicros();
  absl::StatusOr<Override> made = OverrideFromProto(request, limits, now);
  if (!made.ok()) return FinishRpc(rpc, ToGrpcStatus(made.status()));
  made->set_by = SetBy(request.actor(), caller->authorized_by);
  made->set_at_us = now;
  absl::StatusOr<OverrideAuditEntry> written = store_->Modify(
      made->target,
      [&](const std::optional<Override>& current) -> absl::StatusOr<OverrideStore::Change> {
        OverrideStore::Change change;
        change.record = *made;
        // The limit its keys had until now: the target's override in force, else the
        // configured one.
        if (current && current->ActiveAt(now)) change.record.replaced = current->action;
        change.audit.at_us = now;
        change.audit.action = "set";
        change.audit.authorized_by = caller->authorized_by;
        change.audit.actor = request.actor();
        change.audit.peer = caller->peer;
        change.audit.reason = made->reason;
        if (current && !current->deleted_at_us) change.audit.before = current;
        change.audit.after = change.record;
        return change;
      });
  if (!written.ok()) return FinishRpc(rpc, StoreError(written.status()));
  RefreshNow();
  Log(LogLevel::kInfo, "override set",
      {{"target", TargetName(made->target)},
       {"set_by", made->set_by},
       {"peer", caller->peer},
       {"sequence", absl::StrCat(written->sequence)},
       {"reason", made->reason},
       {"trace_id", rpc.TraceId()}});
  OverrideToProto(*written->after, limits, now, response->mutable_override());
  if (written->before) {
    OverrideToProto(*written->before, limits, now, response->mutable_replaced());
  }
  return FinishRpc(rpc, grpc::Status::OK);
}

grpc::Status OverrideServiceImpl::Delete(const grpc::ServerContext& context,
                                         const v1::DeleteOverrideRequest& request,
                                         v1::DeleteOverrideResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, "DeleteOverride",
                                           "ratelimit.v1.OverrideService/DeleteOverride", context);
  absl::StatusOr<Caller> caller = Admit(context, rpc, "DeleteOverride");
  if (!caller.ok()) return FinishRpc(rpc, ToGrpcStatus(caller.status()));
  if (!request.has_target()) {
    return FinishRpc(rpc, ToGrpcStatus(absl::InvalidArgumentError("target: required")));
  }
  absl::StatusOr<OverrideTarget> target = TargetFromProto(request.target(), "target");
  absl::Status valid = target.status();
  if (valid.ok()) valid = ValidateText(request.actor(), kMaxOverrideActorBytes, "actor");
  if (valid.ok()) valid = ValidateText(request.reason(), kMaxOverrideReasonBytes, "reason");
  if (!valid.ok()) return FinishRpc(rpc, ToGrpcStatus(valid));
  const int64_t now = clock_.NowMicros();
  absl::StatusOr<OverrideAuditEntry> written = store_->Modify(
      *target,
      [&](const std::optional<Override>& current) -> absl::StatusOr<OverrideStore::Change> {
        if (!current || current->deleted_at_us) {
          return absl::NotFoundError(absl::StrCat("target: no override of ", TargetName(*target)));
        }
        OverrideStore::Change change;
        change.record = *current;  // kept as a tombstone: its keys' change back is exact
        change.record.deleted_at_us = now;
        change.audit.at_us = now;
        change.audit.action = "delete";
        change.audit.authorized_by = caller->authorized_by;
        change.audit.actor = request.actor();
        change.audit.peer = caller->peer;
        change.audit.reason = request.reason();
        change.audit.before = current;
        return change;
      });
  if (!written.ok()) return FinishRpc(rpc, StoreError(written.status()));
  RefreshNow();
  Log(LogLevel::kInfo, "override deleted",
      {{"target", TargetName(*target)},
       {"deleted_by", SetBy(request.actor(), caller->authorized_by)},
       {"peer", caller->peer},
       {"sequence", absl::StrCat(written->sequence)},
       {"reason", request.reason()},
       {"trace_id", rpc.TraceId()}});
  OverrideToProto(*written->before, Limits(), now, response->mutable_deleted());
  return FinishRpc(rpc, grpc::Status::OK);
}

grpc::Status OverrideServiceImpl::Get(const grpc::ServerContext& context,
                                      const v1::GetOverrideRequest& request,
                                      v1::GetOverrideResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, "GetOverride",
                                           "ratelimit.v1.OverrideService/GetOverride", context);
  absl::StatusOr<Caller> caller = Admit(context, rpc, "GetOverride");
  if (!caller.ok()) return FinishRpc(rpc, ToGrpcStatus(caller.status()));
  if (!request.has_target()) {
    return FinishRpc(rpc, ToGrpcStatus(absl::InvalidArgumentError("target: required")));
  }
  absl::StatusOr<OverrideTarget> target = TargetFromProto(request.target(), "target");
  if (!target.ok()) return FinishRpc(rpc, ToGrpcStatus(target.status()));
  absl::StatusOr<std::optional<Override>> got = store_->Get(*target);
  if (!got.ok()) return FinishRpc(rpc, StoreError(got.status()));
  if (!got->has_value() || (*got)->deleted_at_us) {
    return FinishRpc(rpc, ToGrpcStatus(absl::NotFoundError(
                              absl::StrCat("target: no override of ", TargetName(*target)))));
  }
  OverrideToProto(**got, Limits(), clock_.NowMicros(), response->mutable_override());
  return FinishRpc(rpc, grpc::Status::OK);
}

grpc::Status OverrideServiceImpl::List(const grpc::ServerContext& context,
                                       const v1::ListOverridesRequest& request,
                                       v1::ListOverridesResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(kService, "ListOverrides",
                                           "ratelimit.v1.OverrideService/ListOverrides", context);
  absl::StatusOr<Caller> caller = Admit(context, rpc, "ListOverrides");
  if (!caller.ok()) return FinishRpc(rpc, ToGrpcStatus(caller.status()));
  absl::Status valid =
      request.source() == v1::LIMITS_FILE || request.source() == v1::ENVOY
          ? absl::OkStatus()
          : absl::InvalidArgumentError("source: overrides are of LIMITS_FILE or ENVOY limits");
  if (valid.ok() && !request.name().empty()) valid = ValidateName(request.name(), "name");
  absl::StatusOr<size_t> page_size = PageSize(request.page_size(), "page_size");
  if (valid.ok()) valid = page_size.status();
  std::string start;
  if (valid.ok() && !request.page_token().empty()) {
    absl::StatusOr<std::string> s = OverridePageStart(request.page_token());
    valid = s.status();
    if (s.ok()) start = *std::move(s);
  }
  if (!valid.ok()) return FinishRpc(rpc, ToGrpcStatus(valid));
  absl::StatusOr<OverrideStore::Snapshot> all = store_->LoadAll();
  if (!all.ok()) return FinishRpc(rpc, StoreError(all.status()));
  const OverridableLimits limits = Limits();
  const int64_t now = clock_.NowMicros();
  const std::string prefix = ListPrefix(request.source(), request.name());
  const Override* last = nullptr;
  for (const Override& o : all->overrides) {  // in stored-key order
    if (o.deleted_at_us) continue;
    const std::string key = EncodeOverrideKey(o.target);
    if (key.rfind(prefix, 0) != 0 || (!start.empty() && key <= start)) continue;
    if (static_cast<size_t>(response->overrides_size()) == *page_size) {
      // More follow: the next page starts after the last one returned.
      response->set_next_page_token(OverridePageToken(last->target));
      break;
    }
    OverrideToProto(o, limits, now, response->add_overrides());
    last = &o;
  }
  return FinishRpc(rpc, grpc::Status::OK);
}

grpc::Status OverrideServiceImpl::Audit(const grpc::ServerContext& context,
                                        const v1::ListOverrideAuditRequest& request,
                                        v1::ListOverrideAuditResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(
      kService, "ListOverrideAudit", "ratelimit.v1.OverrideService/ListOverrideAudit", context);
  absl::StatusOr<Caller> caller = Admit(context, rpc, "ListOverrideAudit");
  if (!caller.ok()) return FinishRpc(rpc, ToGrpcStatus(caller.status()));
  absl::Status valid =
      request.name().empty() ? absl::OkStatus() : ValidateName(request.name(), "name");
  absl::StatusOr<size_t> page_size = PageSize(request.page_size(), "page_size");
  if (valid.ok()) valid = page_size.status();
  uint64_t before = 0;
  if (valid.ok() && !request.page_token().empty()) {
    absl::StatusOr<uint64_t> s = AuditPageStart(request.page_token());
    valid = s.status();
    if (s.ok()) before = *s;
  }
  if (!valid.ok()) return FinishRpc(rpc, ToGrpcStatus(valid));
  absl::StatusOr<std::vector<OverrideAuditEntry>> entries =
      store_->ListAudit(before, request.name(), *page_size + 1);
  if (!entries.ok()) return FinishRpc(rpc, StoreError(entries.status()));
  const OverridableLimits limits = Limits();
  const int64_t now = clock_.NowMicros();
  for (size_t i = 0; i < entries->size() && i < *page_size; ++i) {
    AuditEntryToProto((*entries)[i], limits, now, response->add_entries());
  }
  if (entries->size() > *page_size) {
    response->set_next_page_token(AuditPageToken((*entries)[*page_size - 1].sequence));
  }
  return FinishRpc(rpc, grpc::Status::OK);
}

}  // namespace ratelimit
