#ifndef RATELIMIT_STORAGE_REPLICA_BOARD_H_
#define RATELIMIT_STORAGE_REPLICA_BOARD_H_

// ReplicaBoard: the small shared space through which server replicas that share a store agree on
// something other than a limit's state (today: how the RLQS service divides one bucket's global
// rate among the replicas its Envoys are connected to; server/rlqs/rlqs_replicas.h).
//
// A board holds groups. A group (one RLQS bucket, say) has:
//  - a record per member (one replica's view, e.g. its subscribers' demands), stamped with the
//    time the member wrote it; a record older than a reader's `stale_us` is dropped;
//  - a lead: at most one member at a time holds it, until a time; the holder renews it;
//  - a decision, with a version that grows by one with each decision; Decide writes the next
//    version only if the group is still at the version its caller read (compare-and-set), so two
//    members deciding at once never both win.
// Times are the members' clocks, in microseconds (replicas' clocks are assumed to agree within a
// small fraction of the lead's length). A group not written for `keep_us` is forgotten.
//
// Implementations: storage/memory/memory_replica_board.h (one process; tests),
// storage/redis/redis_replica_board.h (a Redis server or cluster: every key of a group in one
// slot, each call one atomic script). RocksDB has none: its store belongs to one process.

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace ratelimit {

struct BoardSyncRequest {
  std::string group;
  std::string member;
  std::string record;         // this member's new record; empty: write none
  int64_t now_us = 0;         // the member's clock
  int64_t lead_us = 0;        // > 0: take or renew the lead until now_us + lead_us when free
  int64_t stale_us = 0;       // records written before now_us - stale_us are dropped
  int64_t keep_us = 0;        // the group is forgotten when not written for this long
  bool read_records = false;  // return every fresh record even without the lead
};

struct BoardSyncReply {
  bool leading = false;  // this member holds the lead now
  uint64_t version = 0;  // of `decision`; 0 when none was made
  std::string decision;
  // Every fresh record, by member (this member's own included): filled when leading or when
  // read_records was asked.
  std::map<std::string, std::string> records;
};

// A name for this process on a board: host name, process id and 64 random bits, so that two
// starts never share one (a restarted replica is a newcomer). No whitespace: records and
// decisions separate their fields with it.
std::string NewReplicaName();

// Thread safety: implementations are thread-safe.
class ReplicaBoard {
 public:
  virtual ~ReplicaBoard() = default;
  // Writes the member's record, takes or renews the lead when asked, and reads the group's
  // decision (and records), all as one atomic step.
  virtual absl::StatusOr<BoardSyncReply> Sync(const BoardSyncRequest& request) = 0;
  // Writes `decision` as version expected_version + 1 when the group's decision is still at
  // expected_version; false (nothing written) when another decision came first.
  virtual absl::StatusOr<bool> Decide(const std::string& group, uint64_t expected_version,
                                      const std::string& decision, int64_t keep_us) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REPLICA_BOARD_H_
