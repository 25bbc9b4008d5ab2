#ifndef RATELIMIT_CLIENT_LEASE_STREAM_H_
#define RATELIMIT_CLIENT_LEASE_STREAM_H_

// Acquire, Release and Extend as ops on one RateLimitService/LeaseStream (docs/leases.md, lease
// streams) instead of a call each: for a holder of many leases, a message per op instead of a
// call. Each op answers what its call would: the same response, or the same error (code and
// message) its call would end with.
//
// The stream is opened at the first op and shared by every thread: ops carry ids of this client's
// and their results find them whatever order they come in. Ops queued while a message is being
// written leave together in the next one (at most 1000 ops or about 60 KiB a message). When the
// stream ends (the server shut down, the connection broke), each op still waiting fails with
// UNAVAILABLE, and the next op opens a new stream. Leases do not belong to the stream: one
// acquired on it stays held until released or expired. A server that does not serve LeaseStream
// (UNIMPLEMENTED, a version from before it) is sent unary calls instead, from then on.
//
// Thread safety: thread-safe. Destroying the client ends the stream; no op may be in progress.

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/cpp/client.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"

namespace ratelimit {

class LeaseStreamClient {
 public:
  // `options.timeout` bounds each op (DEADLINE_EXCEEDED past it; a result that comes later is
  // dropped). `options.admin_token` is not used: no op needs it.
  LeaseStreamClient(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});
  ~LeaseStreamClient();
  LeaseStreamClient(const LeaseStreamClient&) = delete;
  LeaseStreamClient& operator=(const LeaseStreamClient&) = delete;

  absl::StatusOr<v1::AcquireResponse> Acquire(const v1::AcquireRequest& request);
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& request);
  absl::StatusOr<v1::ExtendResponse> Extend(const v1::ExtendRequest& request);

  // Streams opened so far (a new one after each that ended); for tests and diagnostics.
  int64_t streams_opened() const;
  // Whether the server was found not to serve LeaseStream (ops go as unary calls since).
  bool unary_fallback() const;

 private:
  struct Stream;
  struct Waiter;

  // Sends `op` (its id is set here) and waits for its result, or the error that ended the wait.
  absl::StatusOr<v1::LeaseOpResult> Send(v1::LeaseOp op);
  // The open stream, opened now when there is none.
  std::shared_ptr<Stream> CurrentStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what is queued on `stream` until nothing is (the one writer of the moment).
  void WriteQueued(const std::shared_ptr<Stream>& stream);
  // The stream's reader: hands each result to its waiter; at the end, fails those left.
  void ReadLoop(std::shared_ptr<Stream> stream);

  RateLimitClient unary_;
  std::unique_ptr<v1::RateLimitService::Stub> stub_;
  const ClientOptions options_;

  mutable absl::Mutex mu_;
  std::shared_ptr<Stream> stream_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> readers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  bool unary_fallback_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_LEASE_STREAM_H_
