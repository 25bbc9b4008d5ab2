#ifndef RATELIMIT_TESTS_SUPPORT_REDIS_PROCESS_H_
#define RATELIMIT_TESTS_SUPPORT_REDIS_PROCESS_H_

// Real redis-server processes for tests: one server, or a cluster of them. Every
// process runs on a free loopback port found at run time, in its own temporary directory, and is
// killed (by pid) when its owner is destroyed, whatever the test's outcome; the child also dies
// with the test binary.

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/redis/redis_command_runner.h"
#include "tests/support/test_support.h"

struct redisContext;

namespace ratelimit::testing {

// A synchronous RedisCommandRunner over hiredis. Thread-safe: commands are serialized (a test
// helper may hold its lock across the round trip; production clients must not).
class HiredisConnection final : public RedisCommandRunner {
 public:
  // Connects to host:port; `timeout` bounds the connect and each command's round trip.
  // UNAVAILABLE naming the address when it cannot connect.
  static absl::StatusOr<std::unique_ptr<HiredisConnection>> Connect(
      const std::string& host, int port, absl::Duration timeout = absl::Seconds(5));
  ~HiredisConnection() override;
  HiredisConnection(const HiredisConnection&) = delete;
  HiredisConnection& operator=(const HiredisConnection&) = delete;

  absl::StatusOr<redis::Reply> Command(absl::Span<const std::string> argv) override;

 private:
  explicit HiredisConnection(redisContext* context) : context_(context) {}
  absl::Mutex mu_;
  redisContext* const context_ ABSL_PT_GUARDED_BY(mu_);
};

// A port that is free on loopback now, and whose cluster bus port (+10000) is free too; -1 when
// none was found.
int FreeRedisPort();

// One redis-server child process.
class RedisServer {
 public:
  // Starts redis-server on 127.0.0.1 and a free port (whose cluster bus port, +10000, is free
  // too), with `--save '' --appendonly no` and then `extra_args` (which may override them), and
  // waits until it answers PING. A port taken between FreeRedisPort() and the server's bind
  // (by a test running beside this one) is given up for another. An error carries the server's
  // log when it does not start.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      std::vector<std::string> extra_args = {});
  // Start() on `port`. The server is ready once its own log says it accepts connections and it
  // answers PING: a PING alone could be answered by another process's server on that port
  // (ours then fails to bind it and exits), and a test would then drive that server as its own.
  // An ALREADY_EXISTS error when the server could not bind `port` (or its bus port).
  static absl::StatusOr<std::unique_ptr<RedisServer>> StartOn(
      int port, const std::vector<std::string>& extra_args);
  ~RedisServer();  // SIGKILL (after SIGCONT if paused) and reap, if still running
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  const std::string& dir() const { return dir_.path(); }

  // Sends the command `args` (each one argument) to this server on a new HiredisConnection and
  // returns
  // the reply as redis-cli prints it to a pipe: a string, status or error reply as its text, an
  // integer in decimal, nil as "", an array's elements one per line. An error only when the
  // connection fails (cannot connect, or no reply within 10 s); error replies are output
  // ("ERR ..."): check the text. `password`, when set, is sent with AUTH first.
  absl::StatusOr<std::string> Cli(const std::vector<std::string>& args,
                                  const std::string& password = "") const;

  void Pause();   // SIGSTOP
  void Resume();  // SIGCONT
  void Kill9();   // SIGKILL and reap
  std::string Log() const;

 private:
  RedisServer() = default;
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool paused_ = false;
};

// The cluster-node-timeout of every RedisCluster.
inline constexpr absl::Duration kClusterNodeTimeout = absl::Milliseconds(1000);

// A Redis Cluster of `primaries` × (1 + `replicas`) servers with cluster-node-timeout
// kClusterNodeTimeout and diskless replication without delay, formed as
// `redis-cli --cluster create ... --cluster-replicas R` forms one (the same slot ranges, a
// config epoch per node), by the cluster commands themselves: redis-cli waits whole seconds for
// the nodes to meet, where Start() polls. The first `primaries` servers are the primaries;
// replica j (server `primaries` + j) follows primary j mod `primaries`. Start() returns once
// the cluster is healthy and every replica has completed its first sync.
class RedisCluster {
 public:
  struct Node {
    std::string id;
    std::string address;
    bool primary = false;
    bool failed = false;                     // flagged fail (or fail?) by the node asked
    bool myself = false;                     // the node asked
    std::string primary_id;                  // for a replica
    std::vector<std::pair<int, int>> slots;  // ranges served, for a primary
  };

  static absl::StatusOr<std::unique_ptr<RedisCluster>> Start(int primaries = 3, int replicas = 1);

  int size() const { return static_cast<int>(servers_.size()); }
  RedisServer& server(int i) { return *servers_[i]; }
  // Every node's address, comma-separated (the client's seed list).
  std::string seeds() const;
  // The first node's address only.
  std::string first_address() const { return servers_[0]->address(); }
  // The index of the server at `address`, or -1.
  int IndexOf(const std::string& address) const;

  // The cluster as the first running node sees it (CLUSTER NODES).
  absl::StatusOr<std::vector<Node>> Nodes() const;
  // The index of the server that is the primary of `slot`.
  absl::StatusOr<int> PrimaryOf(int slot) const;
  // The index of a running replica of the primary at `primary_index` (which must be running),
  // as the replica itself says: another node's view of who replicates whom may lag behind by a
  // gossip round after the cluster is created or changes.
  absl::StatusOr<int> ReplicaOf(int primary_index) const;
  // The node id of the server at `index`.
  absl::StatusOr<std::string> IdOf(int index) const;

  // Waits until every running node reports cluster_state:ok and all of them agree on which
  // primary serves which slots.
  absl::Status WaitHealthy(absl::Duration timeout = absl::Seconds(60)) const;
  // Waits until every running replica reports its link to its primary up (master_link_status).
  absl::Status WaitReplicasInSync(absl::Duration timeout = absl::Seconds(60)) const;

 private:
  RedisCluster() = default;
  // Gives the first `primaries` servers their slots and epochs, has every node meet the others
  // and the rest replicate their primaries.
  absl::Status Form(int primaries);
  std::vector<std::unique_ptr<RedisServer>> servers_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_REDIS_PROCESS_H_
