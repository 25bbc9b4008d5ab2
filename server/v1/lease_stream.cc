#include "server/v1/lease_stream.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "grpc/support/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/serving/arena_blocks.h"
#include "server/serving/wire_diagnosis.h"
#include "server/v1/rate_limit_service.h"

namespace ratelimit {

// One LeaseStream call. Its events (the call's arrival, a read's end, a write's end, the Finish's
// end, the call's end) each have a tag of their own and run on the loop thread of `cq_`; the
// results of its ops come from wherever their decisions complete. Every field below the mutex is
// guarded by it. The stream deletes itself once nothing of it is in flight and the call is over.
class LeaseStreams::Stream {
 public:
  enum class Kind { kArrived, kRead, kWritten, kFinished, kDone };

  Stream(LeaseStreams* streams, grpc::ServerCompletionQueue* cq)
      : streams_(streams),
        cq_(cq),
        arrived_(this, Kind::kArrived),
        read_(this, Kind::kRead),
        written_(this, Kind::kWritten),
        finished_(this, Kind::kFinished),
        done_(this, Kind::kDone) {
    context_.AsyncNotifyWhenDone(done_.tag());
    streams_->service_.RequestLeaseStream(&context_, &stream_, cq_, cq_, arrived_.tag());
  }

  // Ends the stream with UNAVAILABLE once the ops it has read are answered (Shutdown).
  void ShutDown() {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    MaybeFinishLocked();
  }

  // Writes what the burst queued (FlushThisThread), on the stream's loop thread.
  void Flush() {
    bool dead = false;
    {
      absl::MutexLock lock(&mu_);
      flush_queued_ = false;
      StartWriteLocked();
      MaybeFinishLocked();
      dead = DeadLocked();
    }
    if (dead) Delete();
  }

 private:
  class Event final : public LoopEvent {
   public:
    Event(Stream* s, Kind kind) : s_(s), kind_(kind) {}
    void* tag() { return static_cast<LoopEvent*>(this); }
    void OnEvent(bool ok, ServingLoop& loop, grpc::ServerCompletionQueue* /*cq*/) override {
      s_->On(kind_, ok, loop);
    }

   private:
    Stream* const s_;
    const Kind kind_;
  };

  void On(Kind kind, bool ok, ServingLoop& loop) {
    if (kind == Kind::kArrived && !ok) {
      // The server shut down before a client came: nothing else of this stream is in flight.
      Delete();
      return;
    }
    if (kind == Kind::kArrived) {
      OnArrived();
      return;
    }
    if (kind == Kind::kRead && ok) {
      OnMessage(loop);
      return;
    }
    bool dead = false;
    {
      absl::MutexLock lock(&mu_);
      switch (kind) {
        case Kind::kArrived:  // OnArrived
          break;
        case Kind::kRead:  // not ok: the client half-closed, or the call is over
          reading_ = false;
          read_closed_ = true;
          break;
        case Kind::kWritten:
          writing_ = false;
          unanswered_ -= in_write_;
          in_write_ = 0;
          if (!ok) DropResultsLocked();  // the client is gone: nobody takes them
          StartWriteLocked();
          MaybeReadLocked();
          break;
        case Kind::kFinished:
          finished_call_ = true;
          break;
        case Kind::kDone:
          call_done_ = true;
          if (context_.IsCancelled()) DropResultsLocked();
          break;
      }
      MaybeFinishLocked();
      dead = DeadLocked();
    }
    if (dead) Delete();
  }

  // A client came: the next stream is requested, and this one read.
  void OnArrived() {
    bool shut_down = false;
    {
      // The service's lock is taken before a stream's, never inside it (Shutdown).
      absl::MutexLock streams_lock(&streams_->mu_);
      streams_->RequestNextLocked(cq_);
      streams_->open_.insert(this);
      shut_down = streams_->shut_down_;
    }
    absl::MutexLock lock(&mu_);
    inbox_ = ServingLoop::ThreadInbox();
    arrived_ok_ = true;
    if (shut_down) shutting_down_ = true;
    MaybeReadLocked();
    MaybeFinishLocked();
  }

  // A message was read: its ops are handed to the service (outside the lock: a decision may
  // complete, and deliver its result, before DecideStreamOp returns).
  void OnMessage(ServingLoop& loop) {
    google::protobuf::Arena arena(RecycledArenaOptions());
    auto* request = google::protobuf::Arena::CreateMessage<v1::LeaseStreamRequest>(&arena);
    std::optional<grpc::Status> refused;
    {
      grpc::ProtoBufferReader reader(&in_);
      if (!reader.status().ok() || !request->ParseFromZeroCopyStream(&reader)) {
        refused = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               UnparsableBodyMessage(*request->GetDescriptor(), in_));
      }
    }
    in_.Clear();
    if (!refused && request->ops().empty()) {
      refused =
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ops: at least one op is required");
    } else if (!refused && request->ops_size() > kMaxOpsPerMessage) {
      refused = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("ops: at most ", kMaxOpsPerMessage, " a message, got ",
                                          request->ops_size()));
    }
    bool decide = false;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (refused) {
        error_ = *std::move(refused);
        read_closed_ = true;
      } else if (!finishing_) {
        // (A stream that the shutdown finished while this read was in flight decides nothing
        // more: no answer could reach its client.)
        decide = true;
        undecided_ += request->ops_size();
        unanswered_ += request->ops_size();
      }
    }
    if (decide) {
      ServingLoop::Burst* burst = loop.ThreadBurst(streams_->service_);
      for (const v1::LeaseOp& op : request->ops()) {
        streams_->service_.DecideStreamOp(op, context_, burst, [this](v1::LeaseOpResult&& result) {
          Deliver(std::move(result));
        });
      }
    }
    bool dead = false;
    {
      absl::MutexLock lock(&mu_);
      MaybeReadLocked();
      MaybeFinishLocked();
      dead = DeadLocked();
    }
    if (dead) Delete();
  }

  // An op's result, from any thread: handed to the stream's loop thread (at once when called
  // there), where it waits for the burst's flush.
  void Deliver(v1::LeaseOpResult&& result) {
    if (inbox_ != nullptr && ServingLoop::ThreadInbox() != inbox_) {
      RunOnLoopThread(
          inbox_, [this, result = std::move(result)]() mutable { DeliverHere(std::move(result)); });
      return;
    }
    DeliverHere(std::move(result));
  }

  void DeliverHere(v1::LeaseOpResult&& result) {
    bool dead = false;
    {
      absl::MutexLock lock(&mu_);
      --undecided_;
      if (results_dropped_) {
        --unanswered_;
      } else {
        *pending_.add_results() = std::move(result);
      }
      if (inbox_ != nullptr && ServingLoop::ThreadInbox() == inbox_) {
        if (!flush_queued_ && !writing_ && pending_.results_size() > 0) {
          flush_queued_ = true;
          ThreadFlushList().push_back(this);
        }
      } else {
        StartWriteLocked();  // the loop has stopped: no burst will flush it
      }
      MaybeFinishLocked();
      dead = DeadLocked();
    }
    if (dead) Delete();
  }

  void MaybeReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!arrived_ok_ || reading_ || read_closed_ || shutting_down_ || finishing_ || call_done_ ||
        unanswered_ >= kMaxUnanswered) {
      return;
    }
    reading_ = true;
    stream_.Read(&in_, read_.tag());
  }

  void StartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || pending_.results_size() == 0) return;
    bool own_buffer = false;
    out_.Clear();
    // Serializing a message held in memory fails only past 2 GiB; a response stays far below.
    (void)grpc::SerializationTraits<v1::LeaseStreamResponse>::Serialize(pending_, &out_,
                                                                        &own_buffer);
    in_write_ = pending_.results_size();
    pending_.Clear();
    writing_ = true;
    stream_.Write(out_, written_.tag());
  }

  // Results nobody will take (the client is gone) are dropped, and so are those still to come.
  void DropResultsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    results_dropped_ = true;
    unanswered_ -= pending_.results_size();
    pending_.Clear();
  }

  // Ends the call once its reading is over (or the server shuts down), every op read is decided
  // and every result written: with the stream's error, UNAVAILABLE on shutdown, or OK.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!arrived_ok_ || finishing_ || (!read_closed_ && !shutting_down_) || undecided_ > 0 ||
        writing_ || flush_queued_ || pending_.results_size() > 0) {
      return;
    }
    finishing_ = true;
    grpc::Status status = grpc::Status::OK;
    if (error_) {
      status = *error_;
    } else if (shutting_down_ && !read_closed_) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
    }
    stream_.Finish(status, finished_.tag());
  }

  bool DeadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_call_ && call_done_ && !reading_ && !writing_ && !flush_queued_ &&
           undecided_ == 0;
  }

  void Delete() {
    LeaseStreams* streams = streams_;
    streams->StreamDeleted(this);
    delete this;
  }

  LeaseStreams* const streams_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_{&context_};
  Event arrived_, read_, written_, finished_, done_;
  // The message being read; only the loop thread touches it, between a Read and its event.
  grpc::ByteBuffer in_;
  // The stream's loop thread's inbox, set on arrival (on that thread).
  LoopInbox* inbox_ = nullptr;
  // The stream's error, set on the loop thread by the read that found it.
  std::optional<grpc::Status> error_;

  absl::Mutex mu_;
  bool arrived_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_call_ ABSL_GUARDED_BY(mu_) = false;
  bool call_done_ ABSL_GUARDED_BY(mu_) = false;
  bool results_dropped_ ABSL_GUARDED_BY(mu_) = false;
  // Ops handed to the service whose result has not come back.
  int64_t undecided_ ABSL_GUARDED_BY(mu_) = 0;
  // Ops read whose result is not written yet (nor dropped).
  int64_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;
  // Results waiting for the next write, and those of the write in flight.
  v1::LeaseStreamResponse pending_ ABSL_GUARDED_BY(mu_);
  int64_t in_write_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ByteBuffer out_ ABSL_GUARDED_BY(mu_);
};

void LeaseStreams::StartOn(grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&mu_);
  RequestNextLocked(cq);
}

void LeaseStreams::RequestNextLocked(grpc::ServerCompletionQueue* cq) {
  ++live_;
  new Stream(this, cq);  // owns itself
}

void LeaseStreams::StreamDeleted(Stream* stream) {
  absl::MutexLock lock(&mu_);
  open_.erase(stream);
  --live_;
}

void LeaseStreams::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (Stream* s : open_) s->ShutDown();
}

bool LeaseStreams::AwaitStreamsEnded(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&ended), deadline);
}

int64_t LeaseStreams::open_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(open_.size());
}

std::vector<LeaseStreams::Stream*>& LeaseStreams::ThreadFlushList() {
  thread_local std::vector<Stream*> list;
  return list;
}

void LeaseStreams::FlushThisThread() {
  if (ServingLoop::ThreadInbox() == nullptr) return;
  std::vector<Stream*>& list = ThreadFlushList();
  if (list.empty()) return;
  // Swapped out before flushing, so that the list is never walked while it changes.
  std::vector<Stream*> streams;
  streams.swap(list);
  for (Stream* s : streams) s->Flush();
}

}  // namespace ratelimit
