#include "server/admin/health_service.h"

#include <utility>

#include "grpc/support/time.h"
#include "server/serving/parsed_unary.h"

namespace ratelimit {

namespace hv1 = grpc::health::v1;

// One Watch stream. Its events (the call's arrival, a write's end, a status change, the call's
// end, the Finish's end) each have a tag of their own; every field below is guarded by the
// service's mutex. The watcher deletes itself once nothing of it is in flight and the call is
// over.
class LoopHealthService::Watcher {
 public:
  enum class Kind { kArrived, kWritten, kNotified, kDone, kFinished };

  Watcher(LoopHealthService* service, grpc::ServerCompletionQueue* cq)
      : service_(service),
        cq_(cq),
        arrived_(this, Kind::kArrived),
        written_(this, Kind::kWritten),
        notified_(this, Kind::kNotified),
        done_(this, Kind::kDone),
        finished_(this, Kind::kFinished) {
    context_.AsyncNotifyWhenDone(done_.tag());
    service_->RequestWatch(&context_, &request_, &writer_, cq_, cq_, arrived_.tag());
  }

  // A status may have changed: wakes the watcher on its loop thread. `service` is the watcher's.
  void NotifyLocked(const LoopHealthService& service) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service.mu_) {
    // Only watchers whose call arrived are in the service's set, hence notified.
    if (alarm_set_ || writing_ || call_done_ || finishing_) return;
    alarm_set_ = true;
    alarm_.Set(cq_, gpr_inf_past(GPR_CLOCK_MONOTONIC), notified_.tag());
  }

 private:
  class Event final : public LoopEvent {
   public:
    Event(Watcher* w, Kind kind) : w_(w), kind_(kind) {}
    void* tag() { return static_cast<LoopEvent*>(this); }
    void OnEvent(bool ok, ServingLoop& /*loop*/, grpc::ServerCompletionQueue* /*cq*/) override {
      w_->On(kind_, ok);
    }

   private:
    Watcher* const w_;
    const Kind kind_;
  };

  void On(Kind kind, bool ok) {
    if (kind == Kind::kArrived && !ok) {
      // The server shut down before a call came: nothing else of this watcher is in flight.
      LoopHealthService* service = service_;
      delete this;
      service->WatcherDeleted();
      return;
    }
    bool dead = false;
    {
      absl::MutexLock lock(&service_->mu_);
      switch (kind) {
        case Kind::kArrived:
          service_->RequestNextWatchLocked(cq_);
          service_->watchers_.insert(this);
          SendLocked();
          break;
        case Kind::kWritten:
          writing_ = false;
          if (ok) SendLocked();
          break;
        case Kind::kNotified:
          alarm_set_ = false;
          SendLocked();
          break;
        case Kind::kDone:
          call_done_ = true;
          break;
        case Kind::kFinished:
          finished_call_ = true;
          break;
      }
      dead = call_done_ && !writing_ && !alarm_set_ && (!finishing_ || finished_call_);
      if (dead) service_->watchers_.erase(this);
    }
    if (dead) {
      LoopHealthService* service = service_;
      delete this;
      service->WatcherDeleted();
    }
  }

  // Writes the current status unless it was the last one sent; after shutdown, ends the stream
  // once NOT_SERVING was sent.
  void SendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (writing_ || call_done_ || finishing_) return;
    const ServingStatus status = service_->StatusLocked(request_.service());
    if (!sent_any_ || status != last_sent_) {
      sent_any_ = true;
      last_sent_ = status;
      writing_ = true;
      response_.set_status(status);
      writer_.Write(response_, written_.tag());
      return;
    }
    if (service_->shut_down_) {
      finishing_ = true;
      writer_.Finish(grpc::Status::OK, finished_.tag());
    }
  }

  LoopHealthService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  hv1::HealthCheckRequest request_;
  hv1::HealthCheckResponse response_;
  grpc::ServerAsyncWriter<hv1::HealthCheckResponse> writer_{&context_};
  grpc::Alarm alarm_;
  Event arrived_, written_, notified_, done_, finished_;
  bool writing_ = false;
  bool alarm_set_ = false;
  bool call_done_ = false;
  bool finishing_ = false;
  bool finished_call_ = false;
  bool sent_any_ = false;
  ServingStatus last_sent_ = hv1::HealthCheckResponse::UNKNOWN;
};

LoopHealthService::LoopHealthService() { serving_[""] = true; }

LoopHealthService::~LoopHealthService() = default;

void LoopHealthService::SetServingStatus(const std::string& service_name, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  serving_[service_name] = serving;
  NotifyLocked();
}

void LoopHealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [name, s] : serving_) s = serving;
  NotifyLocked();
}

void LoopHealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [name, s] : serving_) s = false;
  shut_down_ = true;
  NotifyLocked();
}

LoopHealthService::ServingStatus LoopHealthService::StatusLocked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) {
    return shut_down_ ? hv1::HealthCheckResponse::NOT_SERVING
                      : hv1::HealthCheckResponse::SERVICE_UNKNOWN;
  }
  return it->second ? hv1::HealthCheckResponse::SERVING : hv1::HealthCheckResponse::NOT_SERVING;
}

void LoopHealthService::NotifyLocked() {
  for (Watcher* w : watchers_) w->NotifyLocked(*this);
}

void LoopHealthService::RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) {
  RequestCheck(&call->context(), &call->request(), &call->writer(), cq, cq, call->tag());
}

void LoopHealthService::OnCall(LoopCall* loop_call, ServingLoop::Burst* /*burst*/) {
  ParsedLoopCall<hv1::HealthCheckRequest, hv1::HealthCheckResponse> call(loop_call);
  if (!call.Parse()) return;
  absl::MutexLock lock(&mu_);
  if (!serving_.contains(call.request.service())) {
    call.Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                             "unknown service: \"" + call.request.service() + "\""));
    return;
  }
  call.response.set_status(StatusLocked(call.request.service()));
  call.Finish(grpc::Status::OK);
}

void LoopHealthService::StartOn(grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&mu_);
  RequestNextWatchLocked(cq);
}

void LoopHealthService::RequestNextWatchLocked(grpc::ServerCompletionQueue* cq) {
  ++live_watchers_;
  new Watcher(this, cq);  // owns itself
}

void LoopHealthService::WatcherDeleted() {
  absl::MutexLock lock(&mu_);
  --live_watchers_;
}

bool LoopHealthService::AwaitWatchesEnded(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_watchers_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&ended), deadline);
}

}  // namespace ratelimit
