#ifndef RATELIMIT_STORAGE_ALGEBRA_H_
#define RATELIMIT_STORAGE_ALGEBRA_H_

// The rate-limit algebra: pure functions from (config, state, request, now) to a decision and a
// new state. No I/O, no clock reads, no protos. Formulas: README.md "Semantics".

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

#include "storage/limit_config.h"

namespace ratelimit {

// The stored state of one (name, key). A missing state means "full".
struct State {
  // Tokens available at `ts_us`; negative while reservations owe tokens.
  double value = 0;
  // Token bucket: when `value` was computed. Fixed window: start of the window `value` is for.
  int64_t ts_us = 0;
  // The earliest time at which the state has refilled to capacity and so is equivalent to a
  // missing one; the store's garbage collection drops it after this time. Derived, not an input
  // of any decision.
  int64_t full_at_us = 0;
  // Fixed window: the capacity `value` is counted against (the configured capacity when it was
  // written), so that a decision under another capacity keeps the count taken in the window
  // (tokens left = capacity - count). 0: not recorded (a token bucket, or a state written before
  // the store recorded it), read as counted against the decision's own capacity.
  double counted_against = 0;

  friend bool operator==(const State&, const State&) = default;
};

enum class Mode {
  kCheck,    // answer what kConsume would, write nothing
  kConsume,  // take tokens if available
  kReserve,  // take tokens, going into debt down to -max_reserved
};

enum class DenyReason {
  kNone,
  kInsufficientTokens,
  kCountExceedsCapacity,  // can never be allowed; no retry_at
  kMaxReservedExceeded,
  kBlocked,      // an override blocks the key; no retry_at
  kNoFreeSlots,  // a concurrency limit has fewer free slots than asked (storage/leases)
};

// What one settlement did to a limit (see Settle).
struct Settled {
  // Tokens given back (<= taken - used).
  double returned = 0;
  // Tokens charged for used - taken, and the part of it that could not be charged because the
  // balance may not go below -max_reserved.
  double charged = 0;
  double uncharged = 0;
  // The balance after the settlement.
  double value = 0;
  // Set when `value` is negative: when the balance is back to zero.
  std::optional<int64_t> paid_at_us;
  // The state to store.
  State next;
};

struct Decision {
  bool allowed = false;
  DenyReason reason = DenyReason::kNone;
  // Tokens after the decision if allowed (Check: the current balance); the current balance, with
  // nothing taken, if denied.
  double value = 0;
  // Denied: earliest time a retry can succeed (jitter included), unset when it never can.
  // Allowed reservation: when its work may run (now if no debt). Unset for allowed consumes.
  std::optional<int64_t> retry_at_us;
  // The state to store when the decision is applied (allowed, and not a Check).
  State next;
  // Set for a settlement (see Settle below); retry_at_us is then its paid_at_us.
  std::optional<Settled> settled = std::nullopt;
};

// Identity of the limit being decided, for the per-key defaults (fixed-window start, jitter).
struct LimitId {
  absl::string_view name;
  absl::string_view key;
};

// Decides one limit. REQUIRES: ValidateLimitConfig(config) is OK, count is finite and > 0.
// `current` is the stored state, or nullopt when there is none (full). A config with an
// `adjustment` (a runtime override) first carries the state across the limit's change, and an
// unlimited or blocked one allows or denies without taking anything (docs/overrides.md).
Decision Decide(const LimitConfig& config, const LimitId& id, const std::optional<State>& current,
                double count, Mode mode, int64_t now_us);

// Settles an earlier allowed take of `taken` tokens, made at `taken_at_us` and leaving the balance
// at `value_after_take`, of which `used` were really used, at `now_us`:
//  - used < taken gives back up to taken - used, never lifting the balance above what it would
//    be had the take been of `used` tokens only:
//    Token bucket: returned = max(0, min(taken - used, capacity - peak)), where `peak` is the
//    highest balance the bucket can have reached since the take: the larger of the balance
//    refilled to now and `value_after_take` refilled from `taken_at_us` to now (capped at
//    capacity). Refill that the bucket without the take would have lost to its capacity is
//    not given back: a take of 5 from 10 that refilled to 8, was drawn to 2 by another caller
//    and is then cancelled leaves 4 (the bucket without the take: 10, then 4), not 7.
//    Unset `value_after_take` (a receipt of an earlier version): peak is the balance refilled
//    to now (the refund is capped at capacity only).
//    Fixed window: while the window of the take is the current one, the whole refund, capped at
//    capacity; nothing once it has closed.
//  - used > taken charges used - taken like a reservation: the balance may go down to
//    -max_reserved (unbounded when unset); what does not fit is `uncharged`.
// REQUIRES: ValidateLimitConfig(config) is OK; taken > 0 and used >= 0, both finite.
Settled Settle(const LimitConfig& config, const LimitId& id, const std::optional<State>& current,
               double taken, double used, int64_t taken_at_us, int64_t now_us,
               std::optional<double> value_after_take);

// Decide without the config's adjustment (ignored): the algebra of a configured limit.
Decision DecideUnadjusted(const LimitConfig& config, const LimitId& id,
                          const std::optional<State>& current, double count, Mode mode,
                          int64_t now_us);

// When `state` will have refilled to capacity under `config` (saturates at INT64_MAX).
int64_t FullAt(const LimitConfig& config, const State& state);

// The fixed-window offset used for `id`: config.start_us, or the key hash modulo the period.
int64_t WindowStart(const LimitConfig& config, const LimitId& id);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ALGEBRA_H_
