#ifndef RATELIMIT_SERVER_ADMIN_HEALTH_SERVICE_H_
#define RATELIMIT_SERVER_ADMIN_HEALTH_SERVICE_H_

// grpc.health.v1.Health (Check and Watch) on the ServingLoop (serving_loop.h), in place of gRPC's
// default health service, which is served through the callback API: any callback service in the
// process polls the sockets from gRPC's own threads and costs the loop a wake-up per burst.
//
// The statuses are set through grpc::HealthCheckServiceInterface, as the default service's are
// (HealthReporter drives them): SetServingStatus per service name or for all (the server as a
// whole, the empty name, included), Shutdown makes
// every status NOT_SERVING for good and ends every Watch stream.
//
// Check: the status of a known service name; NOT_FOUND for a name that was never set. Watch: the
// current status at once (SERVICE_UNKNOWN for a name never set), then each change, until the
// client cancels or the service shuts down (the stream then ends with OK). A watcher that falls
// behind gets only the latest status, never a stale one.

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/serving/serving_loop.h"

namespace ratelimit {

// Thread safety: thread-safe.
class LoopHealthService final
    : public grpc::health::v1::Health::WithRawMethod_Check<
          grpc::health::v1::Health::WithAsyncMethod_Watch<grpc::health::v1::Health::Service>>,
      public grpc::HealthCheckServiceInterface,
      public ServingLoop::Handler,
      public ServingLoop::StreamService {
 public:
  static constexpr int kCheckMethod = 0;

  // The server as a whole (service name "") starts SERVING, as with gRPC's default service.
  LoopHealthService();
  ~LoopHealthService() override;

  // grpc::HealthCheckServiceInterface.
  void SetServingStatus(const std::string& service_name, bool serving) override;
  void SetServingStatus(bool serving) override;
  void Shutdown() override;
  // Blocks until every Watch stream has ended, or until `deadline`; returns whether they all
  // ended. After Shutdown and the server's shutdown: each open stream ends once NOT_SERVING is
  // written, and each still waiting for a client when the server cancels it.
  bool AwaitWatchesEnded(absl::Time deadline);

  // ServingLoop::Handler (Check).
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override;
  void OnCall(LoopCall* call, ServingLoop::Burst* burst) override;
  // ServingLoop::StreamService (Watch).
  void StartOn(grpc::ServerCompletionQueue* cq) override;

 private:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;
  class Watcher;
  friend class Watcher;

  // Requests the next Watch on `cq`.
  void RequestNextWatchLocked(grpc::ServerCompletionQueue* cq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A watcher (requested or arrived) was deleted.
  void WatcherDeleted();
  ServingStatus StatusLocked(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells every watcher that its status may have changed.
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  // Watchers alive: requested (waiting for a client) or arrived.
  int live_watchers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ADMIN_HEALTH_SERVICE_H_
