#include "server/observability/health.h"

#include "server/observability/log.h"

namespace ratelimit {

const char* ServingStateName(ServingState state) {
  switch (state) {
    case ServingState::kStarting:
      return "STARTING";
    case ServingState::kServing:
      return "SERVING";
    case ServingState::kDraining:
      return "DRAINING";
    case ServingState::kStoreFailing:
      return "STORE_FAILING";
  }
  return "UNKNOWN";
}

void HealthReporter::Attach(grpc::HealthCheckServiceInterface* service,
                            std::vector<std::string> services) {
  absl::MutexLock lock(&mu_);
  service_ = service;
  services_ = std::move(services);
  PublishLocked();
}

void HealthReporter::SetStarting() {
  absl::MutexLock lock(&mu_);
  if (state_ == ServingState::kDraining) return;
  lifecycle_serving_ = false;
  state_ = ServingState::kStarting;
  PublishLocked();
}

void HealthReporter::SetServing() {
  absl::MutexLock lock(&mu_);
  if (state_ == ServingState::kDraining) return;
  lifecycle_serving_ = true;
  state_ = store_healthy_ ? ServingState::kServing : ServingState::kStoreFailing;
  PublishLocked();
}

void HealthReporter::SetDraining() {
  absl::MutexLock lock(&mu_);
  state_ = ServingState::kDraining;
  PublishLocked();
}

void HealthReporter::SetStoreHealthy(bool healthy, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (store_healthy_ != healthy) {
    if (healthy) {
      Log(LogLevel::kInfo, "store healthy again");
    } else {
      Log(LogLevel::kError, "store failing: reporting NOT_SERVING",
          {{"error", std::string(reason)}});
    }
  }
  store_healthy_ = healthy;
  if (state_ == ServingState::kServing || state_ == ServingState::kStoreFailing) {
    state_ = healthy ? ServingState::kServing : ServingState::kStoreFailing;
    PublishLocked();
  }
}

ServingState HealthReporter::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

bool HealthReporter::AwaitState(ServingState state, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, state]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ == state; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

void HealthReporter::PublishLocked() {
  if (service_ == nullptr) return;
  const bool serving = state_ == ServingState::kServing;
  for (const std::string& s : services_) {
    if (s.empty()) {
      service_->SetServingStatus(serving);
    } else {
      service_->SetServingStatus(s, serving);
    }
  }
}

StoreProbe::StoreProbe(StateStore& store, HealthReporter& health, absl::Duration interval)
    : store_(store), health_(health), poller_(interval, [this] { ProbeOnce(); }) {}

StoreProbe::~StoreProbe() { Stop(); }

bool StoreProbe::ProbeOnce() {
  const absl::Status status = store_.Health();
  health_.SetStoreHealthy(status.ok(), status.message());
  return status.ok();
}

void StoreProbe::Start() { poller_.Start(); }

void StoreProbe::Stop() { poller_.Stop(); }

}  // namespace ratelimit
