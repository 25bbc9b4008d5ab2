// The algebra's arithmetic (formulas: docs/api.md "Semantics"). Repeated in Lua, bit for bit, by
// storage/redis/ratelimit.lua, which the Redis store runs inside Redis: a change here is a change
// there. One table of vectors (tests/support/algebra_vectors.h) runs through both, in algebra_test
// and redis_lua_test; this file is compiled with -ffp-contract=off so that no fused multiply-add
// changes a result.
#include "storage/algebra.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "storage/key_hash.h"

namespace ratelimit {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinTime = std::numeric_limits<int64_t>::min();

// Relative tolerance of token arithmetic: a balance short of its target by less than this
// fraction of the limit's magnitude (capacity, or the count when larger) counts as reaching it.
// Four units in the last place of a double: the residue a refill computation can leave, and far
// below one token at every magnitude the service accepts (0.9 tokens at 1e15).
constexpr double kRelativeTolerance = 4 * std::numeric_limits<double>::epsilon();

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? kNever : kMinTime;
  return r;
}

int64_t SatSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? kNever : kMinTime;
  return r;
}

// t + d microseconds, with d >= 0 rounded up, saturating at kNever.
int64_t AddCeil(int64_t t, double d) {
  const double c = std::ceil(d);
  if (!(c > 0)) return t;
  // 2^63: every double below it converts to int64 exactly.
  if (c >= 9223372036854775808.0) return kNever;
  return SatAdd(t, static_cast<int64_t>(c));
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// a mod b in [0, b) for b > 0 (no intermediate product, so no overflow at the int64 edges).
int64_t Mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
}

// The start of the window (boundaries at `offset` + k * period, 0 <= offset < period) that
// contains `now`. Never overflows: the result lies in (now - period, now], clamped at the
// smallest time.
int64_t WindowContaining(int64_t now, int64_t offset, int64_t period) {
  int64_t into = Mod(now, period) - offset;  // in (-period, period)
  if (into < 0) into += period;
  return SatSub(now, into);
}

// Whether `balance` reaches `target`, forgiving a shortfall below `tolerance`.
bool Covers(double balance, double target, double tolerance) {
  const double short_by = target - balance;
  return short_by <= 0 || short_by < tolerance;
}

double Tolerance(const LimitConfig& c, double count) {
  return kRelativeTolerance * std::max(c.EffectiveCapacity(), count);
}

// The balance and its time, brought forward to `now` (before taking anything).
State Refill(const LimitConfig& c, const LimitId& id, const std::optional<State>& current,
             int64_t now) {
  const double capacity = c.EffectiveCapacity();
  if (c.kind == LimitKind::kTokenBucket) {
    if (!current) return State{capacity, now, 0};
    const int64_t elapsed = std::max<int64_t>(0, SatSub(now, current->ts_us));
    const double value =
        std::min(current->value + static_cast<double>(elapsed) * c.rate / c.period_us, capacity);
    return State{value, std::max(now, current->ts_us), 0};
  }
  if (!current) return State{capacity, WindowContaining(now, WindowStart(c, id), c.period_us), 0};
  // windows * period <= now - ts, so the sum below stays within [ts, now].
  const int64_t windows = std::max<int64_t>(0, FloorDiv(SatSub(now, current->ts_us), c.period_us));
  const double value = std::min(current->value + c.rate * static_cast<double>(windows), capacity);
  return State{value, current->ts_us + windows * c.period_us, 0};
}

// The earliest time, searching forward from `from`, at which `state` has refilled to a balance
// that `reached` accepts (kNever when that never happens within the int64 range). `refilled` is
// `state` brought forward to `from` and `missing` the tokens it lacks; they give the estimate,
// and the answer is checked with Refill itself, so that a decision made at the returned time
// sees exactly the balance promised: rounding can make the answer late by a unit, never early.
template <typename Reached>
int64_t RefilledAt(const LimitConfig& c, const std::optional<State>& state, const State& refilled,
                   double missing, Reached reached) {
  auto ok = [&](int64_t t) { return reached(Refill(c, LimitId{}, state, t).value); };
  if (ok(refilled.ts_us)) return refilled.ts_us;
  int64_t t;
  int64_t step;
  if (c.kind == LimitKind::kTokenBucket) {
    const double us = missing * static_cast<double>(c.period_us) / c.rate;
    t = std::max(SatAdd(refilled.ts_us, 1), SatSub(AddCeil(refilled.ts_us, us), 1));
    step = 1;
  } else {
    const double windows = std::max(1.0, std::ceil(missing / c.rate) - 1);
    t = AddCeil(refilled.ts_us, windows * static_cast<double>(c.period_us));
    step = c.period_us;
  }
  for (int i = 0; i < 128; ++i) {
    if (ok(t)) return t;
    if (t == kNever) break;
    t = SatAdd(t, step);
    if (i >= 2) step = SatAdd(step, step);  // a few exact steps, then a doubling search
  }
  return kNever;
}

// The state a decision under an override's adjusted config starts from (LimitConfig::Adjustment):
// a token bucket written before the limit's latest change is refilled to that moment under the
// old limit, then clamped to the new capacity; a fixed window's stored value, counted against the
// configured capacity, is shifted to the new one (the count taken in the window is kept), and a
// cut never takes it below zero (nor below a debt it already had).
std::optional<State> AcrossChange(const LimitConfig& c, const LimitId& id,
                                  const std::optional<State>& current) {
  const LimitConfig::Adjustment& a = *c.adjustment;
  if (!current) return current;
  if (c.kind == LimitKind::kTokenBucket) {
    if (!a.changed_at_us || current->ts_us >= *a.changed_at_us) return current;
    LimitConfig before;
    before.rate = a.before_rate;
    before.period_us = a.before_period_us;
    before.capacity = a.before_capacity;
    State at = Refill(before, id, current, *a.changed_at_us);
    at.value = std::min(at.value, c.EffectiveCapacity());
    return at;
  }
  State shifted = *current;
  shifted.value = std::max(current->value + (c.EffectiveCapacity() - a.base_capacity),
                           std::min(current->value, 0.0));
  return shifted;
}

// The capacity a fixed window's stored value is counted against under `c`: the configured one
// (which an override's adjustment carries as base_capacity).
double CountedCapacity(const LimitConfig& c) {
  return c.adjustment ? c.adjustment->base_capacity : c.EffectiveCapacity();
}

// A fixed window's state, counted against `c`'s configured capacity. One written under another
// capacity (the limit was changed since: a reload of its definition, or a replica that runs
// another) keeps the count taken in its window: its value moves by the difference, and a cut
// never takes it below zero (nor below a debt it already had). Token buckets are as stored.
std::optional<State> Recounted(const LimitConfig& c, const std::optional<State>& current) {
  const double base = CountedCapacity(c);
  if (c.kind != LimitKind::kFixedWindow || !current || !(base > 0)) return current;
  State out = *current;
  out.counted_against = base;
  if (current->counted_against > 0 && current->counted_against != base) {
    out.value =
        std::max(current->value + (base - current->counted_against), std::min(current->value, 0.0));
  }
  return out;
}

// An unlimited or blocked override: nothing is taken and the state stays as it is (a missing
// one is written as the full state it stands for).
Decision DecideFixed(const LimitConfig& c, const LimitId& id, const std::optional<State>& current,
                     Mode mode, int64_t now) {
  const State refilled = Refill(c, id, current, now);
  Decision d;
  d.value = refilled.value;
  if (c.adjustment->effect == LimitConfig::Adjustment::Effect::kBlocked) {
    d.reason = DenyReason::kBlocked;
    return d;
  }
  d.allowed = true;
  if (mode == Mode::kReserve) d.retry_at_us = now;
  if (mode == Mode::kCheck) return d;
  if (current) {
    d.next = *current;
  } else {
    d.next = refilled;
    d.next.full_at_us = FullAt(c, d.next);
  }
  return d;
}

// Decide, on a state already counted against the configured capacity.
Decision DecideCounted(const LimitConfig& c, const LimitId& id, const std::optional<State>& stored,
                       double count, Mode mode, int64_t now) {
  if (c.adjustment) {
    if (c.adjustment->effect != LimitConfig::Adjustment::Effect::kLimit) {
      return DecideFixed(c, id, stored, mode, now);
    }
    Decision d = DecideUnadjusted(c, id, AcrossChange(c, id, stored), count, mode, now);
    // A fixed window's state is stored counted against the configured capacity.
    if (d.allowed && mode != Mode::kCheck) {
      if (c.kind == LimitKind::kFixedWindow) {
        d.next.value -= c.EffectiveCapacity() - c.adjustment->base_capacity;
      }
      // Full under a cut is not full under the configured limit: the state must outlive the
      // override, so garbage collection keeps it until a later decision writes it again.
      if (c.EffectiveCapacity() < c.adjustment->base_capacity) {
        d.next.full_at_us = std::numeric_limits<int64_t>::max();
      }
    }
    return d;
  }
  return DecideUnadjusted(c, id, stored, count, mode, now);
}

}  // namespace

int64_t WindowStart(const LimitConfig& c, const LimitId& id) {
  if (c.start_us) return Mod(*c.start_us, c.period_us);
  return static_cast<int64_t>(StableKeyHash(id.name, id.key) % static_cast<uint64_t>(c.period_us));
}

int64_t FullAt(const LimitConfig& c, const State& s) {
  const double capacity = c.EffectiveCapacity();
  if (s.value >= capacity) return s.ts_us;
  // Full means Refill answers exactly `capacity`: the store may then drop the state, and a
  // missing state is the same as a full one. One microsecond of margin past that moment.
  const int64_t at = RefilledAt(c, s, s, capacity - s.value,
                                [capacity](double balance) { return balance >= capacity; });
  return at == kNever ? kNever : at + 1;
}

Decision Decide(const LimitConfig& c, const LimitId& id, const std::optional<State>& stored,
                double count, Mode mode, int64_t now) {
  Decision d = DecideCounted(c, id, Recounted(c, stored), count, mode, now);
  if (c.kind == LimitKind::kFixedWindow && d.allowed && mode != Mode::kCheck) {
    d.next.counted_against = CountedCapacity(c);
  }
  return d;
}

Decision DecideUnadjusted(const LimitConfig& c, const LimitId& id,
                          const std::optional<State>& current, double count, Mode mode,
                          int64_t now) {
  const State refilled = Refill(c, id, current, now);
  const double capacity = c.EffectiveCapacity();
  const double tolerance = Tolerance(c, count);
  Decision d;
  double value = refilled.value - count;
  if (Covers(refilled.value, count, tolerance)) {
    value = std::max(0.0, value);
    d.allowed = true;
    if (mode == Mode::kReserve) d.retry_at_us = now;
  } else {
    const bool reserving = mode == Mode::kReserve;
    const double room = reserving ? capacity + c.max_reserved.value_or(kMaxAmount * 2) : capacity;
    if (!Covers(room, count, tolerance)) {
      // No amount of waiting makes this fit: say so instead of giving a retry_at that would lie.
      d.reason = DenyReason::kCountExceedsCapacity;
    } else if (!reserving) {
      d.reason = DenyReason::kInsufficientTokens;
      d.retry_at_us = RefilledAt(c, current, refilled, count - refilled.value,
                                 [&](double b) { return Covers(b, count, tolerance); });
    } else if (c.max_reserved && !Covers(value, -*c.max_reserved, tolerance)) {
      // Retry when the debt this reservation would leave fits within max_reserved.
      d.reason = DenyReason::kMaxReservedExceeded;
      const double floor = -*c.max_reserved;
      d.retry_at_us = RefilledAt(c, current, refilled, floor - value,
                                 [&](double b) { return Covers(b - count, floor, tolerance); });
    } else {
      d.allowed = true;
      // The work may run once the debt is paid: the stored state is back to zero or more.
      const State owing{value, refilled.ts_us, 0};
      d.retry_at_us = RefilledAt(c, owing, owing, -value, [](double b) { return b >= 0; });
    }
  }

  if (!d.allowed) {
    if (d.retry_at_us && c.jitter > 0) {
      const double offset = std::floor(StableKeyFraction(id.name, id.key) * c.jitter * c.period_us);
      d.retry_at_us = AddCeil(*d.retry_at_us, offset);
    }
    d.value = refilled.value;
    return d;
  }
  if (mode == Mode::kCheck) {
    d.value = refilled.value;
    return d;
  }
  d.value = value;
  d.next = State{value, refilled.ts_us, 0};
  d.next.full_at_us = FullAt(c, d.next);
  return d;
}

Settled Settle(const LimitConfig& c, const LimitId& id, const std::optional<State>& current,
               double taken, double used, int64_t taken_at_us, int64_t now,
               std::optional<double> value_after_take) {
  const State refilled = Refill(c, id, Recounted(c, current), now);
  const double capacity = c.EffectiveCapacity();
  Settled s;
  double value = refilled.value;
  if (used < taken) {
    const bool token_bucket = c.kind == LimitKind::kTokenBucket;
    const bool same_window = token_bucket || (taken_at_us >= refilled.ts_us &&
                                              taken_at_us - refilled.ts_us < c.period_us);
    // The highest balance since the take: the bucket without the take held `capacity - peak`
    // more at most (it lost the rest of the difference to its capacity while refilling).
    double peak = value;
    if (token_bucket && value_after_take && taken_at_us <= now) {
      const State after_take{*value_after_take, taken_at_us, 0};
      peak = std::max(peak, Refill(c, id, after_take, now).value);
    }
    if (same_window && peak < capacity) {
      s.returned = std::min(taken - used, capacity - peak);
      value += s.returned;
    }
  } else if (used > taken) {
    const double extra = used - taken;
    const double floor = c.max_reserved ? -*c.max_reserved : -kMaxAmount * 2;
    const double room = std::max(0.0, value - floor);
    s.charged = std::min(extra, room);
    s.uncharged = extra - s.charged;
    value -= s.charged;
  }
  s.value = value;
  s.next = State{value, refilled.ts_us, 0};
  s.next.full_at_us = FullAt(c, s.next);
  if (c.kind == LimitKind::kFixedWindow) s.next.counted_against = CountedCapacity(c);
  if (value < 0) {
    const int64_t at =
        RefilledAt(c, s.next, s.next, -value, [](double balance) { return balance >= 0; });
    s.paid_at_us = at;
  }
  return s;
}

}  // namespace ratelimit
