#ifndef RATELIMIT_SERVER_SERVING_SERVING_LOOP_H_
#define RATELIMIT_SERVER_SERVING_SERVING_LOOP_H_

// The server's serving threads: loops of our own over gRPC's completion-queue API, serving every
// method of the process.
//
// With gRPC's callback API each handler runs to its end before the next one starts, and nothing
// tells a handler whether more calls are already waiting: on one core every RocksDB decision led
// its own WAL write. A ServingLoop thread sees where a burst ends. It blocks for one event, then
// takes every event that is already there (a zero-deadline AsyncNext, which also reads whatever the
// sockets hold), handing each new call to its handler, and only then, when its queue is empty,
// tells the handlers that the burst is over (EndBurst): a handler then decides the burst's calls
// with one store call, one write, and answers them.
//
// Every service of the process must be served here: gRPC serves callback methods (its default
// health service is one) from threads of its own that poll the same sockets, and a burst one of
// them reads is then handed to a loop thread with a wake-up (measured: the loop fell from 84% to
// 60% of an empty handler's requests per second; docs/performance-log.md). Synchronous services
// (reflection) poll only their own queues and cost nothing here.
//
// Each thread runs its own completion queue with a few calls of each unary method requested ahead
// (AddUnary); gRPC hands a new call to any queue with one requested. Each thread is a
// handler thread (StateStore::WritesHereScope): a store it calls writes its WAL group there when
// no write is in progress, instead of waking the store's writer thread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/async_unary_call.h"
#include "storage/worker_thread.h"

namespace ratelimit {

class ServingLoop;

// What a completion-queue tag of a ServingLoop points to: one step of a call.
class LoopEvent {
 public:
  // Runs on the loop thread that owns `cq`; `ok` is the event's. The event may delete itself.
  virtual void OnEvent(bool ok, ServingLoop& loop, grpc::ServerCompletionQueue* cq) = 0;

 protected:
  ~LoopEvent() = default;
};

// One unary call served by a ServingLoop: the raw request and the means to answer it.
class LoopCall final : public LoopEvent {
 public:
  LoopCall(int handler, int method) : handler_(handler), method_(method) {}
  LoopCall(const LoopCall&) = delete;
  LoopCall& operator=(const LoopCall&) = delete;

  int method() const { return method_; }
  // The completion-queue tag of this call's events.
  void* tag() { return static_cast<LoopEvent*>(this); }
  grpc::ServerContext& context() { return context_; }
  grpc::ByteBuffer& request() { return request_; }
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>& writer() { return writer_; }

  // Sends `reply` with `status` (an error status sends no reply). From any thread, exactly once;
  // the loop deletes the call once gRPC is done with it, so it must not be used afterwards.
  void Finish(const grpc::ByteBuffer& reply, const grpc::Status& status);
  void FinishWithError(const grpc::Status& status);

  void OnEvent(bool ok, ServingLoop& loop, grpc::ServerCompletionQueue* cq) override;

 private:
  friend class ServingLoop;
  const int handler_;
  const int method_;
  // The index of the loop queue whose live calls count this one (-1: not counted).
  int queue_ = -1;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> writer_{&context_};
  // The next event is the end of the call's Finish. Set before Finish starts, read when its event
  // arrives: the completion queue orders the two.
  bool finishing_ = false;
};

// Work handed back to one loop thread by other threads: a store's I/O thread that got a call's
// answer posts the rest of the call (its reply, telemetry, finishing it) to the inbox of the loop
// thread that received it, so that the call is finished where it started. gRPC's work for a call
// finished on a foreign thread costs more than on the thread polling its queue, and memory freed
// on the thread that allocated it stays in that thread's cache. A post wakes the loop thread
// through an alarm on its queue, one per batch of posts: posts made before the thread takes them
// share it.
class LoopInbox final : public LoopEvent {
 public:
  explicit LoopInbox(grpc::ServerCompletionQueue* cq) : cq_(cq) {}
  LoopInbox(const LoopInbox&) = delete;
  LoopInbox& operator=(const LoopInbox&) = delete;

  // From any thread: runs `task` on the inbox's loop thread: at once when called there, else
  // later; once the loop is stopping (Close), on the calling thread before returning.
  void Post(absl::AnyInvocable<void() &&> task);
  // Tasks posted from other threads (run later on the loop thread) so far.
  uint64_t handoffs() const { return handoffs_.load(std::memory_order_relaxed); }
  // Later posts run on their posting thread. Called by the loop before its queue shuts down.
  void Close();

  void OnEvent(bool ok, ServingLoop& loop, grpc::ServerCompletionQueue* cq) override;

 private:
  grpc::ServerCompletionQueue* const cq_;
  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  // The alarm is set and has not fired yet (a set alarm may not be set again until it fires).
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Alarm alarm_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> handoffs_{0};
};

// Runs `task` on the loop thread of `inbox` (LoopInbox::Post), or at once when `inbox` is null (a
// caller that is not on a loop thread: ServingLoop::ThreadInbox() was null).
void RunOnLoopThread(LoopInbox* inbox, absl::AnyInvocable<void() &&> task);

// Thread safety: Add* before Start, Start and Stop from one thread; handlers are called on the
// loop's threads.
class ServingLoop {
 public:
  // What one loop thread keeps for one handler from a call to the burst's end.
  class Burst {
   public:
    virtual ~Burst() = default;
  };

  // Serves unary methods of one service.
  class Handler {
   public:
    virtual ~Handler() = default;
    // Requests the next call of `call->method()` on `cq`, with `call`'s context, request and
    // writer, and `call` as the tag (the generated Request<Method> of an async service).
    virtual void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) = 0;
    // The state a loop thread keeps for this handler; null: none (EndBurst is not called).
    virtual std::unique_ptr<Burst> NewBurst() { return nullptr; }
    // A call arrived. The handler finishes it now, later from any thread, or at EndBurst.
    // `burst` is this thread's (null when NewBurst gave none).
    virtual void OnCall(LoopCall* call, Burst* burst) = 0;
    // No event is waiting on this thread's queue (or the burst reached its bound): finish what
    // `burst` deferred.
    virtual void EndBurst(Burst& /*burst*/) {}
  };

  // Serves calls that are not unary (streams): requests its own calls with LoopEvent tags.
  class StreamService {
   public:
    virtual ~StreamService() = default;
    // Requests the first calls on `cq`, one of the loop's queues (once per queue, at Start).
    virtual void StartOn(grpc::ServerCompletionQueue* cq) = 0;
  };

  // Adds `threads` (at least 1) completion queues to `builder`. Call before the builder builds
  // the server, and the Add* calls before it too (the services must be registered). The threads
  // are named "rl-serving" and scheduled as `scheduling` says (storage/worker_thread.h).
  ServingLoop(int threads, grpc::ServerBuilder& builder,
              WorkerScheduling scheduling = WorkerScheduling::kDefault);
  // REQUIRES: Stop() was called, or Start() never was.
  ~ServingLoop();
  ServingLoop(const ServingLoop&) = delete;
  ServingLoop& operator=(const ServingLoop&) = delete;

  // Serves `methods` (indexes in the service) with `handler`, which must outlive the loop, with
  // `calls_ready` calls of each requested ahead on each queue. A call that finds none requested
  // waits in gRPC until the loop requests the next (at once, as each call arrives), so a few
  // suffice even under load; and each one costs every event of its queue, since Debian's libgrpc
  // is built with its assertions, which look a completed tag up among all those outstanding.
  void AddUnary(Handler& handler, std::vector<int> methods, int calls_ready);
  void AddStreams(StreamService& service);

  // Requests the first calls and starts the threads, returning once each is named and scheduled.
  // Call once the server has started.
  void Start();
  // Shuts `server` (the one the loop serves) down: it accepts no call from here on and sends every
  // connection a GOAWAY; the calls in flight may run until `deadline` and are cancelled then. As
  // soon as every call of the loop has ended and `streams_ended(deadline)` (which blocks until the
  // server's other calls, its streams, have ended or `deadline` has passed, and says whether they
  // all ended) returns true, every connection is closed, so that the server is shut down at once.
  // grpc::Server::Shutdown alone returns only once every connection has closed, and gRPC closes
  // an idle connection only when its client has answered the GOAWAY's ping, or 20 s later: a client
  // with no call in progress may not read its socket for seconds (gRPC's own clients poll an idle
  // channel every 5 s), so an idle connection held the shutdown for up to its whole grace.
  // Call once, after Start (or when Start was never called), and then Stop.
  void ShutdownServer(grpc::Server& server, absl::Time deadline,
                      absl::FunctionRef<bool(absl::Time)> streams_ended);
  // Shuts the queues down and joins the threads. Call after the server has shut down (no call is
  // left, none will be requested).
  void Stop();

  int threads() const { return static_cast<int>(cqs_.size()); }

  // The inbox of the loop thread calling (while it handles an event), or null on any other thread.
  static LoopInbox* ThreadInbox();
  // The burst the loop thread calling keeps for `handler` (its first AddUnary), for the events of
  // a stream that decide as its calls do; null on any other thread, or when the handler keeps none.
  Burst* ThreadBurst(const Handler& handler) const;
  // Tasks handed back to the loop threads from other threads so far (LoopInbox::handoffs).
  uint64_t handoffs() const;

  // How many events a burst takes at most before its end is forced.
  static constexpr int kMaxBurst = 256;

 private:
  friend class LoopCall;
  struct Unary {
    Handler* handler;
    std::vector<int> methods;
    int calls_ready;
  };
  // The unary calls of one queue that are requested (waiting for a client) or in progress. Only
  // the queue's thread changes it (and Start, before the thread runs); never 0 while the server
  // serves, since a call that arrives requests the next before it ends.
  struct alignas(64) LiveCalls {
    std::atomic<int64_t> count{0};
  };
  // Names and schedules the calling loop thread.
  void SetUpThread();
  void Run(grpc::ServerCompletionQueue* cq, LoopInbox* inbox);
  // Requests a call on `cq`, the loop's queue number `queue` (-1: the next of a call that the loop
  // did not request, not counted in the live calls).
  void RequestNew(int handler, int method, grpc::ServerCompletionQueue* cq, int queue);
  // Deletes `call`, which gRPC is done with, on its queue's thread.
  void EndCall(LoopCall* call);
  // Blocks until no unary call of the loop is left (after the server's shutdown began: the calls
  // in flight have ended and those still requested are cancelled), or until `deadline`.
  bool AwaitCallsEnded(absl::Time deadline);
  bool CallsEnded() const;
  // A new call of `handler`, on the calling loop thread.
  void Dispatch(LoopCall* call, int handler);

  const WorkerScheduling scheduling_;
  std::vector<Unary> unary_;
  std::vector<StreamService*> streams_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::unique_ptr<LiveCalls>> live_calls_;  // per queue
  // Taken by a thread whose queue's live calls reach 0, so that AwaitCallsEnded looks again.
  absl::Mutex calls_ended_mu_;
  std::vector<std::unique_ptr<LoopInbox>> inboxes_;  // one per queue, from Start
  std::vector<std::thread> threads_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_SERVING_LOOP_H_
