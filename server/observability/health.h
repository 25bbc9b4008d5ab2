#ifndef RATELIMIT_SERVER_OBSERVABILITY_HEALTH_H_
#define RATELIMIT_SERVER_OBSERVABILITY_HEALTH_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/observability/periodic_task.h"
#include "storage/state_store.h"

namespace ratelimit {

enum class ServingState { kStarting, kServing, kDraining, kStoreFailing };

const char* ServingStateName(ServingState state);

// The server's health, mirrored into gRPC's grpc.health.v1 service (SERVING only in kServing)
// and read by the HTTP /healthz endpoint. Starting and draining are set by the server's
// lifecycle; store failures by the StoreProbe. Draining is final.
//
// Thread safety: thread-safe.
class HealthReporter {
 public:
  HealthReporter() = default;

  // Mirrors every later change into `service` for `services` ("" is the whole server). Not owned.
  void Attach(grpc::HealthCheckServiceInterface* service, std::vector<std::string> services);

  void SetStarting();
  void SetServing();  // no effect once draining
  void SetDraining();
  // The probe's verdict on the store: failing turns kServing into kStoreFailing, healthy turns
  // it back. `reason` (the store's error) is logged when the store starts failing.
  void SetStoreHealthy(bool healthy, absl::string_view reason = "");

  ServingState state() const;
  // Blocks until the state is `state`; false when it is not within `timeout`. For tests and
  // tools that must act on a change made by another thread.
  bool AwaitState(ServingState state, absl::Duration timeout) const;

 private:
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  ServingState state_ ABSL_GUARDED_BY(mu_) = ServingState::kStarting;
  bool store_healthy_ ABSL_GUARDED_BY(mu_) = true;
  bool lifecycle_serving_ ABSL_GUARDED_BY(mu_) = false;
  grpc::HealthCheckServiceInterface* service_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::string> services_ ABSL_GUARDED_BY(mu_);
};

// Asks the store for its health (StateStore::Health: a probe write, and recovery when it is
// failing) every `interval` and reports the verdict.
//
// Ownership: owns its polling thread (the destructor stops it); the store and the reporter are
// not owned. Thread safety: ProbeOnce/Start/Stop from the owner's thread; the probes run on the
// probe's own thread.
class StoreProbe {
 public:
  // Neither argument is owned; both must outlive the probe.
  StoreProbe(StateStore& store, HealthReporter& health, absl::Duration interval);
  ~StoreProbe();  // stops

  // Probes once now (returns the verdict), then starts the background loop.
  bool ProbeOnce();
  void Start();
  void Stop();

 private:
  StateStore& store_;
  HealthReporter& health_;
  PeriodicTask poller_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_HEALTH_H_
