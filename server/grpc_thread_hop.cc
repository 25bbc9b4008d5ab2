#include "server/grpc_thread_hop.h"

#include <utility>

#include "grpc/support/time.h"
#include "grpcpp/alarm.h"

namespace ratelimit {

namespace {

thread_local bool on_handler_thread = false;

// Runs `drain` on one of gRPC's threads: the callback of an alarm whose deadline has passed. gRPC
// runs such an alarm's callback at once on its executor threads. An alarm set for "now" would
// not: gRPC rounds a deadline up to the next whole millisecond and leaves it to its timer, so
// every drain (under light load, every reply) would wait up to a millisecond. The alarm owns
// itself and is deleted by its callback (gRPC keeps the alarm's state alive until the callback
// has returned).
void ScheduleOnGrpcThread(std::function<void()> drain) {
  auto* alarm = new grpc::Alarm();
  alarm->Set(gpr_inf_past(GPR_CLOCK_MONOTONIC), [alarm, drain = std::move(drain)](bool /*fired*/) {
    drain();
    delete alarm;
  });
}

}  // namespace

GrpcThreadHop& GrpcThreadHop::Default() {
  static GrpcThreadHop* const hop = new GrpcThreadHop(ScheduleOnGrpcThread);
  return *hop;
}

GrpcThreadHop::GrpcThreadHop(Scheduler schedule) : schedule_(std::move(schedule)) {}

bool GrpcThreadHop::OnHandlerThread() { return on_handler_thread; }

GrpcThreadHop::HandlerScope::HandlerScope() : outer_(on_handler_thread) {
  on_handler_thread = true;
}

GrpcThreadHop::HandlerScope::~HandlerScope() { on_handler_thread = outer_; }

void GrpcThreadHop::Post(Task task) {
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
    ++stats_.posted;
    if (drain_scheduled_) return;  // the scheduled or running drain will run it
    drain_scheduled_ = true;
    ++stats_.drains;
  }
  schedule_([this] { Drain(); });
}

void GrpcThreadHop::Drain() {
  HandlerScope scope;
  std::vector<Task> tasks;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      tasks.swap(queue_);
      if (tasks.empty()) {
        drain_scheduled_ = false;
        return;
      }
    }
    for (Task& task : tasks) std::move(task)();
    tasks.clear();
  }
}

GrpcThreadHop::Stats GrpcThreadHop::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ratelimit
