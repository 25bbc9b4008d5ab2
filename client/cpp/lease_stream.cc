#include "client/cpp/lease_stream.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ratelimit {
namespace {

// A message's bounds: the server's (1000 ops, 64 KiB), with room for the message's own framing.
constexpr size_t kMaxOpsPerMessage = 1000;
constexpr size_t kMaxMessageBytes = 60 * 1024;

using StreamRequest = v1::LeaseStreamRequest;
using StreamResponse = v1::LeaseStreamResponse;

// An op's result as its call's answer: the answer, or the error its call would end with.
template <typename Response>
absl::StatusOr<Response> AnswerOf(const absl::StatusOr<v1::LeaseOpResult>& result,
                                  const Response& (v1::LeaseOpResult::*answer)() const) {
  if (!result.ok()) return result.status();
  if (result->code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(result->code()), result->message());
  }
  return ((*result).*answer)();
}

}  // namespace

// One op waiting for its result.
struct LeaseStreamClient::Waiter {
  bool done = false;
  // Set when the stream ended before the op's result came (the status is the stream's).
  bool stream_ended = false;
  absl::StatusOr<v1::LeaseOpResult> result;
};

// One LeaseStream call and the ops in flight on it.
struct LeaseStreamClient::Stream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<StreamRequest, StreamResponse>> rw;
  absl::Mutex mu;
  absl::flat_hash_map<uint64_t, Waiter*> waiters ABSL_GUARDED_BY(mu);
  std::vector<v1::LeaseOp> queue ABSL_GUARDED_BY(mu);
  bool writing ABSL_GUARDED_BY(mu) = false;  // a thread is writing the queue
  bool ended ABSL_GUARDED_BY(mu) = false;

  bool NotWriting() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !writing; }
};

LeaseStreamClient::LeaseStreamClient(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : unary_(channel, options),
      stub_(v1::RateLimitService::NewStub(channel)),
      options_(std::move(options)) {}

LeaseStreamClient::~LeaseStreamClient() {
  std::shared_ptr<Stream> stream;
  std::vector<std::thread> readers;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    stream = std::move(stream_);
    readers = std::move(readers_);
  }
  // No op is in progress: cancelling the stream loses nothing, and never waits for the server.
  if (stream) stream->context.TryCancel();
  for (std::thread& t : readers) t.join();
}

absl::StatusOr<v1::AcquireResponse> LeaseStreamClient::Acquire(const v1::AcquireRequest& request) {
  if (!unary_fallback()) {
    v1::LeaseOp op;
    *op.mutable_acquire() = request;
    absl::StatusOr<v1::LeaseOpResult> result = Send(std::move(op));
    if (!unary_fallback()) return AnswerOf(result, &v1::LeaseOpResult::acquire);
  }
  return unary_.Acquire(request);
}

absl::StatusOr<v1::ReleaseResponse> LeaseStreamClient::Release(const v1::ReleaseRequest& request) {
  if (!unary_fallback()) {
    v1::LeaseOp op;
    *op.mutable_release() = request;
    absl::StatusOr<v1::LeaseOpResult> result = Send(std::move(op));
    if (!unary_fallback()) return AnswerOf(result, &v1::LeaseOpResult::release);
  }
  return unary_.Release(request);
}

absl::StatusOr<v1::ExtendResponse> LeaseStreamClient::Extend(const v1::ExtendRequest& request) {
  if (!unary_fallback()) {
    v1::LeaseOp op;
    *op.mutable_extend() = request;
    absl::StatusOr<v1::LeaseOpResult> result = Send(std::move(op));
    if (!unary_fallback()) return AnswerOf(result, &v1::LeaseOpResult::extend);
  }
  return unary_.Extend(request);
}

int64_t LeaseStreamClient::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

bool LeaseStreamClient::unary_fallback() const {
  absl::MutexLock lock(&mu_);
  return unary_fallback_;
}

absl::StatusOr<v1::LeaseOpResult> LeaseStreamClient::Send(v1::LeaseOp op) {
  std::shared_ptr<Stream> stream;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("lease stream client closing");
    id = ++next_id_;
    stream = CurrentStream();
  }
  op.set_id(id);
  Waiter waiter;
  bool write = false;
  {
    absl::MutexLock lock(&stream->mu);
    if (stream->ended) return absl::UnavailableError("lease stream ended");
    stream->waiters[id] = &waiter;
    stream->queue.push_back(std::move(op));
    write = !stream->writing;
    stream->writing = true;
  }
  if (write) WriteQueued(stream);
  bool fall_back = false;
  {
    absl::MutexLock lock(&stream->mu);
    const absl::Time deadline = absl::Now() + options_.timeout;
    if (!stream->mu.AwaitWithDeadline(absl::Condition(&waiter.done), deadline)) {
      stream->waiters.erase(id);  // a result that comes later is dropped
      return absl::DeadlineExceededError(
          absl::StrCat("lease op timed out after ", absl::FormatDuration(options_.timeout)));
    }
    fall_back = waiter.stream_ended && !waiter.result.ok() &&
                waiter.result.status().code() == absl::StatusCode::kUnimplemented;
  }
  if (fall_back) {
    // The op was never decided: the caller sends it as a call.
    absl::MutexLock lock(&mu_);
    unary_fallback_ = true;
  }
  return std::move(waiter.result);
}

std::shared_ptr<LeaseStreamClient::Stream> LeaseStreamClient::CurrentStream() {
  if (stream_) {
    absl::MutexLock lock(&stream_->mu);
    if (!stream_->ended) return stream_;
  }
  // The readers of streams that ended are done, or about to be (they take no lock of ours).
  for (std::thread& t : readers_) t.join();
  readers_.clear();
  stream_ = std::make_shared<Stream>();
  stream_->rw = stub_->LeaseStream(&stream_->context);
  ++streams_opened_;
  readers_.emplace_back([this, stream = stream_] { ReadLoop(stream); });
  return stream_;
}

void LeaseStreamClient::WriteQueued(const std::shared_ptr<Stream>& stream) {
  while (true) {
    StreamRequest request;
    {
      absl::MutexLock lock(&stream->mu);
      if (stream->queue.empty() || stream->ended) {
        stream->queue.clear();  // an ended stream's waiters are failed by its reader
        stream->writing = false;
        return;
      }
      size_t taken = 0;
      size_t bytes = 0;
      for (; taken < stream->queue.size() && taken < kMaxOpsPerMessage; ++taken) {
        const size_t op_bytes = stream->queue[taken].ByteSizeLong() + 8;
        if (taken > 0 && bytes + op_bytes > kMaxMessageBytes) break;
        bytes += op_bytes;
      }
      for (size_t i = 0; i < taken; ++i) *request.add_ops() = std::move(stream->queue[i]);
      stream->queue.erase(stream->queue.begin(), stream->queue.begin() + taken);
    }
    if (!stream->rw->Write(request)) {
      // The stream is over; its reader sees the end and fails every waiter.
      absl::MutexLock lock(&stream->mu);
      stream->queue.clear();
      stream->writing = false;
      return;
    }
  }
}

void LeaseStreamClient::ReadLoop(std::shared_ptr<Stream> stream) {
  StreamResponse response;
  while (stream->rw->Read(&response)) {
    absl::MutexLock lock(&stream->mu);
    for (v1::LeaseOpResult& result : *response.mutable_results()) {
      auto it = stream->waiters.find(result.id());
      if (it == stream->waiters.end()) continue;  // its op timed out
      it->second->result = std::move(result);
      it->second->done = true;
      stream->waiters.erase(it);
    }
  }
  {
    // Finish may not run while a write does: the writer stops once the call is over.
    absl::MutexLock lock(&stream->mu);
    stream->ended = true;
    stream->mu.Await(absl::Condition(stream.get(), &Stream::NotWriting));
  }
  const grpc::Status status = stream->rw->Finish();
  const absl::Status ended =
      status.error_code() == grpc::StatusCode::UNIMPLEMENTED
          ? absl::UnimplementedError(status.error_message())
          : absl::UnavailableError(absl::StrCat(
                "lease stream ended: ", status.ok() ? "by the server" : status.error_message()));
  absl::MutexLock lock(&stream->mu);
  for (auto& [id, waiter] : stream->waiters) {
    waiter->result = ended;
    waiter->stream_ended = true;
    waiter->done = true;
  }
  stream->waiters.clear();
}

}  // namespace ratelimit
