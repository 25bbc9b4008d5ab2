#ifndef RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CLUSTER_CLIENT_H_
#define RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CLUSTER_CLIENT_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/redis/cluster/redis_reply.h"
#include "storage/worker_thread.h"

namespace ratelimit::redis {

// What the client counts; a snapshot is returned by RedisClusterClient::Metrics(). Counters only
// grow.
struct RedisClientMetrics {
  // Commands handed to callers' callbacks, and those among them that got a non-OK status.
  uint64_t commands = 0;
  uint64_t errors = 0;
  // Commands that failed with DEADLINE_EXCEEDED.
  uint64_t timeouts = 0;
  // Pipelined writes: one round trip carries every command queued for a node since the previous
  // write (at most Options::max_batch_commands).
  uint64_t round_trips = 0;
  // Commands per round trip: the largest seen, and a histogram with buckets 1, 2-3, 4-7, ...,
  // 128-255, 256+ (bucket i counts depths in [2^i, 2^(i+1))).
  uint64_t max_pipeline_depth = 0;
  std::array<uint64_t, 9> pipeline_depth_histogram{};
  // Cluster redirections and retries.
  uint64_t moved = 0;
  uint64_t ask = 0;
  uint64_t tryagain = 0;
  uint64_t clusterdown = 0;
  // Slot-routed commands resent because the node the map named could not be reached.
  uint64_t unreachable_retries = 0;
  uint64_t slot_map_refreshes = 0;
  // Connection attempts, and those that failed before the TCP connection was established.
  uint64_t connects = 0;
  uint64_t connect_failures = 0;
  // WAITs answered (Options::wait_replicas > 0), and those with fewer replicas than required.
  uint64_t waits = 0;
  uint64_t wait_shortfalls = 0;
  // Reply latency (from the write of a command's batch to its reply) per node address.
  struct Latency {
    uint64_t count = 0;
    uint64_t total_micros = 0;
    uint64_t max_micros = 0;
  };
  std::map<std::string, Latency> latency_by_node;
};

// How one slot-routed command went, for its trace span: filled on the I/O thread before the
// command's callback runs, and read by that callback.
struct CommandInfo {
  std::string address;     // the node that gave the final answer ("" if none was reached)
  int redirects = 0;       // MOVED / ASK followed, TRYAGAIN / CLUSTERDOWN retried
  int pipeline_depth = 0;  // commands in the write that carried it last (0: never written)
  int wait_replicas = 0;   // replicas the write's WAIT asked for (0: no WAIT)
};

// The reply of one node to a command run on every primary.
struct NodeReply {
  std::string address;
  absl::StatusOr<Reply> reply;
};

// A client for Redis Cluster (or one standalone Redis server), speaking RESP through hiredis'
// formatter and reply parser, with the cluster logic here:
//  - Routing: a command goes to the primary serving the slot of its routing key (KeySlot, with
//    hash tags), according to a slot map read with CLUSTER SLOTS. A server whose CLUSTER commands
//    fail with "cluster support disabled" is standalone: every slot maps to it.
//  - Redirections: MOVED updates the slot's owner, schedules a refresh of the whole map and
//    resends the command there; ASK sends ASKING and the command to the named node, once;
//    TRYAGAIN and CLUSTERDOWN are retried after a backoff. At most `max_redirects` of these per
//    command; then UNAVAILABLE with the last answer.
//  - Connections: one per node, opened on first use, with AUTH first when a password is set.
//    After a connection fails, the node is not dialled again before a backoff (doubling from
//    `reconnect_backoff_min` to `reconnect_backoff_max`, reset by a successful connect), and the
//    slot map is refreshed. In cluster mode a slot-routed command that was not written (its node
//    could not be reached, or the connection failed before the write) is routed again on the
//    refreshed map, at least 100 ms apart, within `max_redirects` and its timeout, then fails with
//    UNAVAILABLE: after a failover the map may still name the dead primary. Commands sent to a
//    named node, and every command of a standalone server, fail at once with UNAVAILABLE.
//  - Batching: commands queued for a node while its previous write was in progress go out in one
//    write (a pipeline). Each command is still executed by Redis on its own, atomically.
//  - Replication: with `wait_replicas` N > 0, every pipelined write to a node that carries
//    slot-routed commands (Execute, ExecuteInSlot) ends with one `WAIT N <ms>`; those commands'
//    replies are delivered only once the WAIT answered ≥ N, else they complete with UNAVAILABLE
//    (the command ran on the primary, but a failover may lose it). Error replies are delivered at
//    once. Commands sent to a named node (ExecuteOnNode, ExecuteOnEachPrimary) are not waited for.
//  - Timeouts: every command has `command_timeout` from submission. A command not answered in
//    time completes with DEADLINE_EXCEEDED, and its connection is closed (the commands written
//    after it complete with UNAVAILABLE: their outcome is unknown). A written command is never
//    resent on a new connection, since it may have run; commands not written yet are.
//
// Errors: UNAVAILABLE naming the address for connection trouble; DEADLINE_EXCEEDED for timeouts;
// UNAUTHENTICATED when the password is refused or missing; CANCELLED for commands pending when the
// client is destroyed. An error reply of Redis itself (e.g. "WRONGTYPE ...", a script error) is
// not a failed status: it is delivered as a Reply of type kError.
//
// Threading: one dedicated I/O thread (an epoll loop) owns every socket. The Execute* methods
// queue the command and wake that thread; they never block on the network. Callbacks run on the
// I/O thread: they must be quick and must not call the *Sync methods (which then return
// FAILED_PRECONDITION instead of deadlocking); they may call Execute*. Every public method is
// thread-safe.
class RedisClusterClient {
 public:
  struct Options {
    // Seed nodes, "host:port[,host:port...]"; tried in order until one answers. Required.
    std::string seeds;
    // AUTH password (the caller reads it from its file); empty: no AUTH.
    std::string password;
    // Time to open a TCP connection and authenticate. Default 1 s.
    absl::Duration connect_timeout = absl::Seconds(1);
    // Time from submission to the reply of one command, redirections included. Default 1 s.
    absl::Duration command_timeout = absl::Seconds(1);
    // Redirections (MOVED, ASK) and retries (TRYAGAIN, CLUSTERDOWN) per command. Default 5.
    int max_redirects = 5;
    // Delay before retrying a command answered TRYAGAIN or CLUSTERDOWN (times the attempt
    // number). Default 20 ms.
    absl::Duration retry_backoff = absl::Milliseconds(20);
    // Backoff between connection attempts to one node. Defaults 50 ms and 1 s.
    absl::Duration reconnect_backoff_min = absl::Milliseconds(50);
    absl::Duration reconnect_backoff_max = absl::Seconds(1);
    // Bounds of one pipelined write to a node. Defaults 256 commands, 1 MiB (a single larger
    // command is still written).
    int max_batch_commands = 256;
    size_t max_batch_bytes = 1 << 20;
    // Replicas that must acknowledge each pipelined write of slot-routed commands (WAIT, see
    // above). Default 0: none, no WAIT.
    int wait_replicas = 0;
    // The I/O thread's scheduling (storage/worker_thread.h). Default: the process's policy.
    WorkerScheduling io_thread_scheduling = WorkerScheduling::kDefault;
  };
  using Callback = std::function<void(absl::StatusOr<Reply>)>;

  // Validates `options` (INVALID_ARGUMENT naming the field), starts the I/O thread and reads the
  // slot map from the first seed that answers. UNAVAILABLE naming every seed tried (with its
  // error) when none answers within its timeouts; UNAUTHENTICATED when a seed refuses the password.
  static absl::StatusOr<std::unique_ptr<RedisClusterClient>> Connect(Options options);

  // Stops the I/O thread; commands still pending complete with CANCELLED first.
  // REQUIRES: no other thread calls a method of the client during or after destruction.
  ~RedisClusterClient();
  RedisClusterClient(const RedisClusterClient&) = delete;
  RedisClusterClient& operator=(const RedisClusterClient&) = delete;

  // Whether the seeds are a cluster (false: one standalone server).
  bool cluster_mode() const { return cluster_mode_; }

  // Runs `args` (e.g. {"INCR", "k"}) on the primary serving the slot of `routing_key` and calls
  // `done` once, on the I/O thread, with the reply or the error. REQUIRES: args is not empty.
  void Execute(absl::string_view routing_key, std::vector<std::string> args, Callback done);
  // The same, also filling `*info` (may be null; kept alive until `done` ran) before `done`.
  void Execute(absl::string_view routing_key, std::vector<std::string> args, Callback done,
               std::shared_ptr<CommandInfo> info);
  // The same, routed by an explicit slot (0..16383; outside: INVALID_ARGUMENT via `done`).
  void ExecuteInSlot(int slot, std::vector<std::string> args, Callback done);
  // Runs `args` on the node at `address` ("host:port"), whatever it serves; redirections are
  // returned as error replies, not followed. For SCAN loops over one primary.
  void ExecuteOnNode(std::string address, std::vector<std::string> args, Callback done);
  // Runs `args` on every primary of the current slot map (no redirections followed) and calls
  // `done` once with one NodeReply per primary, in address order.
  void ExecuteOnEachPrimary(std::vector<std::string> args,
                            std::function<void(std::vector<NodeReply>)> done);

  // Blocking forms of the above, for start-up, administration and tests. Never call them from a
  // callback (FAILED_PRECONDITION).
  absl::StatusOr<Reply> ExecuteSync(absl::string_view routing_key, std::vector<std::string> args);
  absl::StatusOr<Reply> ExecuteOnNodeSync(std::string address, std::vector<std::string> args);
  absl::StatusOr<std::vector<NodeReply>> ExecuteOnEachPrimarySync(std::vector<std::string> args);

  // The addresses of the primaries in the current slot map, sorted.
  std::vector<std::string> Primaries() const;
  // The primary the current slot map assigns `slot` to ("" when none).
  std::string PrimaryForSlot(int slot) const;
  // The counters so far; they include every command whose callback has been called.
  RedisClientMetrics Metrics() const;

 private:
  class Loop;  // the I/O thread's state; defined in the .cc
  explicit RedisClusterClient(Options options);

  void ExecuteRouted(int slot, std::vector<std::string> args, Callback done,
                     std::shared_ptr<CommandInfo> info);
  // Queues `task` for the I/O thread and wakes it, unless it will wake anyway soon enough: a wake
  // is already on its way, or `slot` (-1: none) belongs to a primary with writes enough awaiting
  // replies (the thread runs the queued tasks on the next one, so commands queued meanwhile share
  // a write).
  void Submit(std::function<void(Loop&)> task, int slot = -1);
  bool OnIoThread() const;

  const Options options_;
  bool cluster_mode_ = false;  // set once by Connect
  std::unique_ptr<Loop> loop_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::vector<std::function<void(Loop&)>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // An eventfd write the I/O thread has not taken its tasks after yet.
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  // Per index of primaries_: the I/O thread went to sleep with writes enough awaiting replies
  // from that primary to hold new commands for it (see kBatchesAhead).
  std::vector<bool> awaiting_reply_ ABSL_GUARDED_BY(mu_);
  // Published by the I/O thread after every slot map change.
  std::vector<std::string> primaries_ ABSL_GUARDED_BY(mu_);
  std::vector<int> slot_owner_ ABSL_GUARDED_BY(mu_);  // index into primaries_, -1 for none
  RedisClientMetrics metrics_ ABSL_GUARDED_BY(mu_);
  int wake_fd_ = -1;  // eventfd that wakes the I/O thread
};

}  // namespace ratelimit::redis

#endif  // RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CLUSTER_CLIENT_H_
