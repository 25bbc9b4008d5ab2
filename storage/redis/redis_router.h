#ifndef RATELIMIT_STORAGE_REDIS_REDIS_ROUTER_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_ROUTER_H_

// How the Redis store (redis_state_store.h) reaches Redis: a Router sends each command to the node
// serving its key's slot (through the cluster client, or over one plain connection) and traces
// the round trip; RedisSlotGroups says which keys of an operation share a slot. Internal to the
// Redis backend.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_reply.h"
#include "storage/redis/redis_command_runner.h"
#include "storage/store_trace.h"

namespace ratelimit::redis_internal {

// How the store reaches Redis. Implementations are thread-safe.
class Router {
 public:
  using Callback = std::function<void(absl::StatusOr<redis::Reply>)>;
  virtual ~Router() = default;
  // Runs `argv` on the node serving `routing_key` and calls `done` once (on any thread, often
  // the client's I/O thread: `done` must not wait for Redis).
  virtual void Execute(const std::string& routing_key, std::vector<std::string> argv,
                       Callback done) = 0;
  // Execute, and while a store tracer is installed on the calling thread (store_trace.h), one
  // CLIENT span for the round trip, ended when the reply arrives.
  void Send(const std::string& routing_key, std::vector<std::string> argv, Callback done) {
    SendVia(CurrentStoreTracer(), routing_key, std::move(argv), std::move(done));
  }
  // Send, traced by `tracer` (null: untraced) rather than the calling thread's: for a command
  // sent from a reply's callback on behalf of a traced call.
  void SendVia(StoreTracer* tracer, const std::string& routing_key, std::vector<std::string> argv,
               Callback done) {
    if (tracer != nullptr) {
      SendTraced(*tracer, routing_key, std::move(argv), std::move(done));
      return;
    }
    Execute(routing_key, std::move(argv), std::move(done));
  }
  // The primaries to SCAN and PING ("" for the only node of a plain connection).
  virtual std::vector<std::string> Primaries() = 0;
  virtual absl::StatusOr<redis::Reply> ExecuteOnNode(const std::string& node,
                                                     std::vector<std::string> argv) = 0;
  // The client's counters; nullptr when there is no cluster client. Valid while the router lives.
  virtual const redis::RedisClusterClient* client() const { return nullptr; }
  // Whether every key lives on one server (a standalone one): keys of different slots may then
  // meet in one command.
  virtual bool SingleNode() const = 0;

 protected:
  // Execute, filling `info` (not null) before `done` runs when the router knows the details.
  virtual void ExecuteWithInfo(const std::string& routing_key, std::vector<std::string> argv,
                               Callback done, std::shared_ptr<redis::CommandInfo> info) {
    (void)info;
    Execute(routing_key, std::move(argv), std::move(done));
  }

 private:
  void SendTraced(StoreTracer& tracer, const std::string& routing_key,
                  std::vector<std::string> argv, Callback done);
};

// One synchronous connection: commands run on the caller's thread.
std::unique_ptr<Router> NewRunnerRouter(std::unique_ptr<RedisCommandRunner> runner);
// The cluster client: commands are routed by slot and run on its I/O thread.
std::unique_ptr<Router> NewClusterRouter(std::unique_ptr<redis::RedisClusterClient> client);

// A RedisCommandRunner on one node of a router (to load the library on each primary).
class NodeRunner final : public RedisCommandRunner {
 public:
  NodeRunner(Router& router, std::string node) : router_(router), node_(std::move(node)) {}
  absl::StatusOr<redis::Reply> Command(absl::Span<const std::string> argv) override {
    return router_.ExecuteOnNode(node_, std::vector<std::string>(argv.begin(), argv.end()));
  }

 private:
  Router& router_;
  const std::string node_;
};

// Replies of commands sent together, awaited together. The callbacks share its state, so a
// callback finishing its unlock after the waiter returned touches nothing freed.
class Replies {
 public:
  explicit Replies(size_t n) : state_(std::make_shared<Shared>(n)) {}
  Router::Callback For(size_t i) {
    return [state = state_, i](absl::StatusOr<redis::Reply> reply) {
      absl::MutexLock l(&state->mu);
      state->replies[i] = std::move(reply);
      --state->pending;
    };
  }
  // Every callback has run.
  std::vector<absl::StatusOr<redis::Reply>>& Wait() {
    absl::MutexLock l(&state_->mu);
    state_->mu.Await(absl::Condition(
        +[](size_t* pending) { return *pending == 0; }, &state_->pending));
    return state_->replies;
  }

 private:
  struct Shared {
    explicit Shared(size_t n) : replies(n, absl::UnknownError("no reply")), pending(n) {}
    absl::Mutex mu;
    // Written by the callbacks under mu; read by the waiter once pending is 0.
    std::vector<absl::StatusOr<redis::Reply>> replies;
    size_t pending ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<Shared> state_;
};

// INTERNAL naming `what` and the error reply (or the unexpected reply) `reply`.
absl::Status ErrorReply(absl::string_view what, const redis::Reply& reply);

// The indices of `redis_keys` in each slot, slots in order of first mention.
std::vector<std::vector<size_t>> SlotGroups(const std::vector<std::string>& redis_keys);

}  // namespace ratelimit::redis_internal

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_ROUTER_H_
