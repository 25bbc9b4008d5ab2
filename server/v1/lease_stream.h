#ifndef RATELIMIT_SERVER_V1_LEASE_STREAM_H_
#define RATELIMIT_SERVER_V1_LEASE_STREAM_H_

// ratelimit.v1.RateLimitService/LeaseStream (docs/leases.md, lease streams): Acquire, Release and
// Extend as ops on one long-lived stream. Each op is handed to RateLimitServiceImpl, which decides
// it as the call it stands for (DecideStreamOp: the same checks, store transaction, metrics and
// spans); this file only carries ops in and results out.
//
// Served by the ServingLoop (a StreamService), so that a stream's ops join the loop thread's burst
// with the unary calls: the ops a burst reads are decided with one store call and one WAL write,
// and their results leave in one message per stream, written when the burst ends (a stream's
// results are queued on its loop thread and flushed by FlushThisThread, which the service's
// EndBurst calls). A result decided on another thread (a store thread, on Redis) is handed to the
// stream's loop thread first.
//
// Flow control: one read and one write in flight per stream. A stream with kMaxUnanswered ops read
// and not yet written is not read further until its writes catch up, so a client that does not
// take its answers holds at most that many, never an unbounded queue.
//
// A message that does not parse, or has no op or more than kMaxOpsPerMessage, ends the stream with
// INVALID_ARGUMENT once the ops already read are answered; so does Shutdown, with UNAVAILABLE.

#include <cstdint>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/serving/serving_loop.h"

namespace ratelimit {

class RateLimitServiceImpl;

// Thread safety: thread-safe. `service` and `loop` must outlive this; every stream has ended
// (AwaitStreamsEnded) before it is destroyed.
class LeaseStreams final : public ServingLoop::StreamService {
 public:
  static constexpr int kMaxOpsPerMessage = 1000;
  static constexpr int64_t kMaxUnanswered = 4096;

  explicit LeaseStreams(RateLimitServiceImpl& service) : service_(service) {}
  ~LeaseStreams() override = default;
  LeaseStreams(const LeaseStreams&) = delete;
  LeaseStreams& operator=(const LeaseStreams&) = delete;

  // ServingLoop::StreamService: requests the first stream on `cq`.
  void StartOn(grpc::ServerCompletionQueue* cq) override;

  // Each open stream answers the ops it has read, reads no more and ends with UNAVAILABLE; a
  // stream that arrives later ends at once. Idempotent.
  void Shutdown();
  // Blocks until every stream (requested or open) has ended, or until `deadline`; returns whether
  // they all ended. After Shutdown and the server's shutdown, each ends once its answers are out.
  bool AwaitStreamsEnded(absl::Time deadline);

  // Writes the results the calling loop thread queued during its burst, one message per stream.
  // Called at the end of each burst (RateLimitServiceImpl::EndBurst); a no-op elsewhere.
  static void FlushThisThread();

  // Streams open now.
  int64_t open_streams() const;

 private:
  class Stream;
  friend class Stream;

  // The streams whose results the calling loop thread queued in its current burst.
  static std::vector<Stream*>& ThreadFlushList();
  void RequestNextLocked(grpc::ServerCompletionQueue* cq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stream (requested or open) was deleted.
  void StreamDeleted(Stream* stream);

  RateLimitServiceImpl& service_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Stream*> open_ ABSL_GUARDED_BY(mu_);
  // Streams alive: requested (waiting for a client) or open.
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_LEASE_STREAM_H_
