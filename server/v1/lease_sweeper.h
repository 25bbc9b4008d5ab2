#ifndef RATELIMIT_SERVER_V1_LEASE_SWEEPER_H_
#define RATELIMIT_SERVER_V1_LEASE_SWEEPER_H_

// LeaseSweeper: when the leak sweep runs (docs/leases.md, "The leak sweep"). The server calls
// RunOnce every --lease_sweep_interval; the pass itself is RateLimitServiceImpl::
// SweepLeakedLeases.
//
// Replicas that share a store (Redis: ReplicaBoard non-null) sweep it once per interval between
// them, not once each: a pass reads every lease set of the store (a SCAN of each primary), so a
// fleet of N replicas sweeping on their own would cost Redis N passes an interval for the same
// result. Before a pass, the replica asks the board for the lead of the group "leases:sweep",
// held for one interval; the replica that holds it sweeps, the others skip. A replica that dies
// holding it gives it up when the interval ends, and the next replica to ask takes it, so a pass
// is at most two intervals after the one before (at most 60 s, the time a store keeps an expired
// lease: no leak is missed while a replica is left). Which replica sweeps may change from one
// interval to the next. One process owning its store (RocksDB, memory) has no board and sweeps
// every interval.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "storage/clock.h"
#include "storage/replica_board.h"

namespace ratelimit {

class LeaseSweeper {
 public:
  struct Options {
    int64_t interval_us = 0;  // > 0
    std::string member;       // this replica's name on the board (NewReplicaName)
  };
  // A pass: how many leases it counted, or its error (UNIMPLEMENTED: the store keeps no leases).
  using SweepFn = std::function<absl::StatusOr<int64_t>()>;
  // `board` may be null (no replicas to share the sweep with); it and `clock` must outlive this.
  LeaseSweeper(Options options, ReplicaBoard* board, const Clock& clock, SweepFn sweep);

  enum class Result { kSwept, kSkipped, kFailed };
  // One turn: asks for the lead (with a board), then sweeps when this replica holds it. A board
  // or store error is logged and counted as kFailed; the next turn tries again.
  Result RunOnce();

  // Turns by result, for ratelimit_lease_sweeps_total.
  uint64_t swept() const { return swept_.load(std::memory_order_relaxed); }
  uint64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

  static constexpr char kBoardGroup[] = "leases:sweep";

 private:
  Result Count(Result r);

  const Options options_;
  ReplicaBoard* const board_;
  const Clock& clock_;
  const SweepFn sweep_;
  std::atomic<uint64_t> swept_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> failed_{0};
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_LEASE_SWEEPER_H_
