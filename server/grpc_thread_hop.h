#ifndef RATELIMIT_SERVER_GRPC_THREAD_HOP_H_
#define RATELIMIT_SERVER_GRPC_THREAD_HOP_H_

// Finishing a gRPC call from a thread of our own (the RocksDB store's WAL writer when a write
// was in progress elsewhere, the Redis client's I/O thread) costs more than finishing it from one
// of gRPC's threads: each Finish queues a completion for gRPC's callback threads, and when those
// are idle every reply wakes one (a futex wake and two context switches per reply, measured under
// h2load with the server on one core). GrpcThreadHop moves such work onto a gRPC thread in groups:
// a task posted while no drain is scheduled or running schedules one (a gRPC alarm whose deadline
// has passed, run at once), and the drain, on a gRPC thread, runs tasks until the queue is empty,
// including those posted while it runs. So a store that completes a group of 200 decisions wakes
// gRPC once instead of 200 times, and under sustained load one drain carries group after group
// without a wake-up.
//
// Handlers mark their thread with HandlerScope; PendingUnary::Finish (parsed_unary.h) finishes
// inline on a marked thread and posts to the hop otherwise.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "storage/state_store.h"

namespace ratelimit {

// Thread safety: thread-safe.
class GrpcThreadHop {
 public:
  using Task = absl::AnyInvocable<void() &&>;
  // Runs `drain` soon on another thread (a gRPC thread, for the process's hop).
  using Scheduler = std::function<void(std::function<void()> drain)>;

  // The process's hop, scheduling drains with gRPC alarms. Never destroyed: a drain may still be
  // running at exit.
  static GrpcThreadHop& Default();

  // A hop whose drains `schedule` runs. The hop must outlive every drain it scheduled.
  explicit GrpcThreadHop(Scheduler schedule);
  GrpcThreadHop(const GrpcThreadHop&) = delete;
  GrpcThreadHop& operator=(const GrpcThreadHop&) = delete;

  // Runs `task` in a drain, after the tasks posted before it; the drain runs as a handler
  // (HandlerScope). Schedules a drain only when none is scheduled or running.
  void Post(Task task);

  // Whether the calling thread runs a handler (inside a HandlerScope), i.e. may finish calls
  // inline.
  static bool OnHandlerThread();

  // Marks the calling thread as running a handler for the scope's lifetime. Nests. A handler's
  // thread also writes a store's group itself when the store is idle (StateStore::
  // WritesHereScope), and then finishes its calls inline: no hand-off to a store's thread and
  // back.
  class HandlerScope {
   public:
    HandlerScope();
    ~HandlerScope();
    HandlerScope(const HandlerScope&) = delete;
    HandlerScope& operator=(const HandlerScope&) = delete;

   private:
    const bool outer_;
    StateStore::WritesHereScope writes_here_;
  };

  struct Stats {
    uint64_t posted = 0;  // tasks posted
    uint64_t drains = 0;  // drains scheduled
  };
  Stats stats() const;

 private:
  void Drain();

  const Scheduler schedule_;
  mutable absl::Mutex mu_;
  std::vector<Task> queue_ ABSL_GUARDED_BY(mu_);
  // A drain is scheduled or running; cleared by the drain when it finds the queue empty.
  bool drain_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_GRPC_THREAD_HOP_H_
