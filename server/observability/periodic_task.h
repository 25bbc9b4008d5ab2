#ifndef RATELIMIT_SERVER_OBSERVABILITY_PERIODIC_TASK_H_
#define RATELIMIT_SERVER_OBSERVABILITY_PERIODIC_TASK_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace ratelimit {

// Runs `task` on a thread of its own every `interval` (first run one interval after Start) until
// Stop. Used for the configuration watchers and the store health probe.
//
// Ownership: owns `task` and its thread; the destructor stops and joins it.
// Thread safety: Start and Stop from the owner's thread; `task` runs on the task's thread.
class PeriodicTask {
 public:
  PeriodicTask(absl::Duration interval, std::function<void()> task)
      : interval_(interval), task_(std::move(task)) {}
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;
  ~PeriodicTask() { Stop(); }

  // Starts the thread; no effect if running or once stopped.
  void Start() {
    if (thread_.joinable() || stop_.HasBeenNotified()) return;
    thread_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(interval_)) task_();
    });
  }

  // Wakes the thread and joins it (a run in progress finishes first). Idempotent.
  void Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  const absl::Duration interval_;
  const std::function<void()> task_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_PERIODIC_TASK_H_
