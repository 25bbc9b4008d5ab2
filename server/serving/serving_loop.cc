#include "server/serving/serving_loop.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "grpc/grpc.h"
#include "grpc/support/time.h"
#include "server/observability/log.h"
#include "storage/limit_config.h"
#include "storage/state_store.h"

namespace ratelimit {

namespace {
// The loop thread's bursts, for Dispatch.
thread_local std::vector<std::unique_ptr<ServingLoop::Burst>>* thread_bursts = nullptr;
// The loop thread's inbox, for ThreadInbox.
thread_local LoopInbox* thread_inbox = nullptr;
}  // namespace

void LoopCall::Finish(const grpc::ByteBuffer& reply, const grpc::Status& status) {
  finishing_ = true;
  if (status.ok()) {
    writer_.Finish(reply, status, tag());
  } else {
    writer_.FinishWithError(status, tag());
  }
}

void LoopCall::FinishWithError(const grpc::Status& status) {
  finishing_ = true;
  writer_.FinishWithError(status, tag());
}

void LoopCall::OnEvent(bool ok, ServingLoop& loop, grpc::ServerCompletionQueue* cq) {
  if (finishing_ || !ok) {
    // A finished call (its reply sent or not: the client may have gone), or a requested call
    // that the server's shutdown cancelled.
    loop.EndCall(this);
    return;
  }
  loop.RequestNew(handler_, method_, cq, queue_);
  // The transport may take larger messages than a unary call (an RLQS report, server.cc); the
  // refusal reads as the transport's own.
  if (const size_t bytes = request_.Length(); bytes > kMaxRequestBytes) {
    FinishWithError(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("Received message larger than max (", bytes, " vs. ", kMaxRequestBytes, ")")));
    return;
  }
  loop.Dispatch(this, handler_);
}

void LoopInbox::Post(absl::AnyInvocable<void() &&> task) {
  if (thread_inbox == this) {
    std::move(task)();
    return;
  }
  {
    absl::MutexLock l(&mu_);
    if (!closed_) {
      tasks_.push_back(std::move(task));
      handoffs_.fetch_add(1, std::memory_order_relaxed);
      if (!armed_) {
        armed_ = true;
        // A deadline in the past: the alarm's event is queued at once.
        alarm_.Set(cq_, gpr_inf_past(GPR_CLOCK_MONOTONIC), static_cast<LoopEvent*>(this));
      }
      return;
    }
  }
  std::move(task)();
}

void LoopInbox::Close() {
  absl::MutexLock l(&mu_);
  closed_ = true;
}

void LoopInbox::OnEvent(bool /*ok*/, ServingLoop& /*loop*/, grpc::ServerCompletionQueue* /*cq*/) {
  std::vector<absl::AnyInvocable<void() &&>> tasks;
  {
    absl::MutexLock l(&mu_);
    armed_ = false;
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) std::move(task)();
}

void RunOnLoopThread(LoopInbox* inbox, absl::AnyInvocable<void() &&> task) {
  if (inbox == nullptr) {
    std::move(task)();
  } else {
    inbox->Post(std::move(task));
  }
}

ServingLoop::ServingLoop(int threads, grpc::ServerBuilder& builder, WorkerScheduling scheduling)
    : scheduling_(scheduling) {
  for (int i = 0; i < std::max(threads, 1); ++i) {
    cqs_.push_back(builder.AddCompletionQueue());
    live_calls_.push_back(std::make_unique<LiveCalls>());
  }
}

ServingLoop::~ServingLoop() {
  if (started_ && !stopped_) Stop();
}

void ServingLoop::AddUnary(Handler& handler, std::vector<int> methods, int calls_ready) {
  unary_.push_back(Unary{&handler, std::move(methods), std::max(calls_ready, 1)});
}

void ServingLoop::AddStreams(StreamService& service) { streams_.push_back(&service); }

void ServingLoop::Start() {
  started_ = true;
  for (size_t q = 0; q < cqs_.size(); ++q) {
    for (size_t h = 0; h < unary_.size(); ++h) {
      for (int method : unary_[h].methods) {
        for (int i = 0; i < unary_[h].calls_ready; ++i) {
          RequestNew(static_cast<int>(h), method, cqs_[q].get(), static_cast<int>(q));
        }
      }
    }
    for (StreamService* s : streams_) s->StartOn(cqs_[q].get());
  }
  absl::BlockingCounter set_up(static_cast<int>(cqs_.size()));
  for (auto& cq : cqs_) {
    inboxes_.push_back(std::make_unique<LoopInbox>(cq.get()));
    threads_.emplace_back([this, cq = cq.get(), inbox = inboxes_.back().get(), &set_up] {
      SetUpThread();
      set_up.DecrementCount();
      Run(cq, inbox);
    });
  }
  set_up.Wait();
}

void ServingLoop::SetUpThread() {
  if (absl::Status st = SetUpWorkerThread("rl-serving", scheduling_); !st.ok()) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      Log(LogLevel::kWarning, "serving threads keep the default scheduling policy",
          {{"error", std::string(st.message())}});
    }
  }
}

void ServingLoop::ShutdownServer(grpc::Server& server, absl::Time deadline,
                                 absl::FunctionRef<bool(absl::Time)> streams_ended) {
  // From here on gRPC accepts no call and cancels the calls requested. Its notice that the
  // shutdown is complete comes on a queue of its own, as grpc::Server::Shutdown's does.
  grpc_completion_queue* notice = grpc_completion_queue_create_for_next(nullptr);
  grpc_server_shutdown_and_notify(server.c_server(), notice, nullptr);
  // Nothing is in flight: the connections left are idle, and closing them loses nothing.
  if (AwaitCallsEnded(deadline) && streams_ended(deadline)) {
    grpc_server_cancel_all_calls(server.c_server());
  }
  server.Shutdown(absl::ToChronoTime(deadline));
  grpc_completion_queue_shutdown(notice);
  while (grpc_completion_queue_next(notice, gpr_inf_future(GPR_CLOCK_MONOTONIC), nullptr).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(notice);
}

void ServingLoop::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // No alarm may be set on a queue that is shut down: later posts run where they are made.
  for (auto& inbox : inboxes_) inbox->Close();
  for (auto& cq : cqs_) cq->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (!started_) {
    // A queue must be drained after its shutdown before it is destroyed (nothing was requested).
    for (auto& cq : cqs_) {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) {
      }
    }
  }
}

void ServingLoop::RequestNew(int handler, int method, grpc::ServerCompletionQueue* cq, int queue) {
  auto* call = new LoopCall(handler, method);
  if (queue >= 0) {
    call->queue_ = queue;
    live_calls_[static_cast<size_t>(queue)]->count.fetch_add(1, std::memory_order_relaxed);
  }
  unary_[static_cast<size_t>(handler)].handler->RequestCall(call, cq);
}

void ServingLoop::EndCall(LoopCall* call) {
  const int queue = call->queue_;
  delete call;
  if (queue < 0) return;
  if (live_calls_[static_cast<size_t>(queue)]->count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    absl::MutexLock lock(&calls_ended_mu_);  // its release wakes AwaitCallsEnded
  }
}

bool ServingLoop::AwaitCallsEnded(absl::Time deadline) {
  absl::MutexLock lock(&calls_ended_mu_);
  return calls_ended_mu_.AwaitWithDeadline(absl::Condition(this, &ServingLoop::CallsEnded),
                                           deadline);
}

bool ServingLoop::CallsEnded() const {
  for (const auto& live : live_calls_) {
    if (live->count.load(std::memory_order_acquire) != 0) return false;
  }
  return true;
}

void ServingLoop::Dispatch(LoopCall* call, int handler) {
  Burst* burst = (*thread_bursts)[static_cast<size_t>(handler)].get();
  unary_[static_cast<size_t>(handler)].handler->OnCall(call, burst);
}

LoopInbox* ServingLoop::ThreadInbox() { return thread_inbox; }

ServingLoop::Burst* ServingLoop::ThreadBurst(const Handler& handler) const {
  if (thread_bursts == nullptr) return nullptr;
  for (size_t h = 0; h < unary_.size(); ++h) {
    if (unary_[h].handler == &handler) return (*thread_bursts)[h].get();
  }
  return nullptr;
}

uint64_t ServingLoop::handoffs() const {
  uint64_t total = 0;
  for (const auto& inbox : inboxes_) total += inbox->handoffs();
  return total;
}

void ServingLoop::Run(grpc::ServerCompletionQueue* cq, LoopInbox* inbox) {
  // Calls are handled here: a store writes its group on this thread when it is idle.
  StateStore::WritesHereScope writes_here;
  std::vector<std::unique_ptr<Burst>> bursts;
  for (const Unary& u : unary_) bursts.push_back(u.handler->NewBurst());
  thread_bursts = &bursts;
  thread_inbox = inbox;
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    static_cast<LoopEvent*>(tag)->OnEvent(ok, *this, cq);
    for (int taken = 1; taken < kMaxBurst; ++taken) {
      const grpc::CompletionQueue::NextStatus next =
          cq->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
      if (next != grpc::CompletionQueue::GOT_EVENT) break;
      static_cast<LoopEvent*>(tag)->OnEvent(ok, *this, cq);
    }
    for (size_t h = 0; h < bursts.size(); ++h) {
      if (bursts[h]) unary_[h].handler->EndBurst(*bursts[h]);
    }
  }
  thread_bursts = nullptr;
  thread_inbox = nullptr;
}

}  // namespace ratelimit
