#ifndef RATELIMIT_STORAGE_REDIS_REDIS_REPLICA_BOARD_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_REPLICA_BOARD_H_

// A ReplicaBoard (storage/replica_board.h) in Redis, beside the states of a RedisStateStore.
// A group is three keys sharing one hash tag (a hash of the group's name), so they live in one
// slot of a cluster and each call is one atomic EVAL on the primary of that slot:
//   <prefix>board:{<tag>}:<group>:records   hash: member -> "<time_us>|<record>"
//   <prefix>board:{<tag>}:<group>:lead      string: "<until_us>|<member>"
//   <prefix>board:{<tag>}:<group>:decision  hash: v -> version, d -> decision
// Every key expires keep_us after the group's last write (PEXPIRE, Redis's clock): the members'
// times decide freshness and the lead; the expiry only collects groups nobody writes any more.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/redis/cluster/redis_reply.h"
#include "storage/replica_board.h"

namespace ratelimit {

class RedisReplicaBoard final : public ReplicaBoard {
 public:
  // Sends one command to the node serving `routing_key`'s slot and waits for its reply.
  using CommandFn = std::function<absl::StatusOr<redis::Reply>(const std::string& routing_key,
                                                               std::vector<std::string> argv)>;
  RedisReplicaBoard(std::string key_prefix, CommandFn command);

  absl::StatusOr<BoardSyncReply> Sync(const BoardSyncRequest& request) override;
  absl::StatusOr<bool> Decide(const std::string& group, uint64_t expected_version,
                              const std::string& decision, int64_t keep_us) override;

  // The key of `group`'s part `part` ("records", "lead" or "decision").
  std::string KeyOf(const std::string& group, const char* part) const;

 private:
  const std::string prefix_;
  const CommandFn command_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_REPLICA_BOARD_H_
