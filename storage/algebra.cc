#include "storage/algebra.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "storage/key_hash.h"

namespace ratelimit {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Floating-point residue below this is treated as zero, so that a balance that is back to
// exactly zero at retry_at is not refused for a rounding error.
constexpr double kEpsilon = 1e-9;

// t + d microseconds, with d >= 0 rounded up, saturating.
int64_t AddCeil(int64_t t, double d) {
  const double c = std::ceil(d - kEpsilon);
  if (c <= 0) return t;
  if (c >= static_cast<double>(kNever - t)) return kNever;
  return t + static_cast<int64_t>(c);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t Mod(int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; }

// The balance and its time, brought forward to `now` (before taking anything).
State Refill(const LimitConfig& c, const LimitId& id, const std::optional<State>& current,
             int64_t now) {
  const double capacity = c.EffectiveCapacity();
  if (c.kind == LimitKind::kTokenBucket) {
    if (!current) return State{capacity, now, 0};
    const int64_t elapsed = std::max<int64_t>(0, now - current->ts_us);
    const double value =
        std::min(current->value + static_cast<double>(elapsed) * c.rate / c.period_us, capacity);
    return State{value, std::max(now, current->ts_us), 0};
  }
  if (!current) {
    const int64_t start = WindowStart(c, id);
    return State{capacity, start + FloorDiv(now - start, c.period_us) * c.period_us, 0};
  }
  const int64_t windows = std::max<int64_t>(0, FloorDiv(now - current->ts_us, c.period_us));
  const double value = std::min(current->value + c.rate * static_cast<double>(windows), capacity);
  return State{value, current->ts_us + windows * c.period_us, 0};
}

// When a balance of `deficit` tokens below the target will have been refilled, measured from
// the refilled state `s`.
int64_t RefilledAt(const LimitConfig& c, const State& s, int64_t now, double deficit) {
  if (c.kind == LimitKind::kTokenBucket) {
    return AddCeil(now, deficit * static_cast<double>(c.period_us) / c.rate);
  }
  const double windows = std::ceil(deficit / c.rate - kEpsilon);
  return AddCeil(s.ts_us, std::max(0.0, windows) * static_cast<double>(c.period_us));
}

}  // namespace

int64_t WindowStart(const LimitConfig& c, const LimitId& id) {
  if (c.start_us) return Mod(*c.start_us, c.period_us);
  return static_cast<int64_t>(StableKeyHash(id.name, id.key) % static_cast<uint64_t>(c.period_us));
}

int64_t FullAt(const LimitConfig& c, const State& s) {
  const double missing = c.EffectiveCapacity() - s.value;
  if (missing <= 0) return s.ts_us;
  // One microsecond of margin past the computed moment, so that rounding in the refill
  // arithmetic can never make a dropped state differ from the one it replaces.
  const int64_t at = RefilledAt(c, s, s.ts_us, missing);
  return at == kNever ? kNever : at + 1;
}

Decision Decide(const LimitConfig& c, const LimitId& id, const std::optional<State>& current,
                double count, Mode mode, int64_t now) {
  const State refilled = Refill(c, id, current, now);
  const double capacity = c.EffectiveCapacity();
  Decision d;
  double value = refilled.value - count;
  if (value < 0 && value > -kEpsilon) value = 0;

  if (value >= 0) {
    d.allowed = true;
    if (mode == Mode::kReserve) d.retry_at_us = now;
  } else {
    const bool reserving = mode == Mode::kReserve;
    const double room = reserving ? capacity + c.max_reserved.value_or(kMaxAmount * 2) : capacity;
    if (count > room + kEpsilon) {
      // No amount of waiting makes this fit: say so instead of giving a retry_at that would lie.
      d.reason = DenyReason::kCountExceedsCapacity;
    } else if (!reserving) {
      d.reason = DenyReason::kInsufficientTokens;
      d.retry_at_us = RefilledAt(c, refilled, now, -value);
    } else if (c.max_reserved && -value > *c.max_reserved + kEpsilon) {
      // Retry when the debt this reservation would leave fits within max_reserved.
      d.reason = DenyReason::kMaxReservedExceeded;
      d.retry_at_us = RefilledAt(c, refilled, now, -value - *c.max_reserved);
    } else {
      d.allowed = true;
      d.retry_at_us = RefilledAt(c, refilled, now, -value);
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

}  // namespace ratelimit
