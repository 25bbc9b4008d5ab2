#ifndef RATELIMIT_STORAGE_REDIS_REDIS_CROSS_SLOT_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_CROSS_SLOT_H_

// The pieces of the Redis store's protocols for an operation whose keys span the slots of a Redis
// Cluster (redis_state_store.h): the operation split by slot, what one slot's MGET read, what a
// slot's take read, and the random ids that name a call's holds and records. Internal to the
// Redis backend.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/apply.h"
#include "storage/operation.h"
#include "storage/redis/cluster/redis_reply.h"

namespace ratelimit::redis_internal {

// 128 random bits in hex: names one call's holds, claims and records.
std::string RandomRequestId();

// The states a ratelimit_apply (or ratelimit_take_held) reply says the function read, one per
// key.
absl::StatusOr<std::vector<std::optional<State>>> ReadStates(const redis::Reply& reply, size_t n);

// The limits, states and records of one slot of an operation whose keys span slots.
struct SlotPart {
  std::vector<LimitOp> limits;      // in operation order
  std::vector<size_t> limit_index;  // their positions in the operation
  OperationKeys keys;
  std::vector<std::string> redis_keys;  // the states, then the records
  std::vector<size_t> record_index;     // the records' positions in the operation
  std::vector<RecordSpec> records;
};

// The operation's limits split by slot (`groups`: the keys of each slot); with `with_records`,
// record i goes with limit i (a Settle).
std::vector<SlotPart> SplitBySlot(const Operation& op, const OperationKeys& keys,
                                  const std::vector<std::vector<size_t>>& groups,
                                  bool with_records);

// What one MGET of a SlotPart's keys read.
struct SlotSnapshot {
  std::vector<std::optional<State>> states;
  std::vector<std::optional<std::string>> records;
  std::vector<std::string> raw;  // as read, "" for none: the states, then the records
};

// What `reply` (to an MGET of `part.redis_keys`) read, records as of `now_us`.
absl::StatusOr<SlotSnapshot> ParseSnapshot(const absl::StatusOr<redis::Reply>& reply,
                                           const SlotPart& part, int64_t now_us);

}  // namespace ratelimit::redis_internal

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_CROSS_SLOT_H_
