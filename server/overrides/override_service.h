#ifndef RATELIMIT_SERVER_OVERRIDES_OVERRIDE_SERVICE_H_
#define RATELIMIT_SERVER_OVERRIDES_OVERRIDE_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/admin/admin_auth.h"
#include "server/envoy/envoy_registry.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/overrides/overridable_limits.h"
#include "server/overrides/override_refresher.h"
#include "server/serving/decision_scheduler.h"
#include "server/serving/serving_loop.h"
#include "server/v1/limit_registry.h"
#include "storage/clock.h"
#include "storage/overrides/override_store.h"

namespace ratelimit {

// ratelimit.v1.OverrideService (docs/overrides.md), served by a ServingLoop like the v1 service:
// each method is parsed raw (a malformed body is INVALID_ARGUMENT), authorised exactly as Reset
// (the admin token or an admin certificate identity; refused calls are logged), converted
// (override_convert.h) and run where store calls may wait (DecisionScheduler::RunBlocking). A
// change is made by one OverrideStore::Modify (record and audit entry together), logged, and
// applied to this server's own index at once (OverrideRefresher::Refresh).
//
// Ownership: every dependency is borrowed and must outlive the service; `store` and `refresher`
// may be null (a store that keeps no overrides: every call is FAILED_PRECONDITION once
// authorised).
// Thread safety: thread-safe.
class OverrideServiceImpl final
    : public v1::OverrideService::WithRawMethod_SetOverride<
          v1::OverrideService::WithRawMethod_DeleteOverride<
              v1::OverrideService::WithRawMethod_GetOverride<
                  v1::OverrideService::WithRawMethod_ListOverrides<
                      v1::OverrideService::WithRawMethod_ListOverrideAudit<
                          v1::OverrideService::Service>>>>>,
      public ServingLoop::Handler {
 public:
  // The indexes of the methods (their order in the proto's service).
  static constexpr int kSetMethod = 0;
  static constexpr int kDeleteMethod = 1;
  static constexpr int kGetMethod = 2;
  static constexpr int kListMethod = 3;
  static constexpr int kAuditMethod = 4;
  static std::vector<int> Methods() {
    return {kSetMethod, kDeleteMethod, kGetMethod, kListMethod, kAuditMethod};
  }

  OverrideServiceImpl(DecisionScheduler& scheduler, const LimitRegistry& limits,
                      const AdminAuthenticator& admin, OverrideStore* store,
                      OverrideRefresher* refresher, const Clock& clock, const Telemetry& telemetry)
      : scheduler_(scheduler),
        limits_(limits),
        admin_(admin),
        store_(store),
        refresher_(refresher),
        clock_(clock),
        telemetry_(telemetry) {}

  // Overrides of Envoy rules are checked against `envoy`'s configuration (which must outlive the
  // service); without it they are NOT_FOUND. Call before serving.
  void set_envoy(const EnvoyConfigRegistry* envoy) { envoy_ = envoy; }

  // ServingLoop::Handler.
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override;
  void OnCall(LoopCall* call, ServingLoop::Burst* burst) override;

 private:
  // Who made an authorised call, for the audit and the log.
  struct Caller {
    std::string authorized_by;
    std::string peer;
  };
  // Authorises the call as Reset is (refusals logged), and checks that the store keeps
  // overrides.
  absl::StatusOr<Caller> Admit(const grpc::ServerContext& context, Telemetry::Rpc& rpc,
                               absl::string_view method) const;

  grpc::Status Set(const grpc::ServerContext& context, const v1::SetOverrideRequest& request,
                   v1::SetOverrideResponse* response);
  grpc::Status Delete(const grpc::ServerContext& context, const v1::DeleteOverrideRequest& request,
                      v1::DeleteOverrideResponse* response);
  grpc::Status Get(const grpc::ServerContext& context, const v1::GetOverrideRequest& request,
                   v1::GetOverrideResponse* response);
  grpc::Status List(const grpc::ServerContext& context, const v1::ListOverridesRequest& request,
                    v1::ListOverridesResponse* response);
  grpc::Status Audit(const grpc::ServerContext& context,
                     const v1::ListOverrideAuditRequest& request,
                     v1::ListOverrideAuditResponse* response);
  // A store error as the call's answer: NOT_FOUND and INVALID_ARGUMENT (the caller's) as they
  // are, anything else UNAVAILABLE.
  static grpc::Status StoreError(const absl::Status& error);
  // The limits overrides adjust, as configured now.
  OverridableLimits Limits() const;
  // Applies a change to this server's index at once (a failure is logged by the refresher; the
  // periodic refresh retries).
  void RefreshNow();

  DecisionScheduler& scheduler_;
  const LimitRegistry& limits_;
  const EnvoyConfigRegistry* envoy_ = nullptr;
  const AdminAuthenticator& admin_;
  OverrideStore* const store_;
  OverrideRefresher* const refresher_;
  const Clock& clock_;
  const Telemetry& telemetry_;
  mutable RepeatedLog refused_log_{LogLevel::kWarning, "override call refused"};
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OVERRIDES_OVERRIDE_SERVICE_H_
