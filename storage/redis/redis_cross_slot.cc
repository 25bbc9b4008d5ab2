#include "storage/redis/redis_cross_slot.h"

// An operation whose keys span slots, without records: one take per slot, in parallel, each under
// a hold; refunds when the operation is denied (RedisStateStore::ApplyAcrossSlots). The helpers
// the record protocols share (redis_cross_slot.h) are defined here too.

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_record_format.h"
#include "storage/redis/redis_router.h"
#include "storage/redis/redis_state_store.h"
#include "storage/store_trace.h"

namespace ratelimit {
namespace redis_internal {

std::string RandomRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

absl::StatusOr<std::vector<std::optional<State>>> ReadStates(const redis::Reply& reply, size_t n) {
  std::vector<std::optional<State>> read(n);
  if (reply.type != redis::Reply::Type::kArray || reply.elements.size() != 2 + 2 * n) {
    return absl::InternalError("FCALL ratelimit_take_held: malformed reply");
  }
  for (size_t k = 0; k < n; ++k) {
    const std::string& text = reply.elements[2 + k].str;
    if (text.empty()) continue;
    read[k] = DecodeRedisState(text);
    if (!read[k]) return absl::InternalError("FCALL ratelimit_take_held: unreadable state");
  }
  return read;
}

// The operation's limits split by slot (`groups`: the keys of each slot); with `with_records`,
// record i goes with limit i (a Settle).
std::vector<SlotPart> SplitBySlot(const Operation& op, const OperationKeys& keys,
                                  const std::vector<std::vector<size_t>>& groups,
                                  bool with_records) {
  std::vector<size_t> group_of_key(keys.keys.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k : groups[g]) group_of_key[k] = g;
  }
  std::vector<SlotPart> parts(groups.size());
  for (size_t i = 0; i < op.limits.size(); ++i) {
    SlotPart& part = parts[group_of_key[keys.slot_of[i]]];
    part.limits.push_back(op.limits[i]);
    part.limit_index.push_back(i);
    if (with_records) {
      part.record_index.push_back(i);
      part.records.push_back(op.records[i]);
    }
  }
  for (SlotPart& part : parts) part.keys = DistinctKeys(part.limits);
  return parts;
}

absl::StatusOr<SlotSnapshot> ParseSnapshot(const absl::StatusOr<redis::Reply>& reply,
                                           const SlotPart& part, int64_t now_us) {
  if (!reply.ok()) return reply.status();
  const size_t n = part.keys.keys.size();
  const size_t total = part.redis_keys.size();
  if (reply->type != redis::Reply::Type::kArray || reply->elements.size() != total) {
    return ErrorReply("MGET", *reply);
  }
  SlotSnapshot snap;
  snap.states.resize(n);
  snap.records.resize(total - n);
  snap.raw.resize(total);
  for (size_t i = 0; i < total; ++i) {
    const redis::Reply& r = reply->elements[i];
    if (r.type != redis::Reply::Type::kString) continue;
    snap.raw[i] = r.str;
    if (i < n) {
      snap.states[i] = DecodeRedisState(r.str);
      if (!snap.states[i]) {
        return absl::InternalError(absl::StrCat("unreadable state at ", part.redis_keys[i]));
      }
      continue;
    }
    absl::StatusOr<std::optional<std::string>> value =
        DecodeRecord(r.str, now_us, part.redis_keys[i]);
    if (!value.ok()) return value.status();
    snap.records[i - n] = *std::move(value);
  }
  return snap;
}

}  // namespace redis_internal

using redis_internal::ErrorReply;
using redis_internal::RandomRequestId;
using redis_internal::ReadStates;

// One request across slots between its takes and its answer (ApplyAcrossSlotsAsync).
struct RedisStateStore::CrossSlotCall {
  // Per slot: its limits (in operation order), their positions in the operation, its keys and
  // its hold key.
  struct Group {
    std::vector<LimitOp> limits;
    std::vector<size_t> limit_index;
    OperationKeys keys;
    std::vector<std::string> redis_keys;
    std::string hold_key;
  };
  std::vector<LimitOp> limits;
  Mode mode = Mode::kConsume;
  OperationKeys keys;
  std::vector<std::vector<size_t>> groups;  // key indices of each slot
  std::vector<Group> parts;
  std::string hold_ttl_ms;
  StoreTracer* tracer = nullptr;  // of the caller's thread; lives until `done` has run
  ApplyDone done;
  // Each take's reply is written by its own callback; the last one to arrive (pending reaching
  // 0, acquire-release) reads them all.
  std::vector<absl::StatusOr<redis::Reply>> takes;
  std::atomic<size_t> pending{0};
  // After the takes, when some slot took and the request is denied: the answer, sent once every
  // refund has been answered.
  absl::StatusOr<Outcome> answer = absl::UnknownError("unanswered");
  std::atomic<size_t> refunds_pending{0};
};

absl::StatusOr<Outcome> RedisStateStore::ApplyAcrossSlots(
    const Operation& op, const OperationKeys& keys, const std::vector<std::string>& redis_keys,
    const std::vector<std::vector<size_t>>& groups, std::optional<int64_t> now) {
  absl::Notification answered;
  absl::StatusOr<Outcome> result = absl::UnknownError("unanswered");
  ApplyAcrossSlotsAsync(op, keys, redis_keys, groups, now, [&](absl::StatusOr<Outcome> outcome) {
    result = std::move(outcome);
    answered.Notify();
  });
  answered.WaitForNotification();  // every command has a deadline: it is answered
  return result;
}

void RedisStateStore::ApplyAcrossSlotsAsync(const Operation& op, const OperationKeys& keys,
                                            const std::vector<std::string>& redis_keys,
                                            const std::vector<std::vector<size_t>>& groups,
                                            std::optional<int64_t> now, ApplyDone done) {
  auto call = std::make_shared<CrossSlotCall>();
  const size_t n_groups = groups.size();
  call->limits.assign(op.limits.begin(), op.limits.end());
  call->mode = op.mode;
  call->keys = keys;
  call->groups = groups;
  call->hold_ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(options_.hold_ttl));
  call->tracer = CurrentStoreTracer();
  call->done = std::move(done);
  call->takes.assign(n_groups, absl::UnknownError("no reply"));
  call->pending.store(n_groups, std::memory_order_relaxed);
  const std::string request_id = RandomRequestId();
  std::vector<size_t> group_of_key(keys.keys.size());
  for (size_t g = 0; g < n_groups; ++g) {
    for (size_t k : groups[g]) group_of_key[k] = g;
  }
  call->parts.resize(n_groups);
  for (size_t i = 0; i < op.limits.size(); ++i) {
    CrossSlotCall::Group& part = call->parts[group_of_key[keys.slot_of[i]]];
    part.limits.push_back(op.limits[i]);
    part.limit_index.push_back(i);
  }
  std::vector<std::vector<std::string>> commands(n_groups);
  for (size_t g = 0; g < n_groups; ++g) {
    CrossSlotCall::Group& part = call->parts[g];
    part.keys = DistinctKeys(part.limits);
    for (const StateKey& k : part.keys.keys) part.redis_keys.push_back(KeyFor(k));
    part.hold_key = absl::StrCat(options_.key_prefix, "{", redis::HashTagOf(part.redis_keys[0]),
                                 "}hold:", request_id);
    commands[g] =
        RedisApplyCommand(Operation{part.limits, op.mode}, part.keys, part.redis_keys, now);
    if (op.mode != Mode::kCheck) {
      // FCALL ratelimit_apply n keys... args... -> FCALL ratelimit_take_held n+1 keys... hold ttl
      std::vector<std::string>& argv = commands[g];
      const size_t n = part.redis_keys.size();
      argv[1] = std::string(kRedisTakeHeldFunction);
      argv[2] = absl::StrCat(n + 1);
      argv.insert(argv.begin() + 3 + n, {part.hold_key, call->hold_ttl_ms});
    }
  }
  // Every command is built before the first is sent: a reply may arrive (and finish the call)
  // before the last Send returns.
  for (size_t g = 0; g < n_groups; ++g) {
    const std::string routing_key = call->parts[g].redis_keys[0];
    router_->SendVia(call->tracer, routing_key, std::move(commands[g]),
                     [this, call, g](absl::StatusOr<redis::Reply> reply) {
                       call->takes[g] = std::move(reply);
                       if (call->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                         OnCrossSlotTakes(std::move(call));
                       }
                     });
  }
}

void RedisStateStore::OnCrossSlotTakes(std::shared_ptr<CrossSlotCall> call) {
  const size_t n_groups = call->parts.size();
  const bool check = call->mode == Mode::kCheck;
  const Operation op{call->limits, call->mode};
  // What each slot answered: its outcome (checked against the algebra) and the states it read.
  absl::Status failure;
  bool allowed = true;
  int64_t decided_at = 0;
  std::vector<std::optional<Outcome>> outcomes(n_groups);
  std::vector<std::optional<State>> read(call->keys.keys.size());
  std::vector<bool> refund(n_groups, false);
  for (size_t g = 0; g < n_groups; ++g) {
    const CrossSlotCall::Group& part = call->parts[g];
    const absl::StatusOr<redis::Reply>& reply = call->takes[g];
    absl::StatusOr<Outcome> outcome =
        reply.ok() ? RedisApplyOutcome(Operation{part.limits, call->mode}, part.keys, *reply)
                   : absl::StatusOr<Outcome>(reply.status());
    if (!outcome.ok()) {
      if (failure.ok()) failure = outcome.status();
      // The take may have run (a timeout) or not: the refund settles both.
      refund[g] = !check;
      allowed = false;
      continue;
    }
    absl::StatusOr<std::vector<std::optional<State>>> states =
        ReadStates(*reply, part.keys.keys.size());
    if (!states.ok()) {
      // Not a reply of ours: whatever it took is settled by the refund, as for a failure.
      if (failure.ok()) failure = states.status();
      refund[g] = !check;
      allowed = false;
      continue;
    }
    for (size_t k = 0; k < part.keys.keys.size(); ++k) {
      (*states)[k].swap(read[call->groups[g][k]]);
    }
    decided_at = std::max(decided_at, outcome->now_us);
    refund[g] = outcome->allowed && !check;
    allowed = allowed && outcome->allowed;
    outcomes[g] = *std::move(outcome);
  }
  if (allowed) {
    Outcome result;
    result.allowed = true;
    result.now_us = decided_at;
    result.decisions.resize(call->limits.size());
    for (size_t g = 0; g < n_groups; ++g) {
      for (size_t j = 0; j < call->parts[g].limit_index.size(); ++j) {
        result.decisions[call->parts[g].limit_index[j]] = outcomes[g]->decisions[j];
      }
    }
    std::move(call->done)(std::move(result));
    return;
  }
  if (!failure.ok()) {
    call->answer = failure;
  } else {
    // The denial as the algebra gives it for the states the slots read (each slot's own state is
    // exactly what its FCALL saw; the time is the latest of the slots').
    std::vector<std::optional<State>> writes(call->keys.keys.size());
    Outcome result = DecideOperation(op, call->keys, read, decided_at, absl::MakeSpan(writes));
    result.allowed = false;
    call->answer = std::move(result);
  }
  // Give back what the slots that took took, and settle the unknown ones; answer once every
  // refund is answered. A refund that fails leaves its tokens taken until they refill (an
  // under-grant, never more).
  std::vector<size_t> to_refund;
  for (size_t g = 0; g < n_groups; ++g) {
    if (refund[g]) to_refund.push_back(g);
  }
  if (to_refund.empty()) {
    std::move(call->done)(std::move(call->answer));
    return;
  }
  call->refunds_pending.store(to_refund.size(), std::memory_order_relaxed);
  std::vector<std::vector<std::string>> commands;
  for (size_t g : to_refund) {
    const CrossSlotCall::Group& part = call->parts[g];
    std::vector<std::string> argv = {"FCALL", std::string(kRedisRefundFunction),
                                     absl::StrCat(part.redis_keys.size() + 1)};
    argv.insert(argv.end(), part.redis_keys.begin(), part.redis_keys.end());
    argv.push_back(part.hold_key);
    argv.push_back(call->hold_ttl_ms);
    commands.push_back(std::move(argv));
  }
  for (size_t r = 0; r < to_refund.size(); ++r) {
    const std::string routing_key = call->parts[to_refund[r]].redis_keys[0];
    router_->SendVia(call->tracer, routing_key, std::move(commands[r]),
                     [call](absl::StatusOr<redis::Reply>) {
                       if (call->refunds_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                         std::move(call->done)(std::move(call->answer));
                       }
                     });
  }
}

}  // namespace ratelimit
