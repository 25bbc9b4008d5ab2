#ifndef RATELIMIT_STORAGE_MEMORY_MEMORY_REPLICA_BOARD_H_
#define RATELIMIT_STORAGE_MEMORY_MEMORY_REPLICA_BOARD_H_

// A ReplicaBoard (storage/replica_board.h) in this process's memory: for replicas in one process
// (tests of several RLQS services sharing one budget) and as the reference the Redis board is
// tested against. Groups are forgotten keep_us after their last write, by the writers' clocks.

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage/replica_board.h"

namespace ratelimit {

class MemoryReplicaBoard final : public ReplicaBoard {
 public:
  absl::StatusOr<BoardSyncReply> Sync(const BoardSyncRequest& request) override;
  absl::StatusOr<bool> Decide(const std::string& group, uint64_t expected_version,
                              const std::string& decision, int64_t keep_us) override;

 private:
  struct Group {
    std::map<std::string, std::pair<int64_t, std::string>> records;  // member -> (time, record)
    std::string leader;
    int64_t lead_until_us = 0;
    uint64_t version = 0;
    std::string decision;
    int64_t written_us = 0;
    int64_t keep_us = 0;
  };
  // Forgets the groups not written for their keep_us, by `now_us`.
  void ForgetOldLocked(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_MEMORY_MEMORY_REPLICA_BOARD_H_
