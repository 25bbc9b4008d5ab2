#include "storage/memory/memory_replica_board.h"

#include <utility>

namespace ratelimit {

void MemoryReplicaBoard::ForgetOldLocked(int64_t now_us) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    const Group& g = it->second;
    if (g.keep_us > 0 && now_us - g.written_us > g.keep_us) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<BoardSyncReply> MemoryReplicaBoard::Sync(const BoardSyncRequest& request) {
  absl::MutexLock lock(&mu_);
  ForgetOldLocked(request.now_us);
  Group& g = groups_[request.group];
  if (!request.record.empty()) {
    g.records[request.member] = {request.now_us, request.record};
    g.written_us = request.now_us;
    g.keep_us = request.keep_us;
  }
  BoardSyncReply reply;
  if (request.lead_us > 0 &&
      (g.leader.empty() || g.leader == request.member || g.lead_until_us <= request.now_us)) {
    g.leader = request.member;
    g.lead_until_us = request.now_us + request.lead_us;
    reply.leading = true;
  }
  reply.version = g.version;
  reply.decision = g.decision;
  if (reply.leading || request.read_records) {
    for (auto it = g.records.begin(); it != g.records.end();) {
      if (it->second.first < request.now_us - request.stale_us) {
        it = g.records.erase(it);
        continue;
      }
      reply.records.emplace(it->first, it->second.second);
      ++it;
    }
  }
  return reply;
}

absl::StatusOr<bool> MemoryReplicaBoard::Decide(const std::string& group,
                                                uint64_t expected_version,
                                                const std::string& decision, int64_t keep_us) {
  absl::MutexLock lock(&mu_);
  Group& g = groups_[group];
  if (g.version != expected_version) return false;
  g.version = expected_version + 1;
  g.decision = decision;
  g.keep_us = keep_us;
  return true;
}

}  // namespace ratelimit
