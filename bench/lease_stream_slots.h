#ifndef RATELIMIT_BENCH_LEASE_STREAM_SLOTS_H_
#define RATELIMIT_BENCH_LEASE_STREAM_SLOTS_H_

// The lease load generator's --stream transport (bench/lease_loadgen.cc): the slots of one thread
// send their Acquire and Release requests as ops of ratelimit.v1.RateLimitService/LeaseStream
// streams instead of unary calls, one stream per channel, every slot of a channel multiplexed on
// its stream.
//
// Each op carries an id of its own, from which its result finds its slot. A stream has one Write
// in flight at a time: ops sent while it is in flight are queued and go together in the next
// LeaseStreamRequest, at most kMaxOpsPerMessage a message and at most kMaxMessageBytes of it
// (ratelimit-server refuses a larger message, ending the stream); ops sent while the results of a
// message are handled are queued until all of them have been, so that the answers of one message
// go out in one message. One Read is always outstanding, from the start of the stream until the
// server ends it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"

namespace ratelimit::bench {

class LeaseStreamSlots {
 public:
  using Stub = v1::RateLimitService::Stub;
  // The result of the op a slot sent last. An op whose stream ended before answering it gets a
  // result with the stream's status code (not 0) and message.
  using ResultFn = std::function<void(int slot, const v1::LeaseOpResult& result)>;
  // A failure of a stream beyond its ops' results ("LeaseStream <code>: <message>"): a stream
  // ending with a status other than OK, or a result whose id is no op's.
  using StreamErrorFn = std::function<void(const std::string& error)>;

  // The most ops a LeaseStreamRequest may carry, and the largest message ratelimit-server
  // receives on a call other than RLQS (1000 Acquire ops with an inline config pass it).
  static constexpr int kMaxOpsPerMessage = 1000;
  static constexpr size_t kMaxMessageBytes = 64 * 1024;

  // Opens one stream per distinct stub of `slot_stubs` (slot s sends its ops on the stream of
  // slot_stubs[s]) on `cq`, each with `deadline`. Every tag this object gives `cq` must be
  // handed back to Proceed(). The streams start at once; ops sent before a stream is ready wait
  // in its queue.
  LeaseStreamSlots(grpc::CompletionQueue* cq, const std::vector<Stub*>& slot_stubs,
                   absl::Time deadline, ResultFn on_result, StreamErrorFn on_stream_error);
  ~LeaseStreamSlots();

  LeaseStreamSlots(const LeaseStreamSlots&) = delete;
  LeaseStreamSlots& operator=(const LeaseStreamSlots&) = delete;

  // Sends `request` as an op of slot's stream. False, sending nothing, when that stream has
  // ended or is ending (no result will come). REQUIRES: the slot has no op awaiting its result.
  bool Acquire(int slot, const v1::AcquireRequest& request);
  bool Release(int slot, const v1::ReleaseRequest& request);

  // Handles the completion of `tag`, one of this object's, that `cq` returned with `ok`: results
  // go to on_result, failures to on_stream_error.
  void Proceed(void* tag, bool ok);

  // Half-closes every stream (WritesDone once its queued ops are written); each finishes when
  // the server ends it. Calling it again does nothing more.
  void CloseAll();

  // Whether every stream has finished (its Finish has returned its status).
  bool finished() const;

 private:
  struct Stream;
  struct Tag;

  // Queues a new op of `slot` and returns it, with its id; null when slot's stream takes no ops.
  v1::LeaseOp* NewOp(int slot);
  // Writes the stream's queued ops, or its WritesDone once it is closing and they are all
  // written, unless a write is in flight, it is not started, or results are being handled.
  void Flush(Stream& stream);
  // Finishes the stream once the server has ended it (the last Read failed) and no write is in
  // flight.
  void MaybeFinish(Stream& stream);
  void HandleResults(Stream& stream);
  // After Finish: a result with the stream's status for each op it left unanswered.
  void FailUnanswered(Stream& stream);

  grpc::CompletionQueue* const cq_;
  const ResultFn on_result_;
  const StreamErrorFn on_stream_error_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<Stream*> slot_stream_;  // per slot
  std::vector<uint64_t> slot_op_id_;  // per slot: the id of its op awaiting a result, or 0
  uint64_t op_sequence_ = 0;
};

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_LEASE_STREAM_SLOTS_H_
