#ifndef RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CONNECTION_H_
#define RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/redis/cluster/redis_reply.h"

struct redisReader;

namespace ratelimit::redis {

using SteadyTime = std::chrono::steady_clock::time_point;

// Splits "host:port" into its parts. INVALID_ARGUMENT naming `address` when it has no port or
// the port is not 1..65535.
absl::Status ParseAddress(absl::string_view address, std::string* host, int* port);

// The RESP encoding of one command: an array of bulk strings, one per argument.
std::string FormatCommand(const std::vector<std::string>& args);

// One non-blocking TCP connection to one Redis node, with a FIFO of the commands written to it
// and a queue of those not written yet. Commands queued between two writes go out in one write
// (a pipeline), bounded by `max_batch_commands` and `max_batch_bytes`.
//
// Replication acknowledgement: with `wait_replicas` N > 0, a batch holding commands marked
// `wait` ends with one `WAIT N <ms>` (ms: three quarters of the time left to the batch's
// earliest deadline, at least 1). The replies of those commands are held until the WAIT answers:
// released as they are when at least N replicas acknowledged, else each completes with
// UNAVAILABLE (the write ran on the primary but may be lost if it fails). Error replies (MOVED,
// script errors: nothing was written) are released at once.
//
// Nothing here calls back into its owner: finished commands are appended to a completion list
// that the owner runs afterwards, so a handler may queue new commands or drop this connection.
//
// Once a command that was written times out, or the socket fails, the connection is closed for
// good (closed() is true): written commands complete with DEADLINE_EXCEEDED (those whose deadline
// passed) or UNAVAILABLE (the others: their outcome is unknown); commands not written yet stay
// queued for the owner to take with TakeUnsent().
//
// Thread safety: none; used by one thread (the client's I/O thread).
class RedisConnection {
 public:
  using Handler = std::function<void(absl::StatusOr<Reply>)>;
  struct Command {
    std::string wire;  // FormatCommand(...) output
    Handler handler;   // may be empty: the reply is dropped
    SteadyTime deadline;
    bool wait = false;  // a write whose reply waits for Limits::wait_replicas replicas
    // When set, receives the number of commands of the write that carries it; must stay valid
    // while `handler` lives (it is set before the handler runs, on the same thread).
    int* batch_depth = nullptr;
    // When set, receives the error instead of `handler` if the command is taken back unsent
    // (TakeUnsent), so that the owner may send it elsewhere: it cannot have run.
    Handler not_sent;
  };
  struct Completion {
    Handler handler;
    absl::StatusOr<Reply> result;
  };
  struct Limits {
    int max_batch_commands = 256;
    size_t max_batch_bytes = 1 << 20;
    int wait_replicas = 0;  // 0: no WAIT
  };
  // Observers called synchronously on the owner's thread.
  struct Observer {
    std::function<void(int depth)> on_batch;         // a batch of `depth` commands was written
    std::function<void(int64_t micros)> on_latency;  // one reply, micros after its write
    std::function<void(bool enough)> on_wait;        // a WAIT answered (enough replicas or not)
  };

  RedisConnection(std::string address, Limits limits, Observer observer);
  ~RedisConnection();  // closes the socket; pending handlers are dropped, not called
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Starts a non-blocking connect; the connection is usable (commands may be queued) at once.
  // When `password` is non-empty, AUTH is the first command written. An error (bad address,
  // no socket) closes the connection.
  void Start(const std::string& password, SteadyTime connect_deadline);

  const std::string& address() const { return address_; }
  int fd() const { return fd_; }
  bool closed() const { return closed_; }
  bool ready() const { return connected_ && !closed_; }
  // Whether the TCP connect ever completed.
  bool connected() const { return connected_; }
  // Why the connection closed (OK while open).
  const absl::Status& error() const { return error_; }
  // The epoll events wanted now (EPOLLIN, plus EPOLLOUT while connecting or with bytes to write).
  uint32_t WantedEvents() const;
  // The earliest deadline of a command, queued or written, or of the connect.
  std::optional<SteadyTime> NextDeadline() const;
  size_t pending() const { return unsent_.size() + inflight_.size(); }
  // Whether epoll will report this connection without anything else happening, while the node
  // still has a written batch to work on after the one it replies to: it is connecting, or at
  // least `batches` writes await their replies.
  bool awaiting_replies(int batches) const {
    return !closed_ && (!connected_ || batches_in_flight_ >= batches);
  }

  void Enqueue(Command command);
  // Handles readiness reported by epoll.
  void OnEvents(uint32_t events, SteadyTime now, std::vector<Completion>* done);
  // Writes what is queued (when connected and the previous batch is fully written).
  void Flush(SteadyTime now, std::vector<Completion>* done);
  // Completes queued commands whose deadline passed with DEADLINE_EXCEEDED; closes the
  // connection if a written command's deadline passed (see the class comment).
  void CheckDeadlines(SteadyTime now, std::vector<Completion>* done);
  // Closes the connection with `error` (see the class comment).
  void Fail(absl::Status error, SteadyTime now, std::vector<Completion>* done);
  // The commands never written, in order; the queue is left empty.
  std::deque<Command> TakeUnsent();

 private:
  struct InFlight {
    Handler handler;
    SteadyTime deadline;
    SteadyTime sent;
    bool auth = false;        // the AUTH of Start(): an error reply closes the connection
    bool wait = false;        // its reply is held until the batch's WAIT answers
    bool is_wait = false;     // the batch's WAIT
    bool ends_batch = false;  // the last command of its write
    int* batch_depth = nullptr;
  };
  void ReadAvailable(SteadyTime now, std::vector<Completion>* done);
  void WriteAvailable(SteadyTime now, std::vector<Completion>* done);
  absl::Status Unavailable(absl::string_view what) const;

  const std::string address_;
  const Limits limits_;
  const Observer observer_;
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  absl::Status error_;
  SteadyTime connect_deadline_;
  redisReader* reader_ = nullptr;
  std::deque<Command> unsent_;
  std::deque<InFlight> inflight_;  // written or in the current batch, in order
  int batches_in_flight_ = 0;      // writes in inflight_ (its entries with ends_batch)
  std::string out_;                // the current batch
  size_t out_offset_ = 0;
  bool auth_pending_ = false;     // the first unsent command is Start()'s AUTH
  std::vector<Completion> held_;  // replies waiting for their batch's WAIT
};

}  // namespace ratelimit::redis

#endif  // RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CONNECTION_H_
