#include "storage/apply.h"

#include "absl/container/inlined_vector.h"

namespace ratelimit {

OperationKeys DistinctKeys(absl::Span<const LimitOp> limits) {
  OperationKeys out;
  out.slot_of.resize(limits.size());
  for (size_t i = 0; i < limits.size(); ++i) {
    size_t slot = 0;
    while (slot < out.keys.size() && !(out.keys[slot] == limits[i].key)) ++slot;
    if (slot == out.keys.size()) out.keys.push_back(limits[i].key);
    out.slot_of[i] = slot;
  }
  return out;
}

Outcome DecideOperation(const Operation& op, const OperationKeys& keys,
                        absl::Span<const std::optional<State>> current, int64_t now_us,
                        absl::Span<std::optional<State>> writes) {
  Outcome out;
  out.now_us = now_us;
  out.decisions.resize(op.limits.size());
  absl::InlinedVector<std::optional<State>, 4> working(current.begin(), current.end());
  bool all_allowed = true;
  for (size_t i = 0; i < op.limits.size(); ++i) {
    const LimitOp& l = op.limits[i];
    const size_t slot = keys.slot_of[i];
    if (l.settle) {
      Settled settled =
          Settle(l.config, LimitId{l.key.name, l.key.key}, working[slot], l.settle->taken,
                 l.settle->used, l.settle->taken_at_us, now_us, l.settle->value_after_take);
      Decision d;
      d.allowed = true;
      d.value = settled.value;
      d.retry_at_us = settled.paid_at_us;
      d.next = settled.next;
      working[slot] = settled.next;
      d.settled = std::move(settled);
      out.decisions[i] = std::move(d);
      continue;
    }
    Decision d =
        Decide(l.config, LimitId{l.key.name, l.key.key}, working[slot], l.count, op.mode, now_us);
    if (d.allowed && op.mode != Mode::kCheck) working[slot] = d.next;
    all_allowed = all_allowed && d.allowed;
    out.decisions[i] = std::move(d);
  }
  out.allowed = all_allowed;
  if (all_allowed) {
    if (op.mode != Mode::kCheck) {
      for (size_t s = 0; s < keys.keys.size(); ++s) writes[s] = working[s];
    }
    return out;
  }
  // Denied: report balances as they are, since nothing is taken.
  for (size_t i = 0; i < op.limits.size(); ++i) {
    Decision& d = out.decisions[i];
    if (d.allowed && op.mode != Mode::kCheck) {
      const LimitOp& l = op.limits[i];
      d.value = Decide(l.config, LimitId{l.key.name, l.key.key}, current[keys.slot_of[i]], l.count,
                       Mode::kCheck, now_us)
                    .value;
    }
  }
  return out;
}

absl::StatusOr<Outcome> ApplyWithUpdate(StateStore& store, const Operation& op,
                                        const Clock& clock) {
  const OperationKeys keys = DistinctKeys(op.limits);
  Outcome outcome;
  absl::Status status =
      store.Update(keys.keys,
                   [&](absl::Span<const std::optional<State>> current,
                       absl::Span<std::optional<State>> writes) -> absl::Status {
                     // Read the clock inside the transaction: a decision never uses a time older
                     // than the state it reads, except when the wall clock itself steps back.
                     outcome = DecideOperation(op, keys, current, clock.NowMicros(), writes);
                     return absl::OkStatus();
                   });
  if (!status.ok()) return status;
  return outcome;
}

absl::StatusOr<Outcome> ApplyWithRecords(StateStore& store, const Operation& op,
                                         const Clock& clock) {
  const OperationKeys keys = DistinctKeys(op.limits);
  Outcome outcome;
  absl::Status status = store.UpdateWithRecords(
      keys.keys, op.records, clock,
      [&](absl::Span<const std::optional<State>> current,
          absl::Span<const std::optional<std::string>> records,
          absl::Span<std::optional<State>> writes,
          absl::Span<std::optional<std::string>> record_writes) -> absl::Status {
        outcome = Outcome();
        for (size_t r = 0; r < records.size(); ++r) {
          if (records[r]) {
            outcome.now_us = clock.NowMicros();
            outcome.existing_record = r;
            outcome.existing_value = *records[r];
            return absl::OkStatus();
          }
        }
        outcome = DecideOperation(op, keys, current, clock.NowMicros(), writes);
        if (op.mode != Mode::kCheck) {
          const std::string value = op.record_value ? op.record_value(outcome) : std::string();
          for (auto& w : record_writes) w = value;
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return outcome;
}

}  // namespace ratelimit
