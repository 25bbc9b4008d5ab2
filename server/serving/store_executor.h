#ifndef RATELIMIT_SERVER_SERVING_STORE_EXECUTOR_H_
#define RATELIMIT_SERVER_SERVING_STORE_EXECUTOR_H_

// Where the RPC handlers run the store transactions that wait. The serving loop
// (serving_loop.h) runs handlers on one thread per CPU; a store that waits for a network round
// trip (Redis) would park that thread for the whole round trip, so the server would have only as
// many decisions in flight as it has serving threads, and the Redis client nothing to pipeline.
// With threads > 0 such a handler hands the call to one of this pool's threads and returns at
// once; the reply is sent from the pool thread. With 0 the work runs inline on the serving thread
// (the embedded stores: a RocksDB decision does not wait long enough to be worth a thread
// hand-off).

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace ratelimit {

// Thread safety: Run may be called from any thread. The destructor runs every task already
// queued, then joins the threads; no Run may race with it.
class StoreExecutor {
 public:
  // `threads` = 0 (or negative): Run runs the task inline.
  explicit StoreExecutor(int threads);
  ~StoreExecutor();
  StoreExecutor(const StoreExecutor&) = delete;
  StoreExecutor& operator=(const StoreExecutor&) = delete;

  void Run(absl::AnyInvocable<void() &&> task);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Work();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_STORE_EXECUTOR_H_
