#ifndef RATELIMIT_SERVER_RLQS_RLQS_REPLICAS_H_
#define RATELIMIT_SERVER_RLQS_RLQS_REPLICAS_H_

// Several server replicas dividing one bucket's global rate: the Envoys of a bucket may be
// connected to different replicas, and the sum of every assignment from every replica must stay
// within the bucket's global rate. The replicas share a ReplicaBoard (storage/replica_board.h;
// with --store=redis, keys beside the states) with one group per bucket:
//
//  - Every reallocation interval each replica that has subscribers of the bucket writes its
//    record (its subscribers' smoothed demands) and asks for the bucket's lead (held for one
//    interval). The leader divides the global rate among every subscriber of every replica with
//    the same max-min fair share as one replica does (DivideFairly, newcomer reserve included)
//    and writes the decision: each replica's part, the sum of its subscribers' shares. One
//    decision per bucket per interval; the other replicas read it.
//  - Each replica divides its part among its own subscribers (the same division again, so each
//    subscriber gets what the fleet-wide division gave it), and Envoy-facing behaviour is as with
//    one replica: a local join or leave is divided again at once within the part.
//  - A replica whose subscribers are not in the decision yet (a bucket's first Envoy on that
//    replica), or whose configured rule differs from the decision's (a reload), decides at once
//    without waiting for the lead; decisions are compare-and-set on the board's version, so two
//    replicas deciding at once never both win (the loser reads the winner's).
//  - A decision never lets the parts in force sum over the global rate while replicas pick it
//    up: a part that shrinks shrinks at once; a part that grows takes only what is free (the
//    global rate less, for every replica, the larger of the part its record says it hands out
//    and the most the previous decision allows it: the newcomer reserve, or rate freed by a
//    replica that left) until `settle_us` has passed (1.5 reallocation intervals, so every
//    replica has read the new decision and shrunk), then all of it. A newcomer's first
//    assignment thus comes out of the reserve at once. A replica that reads the board later
//    than that (its ticks late by more than half an interval) can overlap for the difference.
//  - A replica's record older than three intervals is stale: its subscribers are left out (a
//    replica that died). Its Envoys go on enforcing its assignments until they expire, so its
//    last part stays held back from the division until the time its last record said none of
//    its assignments outlives (RlqsReplicaRecord::held_until_us; the decision carries it, and
//    the part, as a "held" entry). Each record claims that time ahead: its assignments sent so
//    far, and three intervals of sending after it at the current time to live; a replica never
//    sends an assignment that would outlive its last claim (RlqsBuckets::SetPart).
//
// This file is the decision's arithmetic and encoding (pure) and RlqsReplicas, which runs one sync
// of a replica's buckets against the board.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/rlqs/rlqs_allocator.h"
#include "server/rlqs/rlqs_config.h"
#include "storage/replica_board.h"

namespace ratelimit {

// The division of one bucket's global rate among replicas.
struct RlqsReplicaDecision {
  struct Part {
    double pre_rate = 0;  // before effective_us
    double pre_burst = 0;
    double rate = 0;  // from effective_us on
    double burst = 0;
  };
  double rate = 0;  // the rule's global rate and burst it divides
  double burst = 0;
  int64_t made_us = 0;
  int64_t effective_us = 0;
  std::map<std::string, Part> parts;  // by replica
  // By replica: until when its Envoys may enforce its assignments (its record's held_until_us),
  // and for a replica that is gone (no part) the rate and burst they may hold until then, which
  // the division left out.
  struct Held {
    int64_t until_us = 0;
    double rate = 0;
    double burst = 0;
  };
  std::map<std::string, Held> held;

  // What `replica` may hand out at `now_us`; nullopt when it has no part.
  std::optional<FairShare> PartOf(const std::string& replica, int64_t now_us) const;
  // The most `replica` may be handing out at `now_us` or later under this decision.
  double MostOf(const std::string& replica, int64_t now_us) const;

  std::string Encode() const;
  // nullopt when `text` is not an encoded decision.
  static std::optional<RlqsReplicaDecision> Decode(absl::string_view text);
};

// A replica's record of a bucket: the part it hands out now (0: none), its subscribers' demands
// (nullopt: unknown, counted as unbounded), and the time no assignment it sent or sends before
// its next record outlives (0: unknown, a record of an earlier version).
struct RlqsReplicaRecord {
  double in_force = 0;
  std::vector<std::optional<double>> demands;
  int64_t held_until_us = 0;

  std::string Encode() const;
  static std::optional<RlqsReplicaRecord> Decode(absl::string_view text);
};

// The next decision for `rule` (a kLimit rule) from every replica's record, after `previous`
// (see the top of this file). What a replica may be handing out while the decision spreads is
// the larger of what its record says it hands out and the most `previous` allows it; a part
// grows before settle_us only into what those leave free of the global rate.
RlqsReplicaDecision DecideRlqsReplicas(const RlqsRule& rule,
                                       const std::map<std::string, RlqsReplicaRecord>& records,
                                       const std::optional<RlqsReplicaDecision>& previous,
                                       int64_t now_us, int64_t settle_us);

// The board group of a bucket.
std::string RlqsReplicaGroup(absl::string_view domain, const RlqsBucketKey& bucket);

// One limited bucket as a replica sees it.
struct RlqsReplicaBucket {
  std::string domain;
  RlqsBucketKey key;
  RlqsRule rule;
  std::vector<std::optional<double>> demands;  // of this replica's subscribers
  double in_force = 0;                         // the part this replica hands out now
  int64_t held_until_us = 0;                   // what its record claims (RlqsReplicaRecord)
};

struct RlqsReplicasOptions {
  std::string replica;                     // this replica's member name on the board; unique
  int64_t interval_us = kMicrosPerSecond;  // the reallocation interval
};

// Syncs a replica's buckets with the board. Not thread-safe: one caller at a time.
class RlqsReplicas {
 public:
  RlqsReplicas(RlqsReplicasOptions options, ReplicaBoard& board);

  // The result for one bucket: its part (nullopt: none yet), or the board's error.
  struct Result {
    absl::Status status;
    std::optional<FairShare> part;
  };
  // Writes each bucket's record, decides where this replica leads (or must decide now: see the
  // top of this file), and returns each bucket's part at `now_us`, in the order given.
  std::vector<Result> Sync(absl::Span<const RlqsReplicaBucket> buckets, int64_t now_us);

  // Decisions this replica wrote, and compare-and-sets it lost, since start.
  uint64_t decisions() const { return decisions_; }
  uint64_t lost_races() const { return lost_races_; }
  // Syncs as the leader whose fresh records said the replicas together hand out more than the
  // bucket's global rate (expected 0: the fleet-wide over-assignment check).
  uint64_t over_assignments() const { return over_assignments_; }

 private:
  Result SyncOne(const RlqsReplicaBucket& bucket, int64_t now_us);

  const RlqsReplicasOptions options_;
  ReplicaBoard& board_;
  uint64_t decisions_ = 0;
  uint64_t lost_races_ = 0;
  uint64_t over_assignments_ = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_REPLICAS_H_
