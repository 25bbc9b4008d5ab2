#include "server/serving/store_executor.h"

#include <utility>

#include "storage/worker_thread.h"

namespace ratelimit {

StoreExecutor::StoreExecutor(int threads) {
  threads_.reserve(threads > 0 ? threads : 0);
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      NameWorkerThread("rl-store");
      Work();
    });
  }
}

StoreExecutor::~StoreExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void StoreExecutor::Run(absl::AnyInvocable<void() &&> task) {
  if (threads_.empty()) {
    std::move(task)();
    return;
  }
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

bool StoreExecutor::HasWorkOrStopping() const { return stopping_ || !queue_.empty(); }

void StoreExecutor::Work() {
  for (;;) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &StoreExecutor::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace ratelimit
