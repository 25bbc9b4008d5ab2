#ifndef RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CLUSTER_LOOP_H_
#define RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CLUSTER_LOOP_H_

// Internal to RedisClusterClient: the state and the epoll loop of its I/O thread.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/cluster/redis_connection.h"
#include "storage/redis/cluster/redis_reply.h"

namespace ratelimit::redis {

inline SteadyTime Now() { return std::chrono::steady_clock::now(); }

inline std::chrono::nanoseconds ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

// One command on its way: routed, redirected, retried until it completes.
struct Request {
  std::string wire;
  int slot = -1;     // routed by slot when `node` is empty
  std::string node;  // a fixed node: no redirection is followed
  RedisClusterClient::Callback done;
  SteadyTime deadline;
  int attempts = 0;
  bool internal = false;  // the client's own command: not counted in the metrics
  bool wait = false;      // its reply waits for Options::wait_replicas replicas (WAIT)
  // When set, filled for the caller's trace span before `done` runs.
  std::shared_ptr<CommandInfo> info;
};

// Everything the I/O thread owns. Only that thread touches it (no locks), except for the
// constructor and destructor, which run while the thread does not.
class RedisClusterClient::Loop {
 public:
  Loop(RedisClusterClient& owner, std::vector<std::string> seeds);
  ~Loop();

  bool ok() const { return epoll_fd_ >= 0; }
  void Run();

  void Route(std::shared_ptr<Request> req);
  void SetStandalone(const std::string& address);
  // Replaces the slot map with a CLUSTER SLOTS reply from `from`. False if it is malformed.
  bool ApplySlots(const Reply& reply, const std::string& from);
  void SetClusterMode(bool on) { cluster_mode_ = on; }
  void EachPrimary(std::vector<std::string> args, std::function<void(std::vector<NodeReply>)> done);

 private:
  void Dispatch(std::shared_ptr<Request> req, const std::string& address, bool asking);
  // `req` could not be sent to `address` (no connection, or the connection failed before its
  // command was written): routed again on a refreshed map when that is safe, else finished.
  void OnNotSent(const std::shared_ptr<Request>& req, absl::Status error);
  void OnReply(const std::shared_ptr<Request>& req, const std::string& address,
               absl::StatusOr<Reply> result);
  void Finish(const std::shared_ptr<Request>& req, absl::StatusOr<Reply> result);
  absl::StatusOr<RedisConnection*> ConnectionTo(const std::string& address);
  void RequestRefresh() { refresh_wanted_ = true; }
  void MaybeStartRefresh(SteadyTime now);
  void TryRefresh(std::shared_ptr<std::vector<std::string>> candidates, size_t index);
  void RunCompletions();
  void SweepClosed(SteadyTime now);
  // Completes the unsent commands of a closed connection with its error, starts the node's
  // backoff and forgets the connection.
  std::map<std::string, std::unique_ptr<RedisConnection>>::iterator Retire(
      std::map<std::string, std::unique_ptr<RedisConnection>>::iterator it, SteadyTime now);
  void UpdateInterest();
  void Publish();
  void PublishMetrics() {
    if (!metrics_dirty_) return;
    metrics_dirty_ = false;
    absl::MutexLock l(&owner_.mu_);
    owner_.metrics_ = metrics_;
  }
  void Shutdown();
  int TimeoutMillis(SteadyTime now) const;

  RedisClusterClient& owner_;
  const Options& options_;
  const std::vector<std::string> seeds_;
  int epoll_fd_ = -1;
  bool cluster_mode_ = false;
  bool shutting_down_ = false;

  std::map<std::string, std::unique_ptr<RedisConnection>> connections_;
  std::map<int, RedisConnection*> by_fd_;
  std::map<int, uint32_t> interest_;  // fd -> events registered with epoll
  struct Backoff {
    SteadyTime next_attempt;
    std::chrono::nanoseconds delay{0};
    absl::Status last_error;
  };
  std::map<std::string, Backoff> backoff_;

  std::vector<std::string> primaries_;  // sorted
  std::vector<int> slot_owner_;         // index into primaries_, -1 for none

  std::vector<RedisConnection::Completion> completions_;
  std::multimap<SteadyTime, std::function<void()>> timers_;
  bool refresh_wanted_ = false;
  bool refresh_in_flight_ = false;
  SteadyTime last_refresh_{};
  RedisClientMetrics metrics_;
  bool metrics_dirty_ = false;
};

}  // namespace ratelimit::redis

#endif  // RATELIMIT_STORAGE_REDIS_CLUSTER_REDIS_CLUSTER_LOOP_H_
