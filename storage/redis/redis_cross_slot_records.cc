#include "storage/redis/redis_state_store.h"

// Operations with records whose keys span slots (RedisStateStore::ApplyRecorded): a Settle, each
// receipt's record in the slot of its state, committed slot by slot; and a request_id, whose
// record is claimed first, then the slots take under holds that remember each take. See the
// header for the protocols and their bounds.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_cross_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_record_format.h"
#include "storage/redis/redis_router.h"
#include "storage/status_util.h"

namespace ratelimit {

using redis_internal::Claim;
using redis_internal::DecodeRecord;
using redis_internal::EncodeClaim;
using redis_internal::EncodeRecord;
using redis_internal::ErrorReply;
using redis_internal::ParseClaim;
using redis_internal::ParseSnapshot;
using redis_internal::RandomRequestId;
using redis_internal::ReadStates;
using redis_internal::RecordExpiryMs;
using redis_internal::Replies;
using redis_internal::SlotGroups;
using redis_internal::SlotPart;
using redis_internal::SlotSnapshot;
using redis_internal::SplitBySlot;

absl::StatusOr<Outcome> RedisStateStore::ApplyRecorded(const Operation& op, const Clock& clock) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  if (router_->SingleNode()) return ApplyWithRecords(*this, op, clock);
  const OperationKeys keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(keys.keys.size());
  for (const StateKey& k : keys.keys) redis_keys.push_back(KeyFor(k));
  const std::vector<std::vector<size_t>> groups = SlotGroups(redis_keys);
  const size_t settles = static_cast<size_t>(std::count_if(
      op.limits.begin(), op.limits.end(), [](const LimitOp& l) { return l.settle.has_value(); }));
  // A request_id's record lives in the slot of its own key, so that every request with the id
  // meets it whatever its limits; a spent receipt's record lives with its state.
  const bool request_id = settles == 0 && op.records.size() == 1 && op.mode != Mode::kCheck;
  if (groups.size() == 1) {
    // One slot overall: one optimistic transaction (UpdateWithRecords names the record by the
    // slot's canonical tag, the same key as RedisRequestRecordKey).
    if (!request_id ||
        redis::KeySlot(RedisRequestRecordKey(options_.key_prefix, op.records[0].key)) ==
            redis::KeySlot(redis_keys[0])) {
      return ApplyWithRecords(*this, op, clock);
    }
    return RecordedAcrossSlots(op, keys, redis_keys, groups, clock);
  }
  if (settles == op.limits.size() && op.records.size() == op.limits.size() &&
      op.mode != Mode::kCheck) {
    return SettleAcrossSlots(op, keys, redis_keys, groups, clock);
  }
  if (request_id) return RecordedAcrossSlots(op, keys, redis_keys, groups, clock);
  return NotOneTransactionError(
      "the Redis store: on a Redis Cluster, an operation with records whose keys span slots must "
      "be a Settle (one record per settlement) or carry one record (a request_id)");
}

absl::StatusOr<Outcome> RedisStateStore::SettleAcrossSlots(
    const Operation& op, const OperationKeys& keys, const std::vector<std::string>& redis_keys,
    const std::vector<std::vector<size_t>>& groups, const Clock& clock) {
  (void)redis_keys;
  std::vector<SlotPart> parts = SplitBySlot(op, keys, groups, /*with_records=*/true);
  for (SlotPart& part : parts) {
    for (const StateKey& k : part.keys.keys) part.redis_keys.push_back(KeyFor(k));
    const absl::string_view tag = redis::SlotTag(redis::KeySlot(part.redis_keys[0]));
    for (const RecordSpec& r : part.records) {
      part.redis_keys.push_back(RedisRecordKey(options_.key_prefix, tag, r.key));
    }
  }
  // Every record this call writes carries its random id: a re-read recognises its own commit.
  const std::string mine = absl::StrCat("settle ", RandomRequestId());
  std::vector<std::optional<SlotSnapshot>> snaps(parts.size());
  // Reads the slots `which` (in parallel) into snaps.
  auto read = [&](const std::vector<size_t>& which) -> absl::Status {
    Replies replies(which.size());
    for (size_t t = 0; t < which.size(); ++t) {
      const SlotPart& part = parts[which[t]];
      std::vector<std::string> get = {"MGET"};
      get.insert(get.end(), part.redis_keys.begin(), part.redis_keys.end());
      router_->Send(part.redis_keys[0], std::move(get), replies.For(t));
    }
    std::vector<absl::StatusOr<redis::Reply>>& got = replies.Wait();
    const int64_t now_us = clock.NowMicros();
    for (size_t t = 0; t < which.size(); ++t) {
      absl::StatusOr<SlotSnapshot> snap = ParseSnapshot(got[t], parts[which[t]], now_us);
      if (!snap.ok()) return snap.status();
      snaps[which[t]] = *std::move(snap);
    }
    return absl::OkStatus();
  };
  // The first record (in operation order) of the slots `which` present with another value than
  // `mine`, as an Outcome; nullopt when there is none.
  auto spent = [&](const std::vector<size_t>& which) -> std::optional<Outcome> {
    std::optional<Outcome> found;
    for (size_t g : which) {
      for (size_t r = 0; r < parts[g].records.size(); ++r) {
        const std::optional<std::string>& value = snaps[g]->records[r];
        if (!value || *value == mine) continue;
        const size_t index = parts[g].record_index[r];
        if (!found || index < *found->existing_record) {
          found = Outcome();
          found->existing_record = index;
          found->existing_value = *value;
        }
      }
    }
    if (found) found->now_us = clock.NowMicros();
    return found;
  };

  std::vector<size_t> todo(parts.size());
  for (size_t g = 0; g < parts.size(); ++g) todo[g] = g;
  if (absl::Status s = read(todo); !s.ok()) return s;
  if (std::optional<Outcome> refused = spent(todo)) return *std::move(refused);

  std::vector<Outcome> outcomes(parts.size());
  for (int attempt = 0; attempt < kMaxUpdateAttempts && !todo.empty(); ++attempt) {
    // Decide each slot still to do on its snapshot and commit it, slots in parallel.
    Replies commits(todo.size());
    for (size_t t = 0; t < todo.size(); ++t) {
      const size_t g = todo[t];
      const SlotPart& part = parts[g];
      const SlotSnapshot& snap = *snaps[g];
      const size_t n = part.keys.keys.size();
      const size_t m = part.records.size();
      std::vector<std::optional<State>> writes(n);
      outcomes[g] = DecideOperation(Operation{part.limits, Mode::kConsume}, part.keys, snap.states,
                                    clock.NowMicros(), absl::MakeSpan(writes));
      std::vector<std::string> commit = {"FCALL", std::string(kRedisCommitFunction),
                                         absl::StrCat(n + m)};
      commit.insert(commit.end(), part.redis_keys.begin(), part.redis_keys.end());
      commit.push_back(absl::StrCat(n));
      commit.insert(commit.end(), snap.raw.begin(), snap.raw.begin() + n);
      for (size_t i = 0; i < n; ++i) {
        commit.push_back(writes[i] ? EncodeRedisState(*writes[i]) : "");
      }
      commit.insert(commit.end(), snap.raw.begin() + n, snap.raw.end());
      for (const RecordSpec& r : part.records) {
        commit.push_back(EncodeRecord(r.expires_at_us, mine));
      }
      for (const RecordSpec& r : part.records) {
        commit.push_back(absl::StrCat(RecordExpiryMs(r.expires_at_us)));
      }
      router_->Send(part.redis_keys[0], std::move(commit), commits.For(t));
    }
    std::vector<absl::StatusOr<redis::Reply>>& done = commits.Wait();
    // A slot whose commit conflicted, or whose answer is unknown, is read again.
    std::vector<size_t> again;
    for (size_t t = 0; t < todo.size(); ++t) {
      if (done[t].ok() && done[t]->type == redis::Reply::Type::kInteger && done[t]->integer == 1) {
        continue;
      }
      if (done[t].ok() && done[t]->type != redis::Reply::Type::kInteger) {
        return ErrorReply("FCALL ratelimit_commit", *done[t]);
      }
      again.push_back(todo[t]);
    }
    if (again.empty()) {
      todo.clear();
      break;
    }
    if (absl::Status s = read(again); !s.ok()) return s;
    // Another call spent a receipt of these slots (two Settles racing on it): refuse it the way
    // a spent receipt is refused; the slots already committed stay committed.
    if (std::optional<Outcome> refused = spent(again)) return *std::move(refused);
    todo.clear();
    for (size_t g : again) {
      // Carrying our records: the commit went through after all (its answer was lost).
      const bool ours = !parts[g].records.empty() && snaps[g]->records[0] == mine;
      if (!ours) todo.push_back(g);
    }
  }
  if (!todo.empty()) return absl::AbortedError("the Redis store: too many conflicting writes");
  Outcome result;
  result.allowed = true;
  result.decisions.resize(op.limits.size());
  for (size_t g = 0; g < parts.size(); ++g) {
    result.now_us = std::max(result.now_us, outcomes[g].now_us);
    for (size_t j = 0; j < parts[g].limit_index.size(); ++j) {
      result.decisions[parts[g].limit_index[j]] = std::move(outcomes[g].decisions[j]);
    }
  }
  return result;
}

absl::StatusOr<Outcome> RedisStateStore::RecordedAcrossSlots(
    const Operation& op, const OperationKeys& keys, const std::vector<std::string>& redis_keys,
    const std::vector<std::vector<size_t>>& groups, const Clock& clock) {
  (void)redis_keys;
  const RecordSpec& record = op.records[0];
  // The record lives in the slot of its own key, whatever the slots of the states.
  const std::string record_key = RedisRequestRecordKey(options_.key_prefix, record.key);
  const std::string expiry_ms = absl::StrCat(RecordExpiryMs(record.expires_at_us));
  const std::string owner = RandomRequestId();
  const int64_t now_us = clock.NowMicros();
  const int64_t lease_until_us = now_us + absl::ToInt64Microseconds(options_.claim_lease);
  // Replaces the record's bytes `from` by `to` when it still holds `from` (ratelimit_commit).
  auto swap = [&](const std::string& from, const std::string& to) -> absl::StatusOr<bool> {
    absl::StatusOr<redis::Reply> done = Command(
        record_key,
        {"FCALL", std::string(kRedisCommitFunction), "1", record_key, "0", from, to, expiry_ms});
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger) {
      return ErrorReply("FCALL ratelimit_commit", *done);
    }
    return done->integer == 1;
  };
  const absl::Status in_progress = absl::AbortedError(
      "request_id: a request with this request_id is in progress elsewhere; retry");

  // 1. Claim the request_id.
  int64_t generation = 1;
  std::string incarnation = owner;
  std::string claim = EncodeClaim(generation, lease_until_us, owner, incarnation);
  absl::StatusOr<redis::Reply> got =
      Command(record_key, {"SET", record_key, claim, "NX", "GET", "PXAT", expiry_ms});
  if (!got.ok()) return got.status();
  if (got->type == redis::Reply::Type::kString) {
    const std::string old = got->str;
    if (std::optional<Claim> pending = ParseClaim(old)) {
      if (pending->lease_until_us > now_us) return in_progress;
      generation = pending->generation + 1;  // its owner is gone: take over
      incarnation = pending->incarnation;
    } else {
      absl::StatusOr<std::optional<std::string>> value = DecodeRecord(old, now_us, record_key);
      if (!value.ok()) return value.status();
      if (*value) {
        Outcome existing;
        existing.now_us = now_us;
        existing.existing_record = 0;
        existing.existing_value = **value;
        return existing;
      }
    }
    claim = EncodeClaim(generation, lease_until_us, owner, incarnation);
    absl::StatusOr<bool> swapped = swap(old, claim);
    if (!swapped.ok()) return swapped.status();
    if (!*swapped) return in_progress;
  } else if (got->type != redis::Reply::Type::kNil) {
    return ErrorReply("SET NX GET", *got);
  }
  // Ends the lease at once, so that a retry takes over without waiting (the holds stay).
  auto release = [&](absl::Status error) {
    (void)swap(claim, EncodeClaim(generation, 0, owner, incarnation));
    return error;
  };

  // 2. Take per slot under holds named after the request (its record key, its limits and the
  // claim's incarnation).
  std::string body = absl::StrCat(static_cast<int>(op.mode));
  for (const LimitOp& l : op.limits) {
    absl::StrAppend(&body, "|", static_cast<int>(l.key.source), ":", l.key.name.size(), ":",
                    l.key.name, l.key.key.size(), ":", l.key.key, ":", l.count);
  }
  const std::string hold_name =
      absl::StrCat("hold:r", absl::BytesToHexString(record.key), ":",
                   absl::Hex(StableKeyHash(record.key, body), absl::kZeroPad16),
                   incarnation.empty() ? "" : ":", incarnation);
  const std::string hold_ttl_ms =
      absl::StrCat(std::max<int64_t>(1, RecordExpiryMs(record.expires_at_us) - now_us / 1000));
  const std::string generation_arg = absl::StrCat(generation);
  std::optional<int64_t> now_override;
  if (options_.clock_override != nullptr) now_override = options_.clock_override->NowMicros();
  std::vector<SlotPart> parts = SplitBySlot(op, keys, groups, /*with_records=*/false);
  std::vector<std::string> hold_keys(parts.size());
  Replies takes(parts.size());
  for (size_t g = 0; g < parts.size(); ++g) {
    SlotPart& part = parts[g];
    for (const StateKey& k : part.keys.keys) part.redis_keys.push_back(KeyFor(k));
    hold_keys[g] = absl::StrCat(options_.key_prefix, "{",
                                redis::SlotTag(redis::KeySlot(part.redis_keys[0])), "}", hold_name);
    std::vector<std::string> argv = RedisApplyCommand(Operation{part.limits, op.mode}, part.keys,
                                                      part.redis_keys, now_override);
    const size_t n = part.redis_keys.size();
    argv[1] = std::string(kRedisTakeRecordedFunction);
    argv[2] = absl::StrCat(n + 1);
    argv.insert(argv.begin() + 3 + n, {hold_keys[g], hold_ttl_ms, generation_arg});
    router_->Send(part.redis_keys[0], std::move(argv), takes.For(g));
  }
  std::vector<absl::StatusOr<redis::Reply>>& replies = takes.Wait();
  if (options_.stop_after_takes_for_tests && options_.stop_after_takes_for_tests()) {
    return absl::UnavailableError("stopped after the takes (test)");
  }

  absl::Status failure;
  bool allowed = true;
  int64_t decided_at = 0;
  std::vector<std::optional<Outcome>> outcomes(parts.size());
  std::vector<std::optional<State>> read(keys.keys.size());
  std::vector<bool> refund(parts.size(), false);
  std::vector<size_t> unread;  // refunded by an earlier run of this generation or a later one
  for (size_t g = 0; g < parts.size(); ++g) {
    const SlotPart& part = parts[g];
    if (replies[g].ok() && replies[g]->type == redis::Reply::Type::kError &&
        absl::StartsWith(replies[g]->str, "REFUNDED")) {
      allowed = false;
      unread.push_back(g);
      continue;
    }
    absl::StatusOr<Outcome> outcome =
        replies[g].ok() ? RedisApplyOutcome(Operation{part.limits, op.mode}, part.keys, *replies[g])
                        : absl::StatusOr<Outcome>(replies[g].status());
    if (!outcome.ok()) {
      if (failure.ok()) failure = outcome.status();
      refund[g] = true;  // the take may have run (a timeout) or not: the refund settles both
      allowed = false;
      continue;
    }
    absl::StatusOr<std::vector<std::optional<State>>> states =
        ReadStates(*replies[g], part.keys.keys.size());
    if (!states.ok()) return release(states.status());
    for (size_t k = 0; k < part.keys.keys.size(); ++k) {
      (*states)[k].swap(read[groups[g][k]]);
    }
    decided_at = std::max(decided_at, outcome->now_us);
    refund[g] = outcome->allowed;
    allowed = allowed && outcome->allowed;
    outcomes[g] = *std::move(outcome);
  }
  Outcome result;
  if (allowed) {
    result.allowed = true;
    result.now_us = decided_at;
    result.decisions.resize(op.limits.size());
    for (size_t g = 0; g < parts.size(); ++g) {
      for (size_t j = 0; j < parts[g].limit_index.size(); ++j) {
        result.decisions[parts[g].limit_index[j]] = outcomes[g]->decisions[j];
      }
    }
  } else {
    // Give back what the slots that took took, and settle the unknown ones; read the states of
    // the slots refunded before, for the denial.
    std::vector<size_t> to_refund;
    for (size_t g = 0; g < parts.size(); ++g) {
      if (refund[g]) to_refund.push_back(g);
    }
    Replies refunds(to_refund.size() + unread.size());
    for (size_t r = 0; r < to_refund.size(); ++r) {
      const SlotPart& part = parts[to_refund[r]];
      std::vector<std::string> argv = {"FCALL", std::string(kRedisRefundFunction),
                                       absl::StrCat(part.redis_keys.size() + 1)};
      argv.insert(argv.end(), part.redis_keys.begin(), part.redis_keys.end());
      argv.push_back(hold_keys[to_refund[r]]);
      argv.push_back(hold_ttl_ms);
      argv.push_back(generation_arg);
      router_->Send(part.redis_keys[0], std::move(argv), refunds.For(r));
    }
    for (size_t u = 0; u < unread.size(); ++u) {
      const SlotPart& part = parts[unread[u]];
      std::vector<std::string> get = {"MGET"};
      get.insert(get.end(), part.redis_keys.begin(), part.redis_keys.end());
      router_->Send(part.redis_keys[0], std::move(get), refunds.For(to_refund.size() + u));
    }
    std::vector<absl::StatusOr<redis::Reply>>& answered = refunds.Wait();
    if (!failure.ok()) return release(failure);
    for (size_t u = 0; u < unread.size(); ++u) {
      absl::StatusOr<SlotSnapshot> snap =
          ParseSnapshot(answered[to_refund.size() + u], parts[unread[u]], now_us);
      if (!snap.ok()) return release(snap.status());
      for (size_t k = 0; k < snap->states.size(); ++k) {
        snap->states[k].swap(read[groups[unread[u]][k]]);
      }
    }
    if (decided_at == 0) decided_at = now_override.value_or(clock.NowMicros());
    std::vector<std::optional<State>> writes(keys.keys.size());
    result = DecideOperation(op, keys, read, decided_at, absl::MakeSpan(writes));
    result.allowed = false;
  }

  // 3. The answer replaces the claim, unless another owner took the claim over meanwhile.
  const std::string value = op.record_value ? op.record_value(result) : std::string();
  absl::StatusOr<bool> recorded = swap(claim, EncodeRecord(record.expires_at_us, value));
  if (!recorded.ok()) return recorded.status();
  if (!*recorded) return in_progress;
  return result;
}

}  // namespace ratelimit
