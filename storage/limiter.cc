#include "storage/limiter.h"

#include "absl/container/inlined_vector.h"

namespace ratelimit {

absl::StatusOr<Verdict> Limiter::Evaluate(absl::Span<const LimitRequest> limits, Mode mode) {
  // The store takes distinct keys; a (name, key) named twice maps to one slot, and the second
  // mention decides against the state the first one left.
  absl::InlinedVector<StateKey, 4> keys;
  absl::InlinedVector<size_t, 4> slot_of(limits.size());
  for (size_t i = 0; i < limits.size(); ++i) {
    size_t slot = 0;
    while (slot < keys.size() &&
           !(keys[slot].source == limits[i].source && keys[slot].name == limits[i].name &&
             keys[slot].key == limits[i].key)) {
      ++slot;
    }
    if (slot == keys.size()) {
      keys.push_back(StateKey{limits[i].name, limits[i].key, limits[i].source});
    }
    slot_of[i] = slot;
  }

  Verdict verdict;
  verdict.decisions.resize(limits.size());
  absl::Status status = store_.Update(
      keys,
      [&](absl::Span<const std::optional<State>> current,
          absl::Span<std::optional<State>> writes) -> absl::Status {
        // Read the clock inside the transaction: a decision never uses a time older than the
        // state it reads, except when the wall clock itself steps back.
        const int64_t now = clock_.NowMicros();
        verdict.now_us = now;
        absl::InlinedVector<std::optional<State>, 4> working(current.begin(), current.end());
        bool all_allowed = true;
        for (size_t i = 0; i < limits.size(); ++i) {
          const LimitRequest& l = limits[i];
          Decision d =
              Decide(l.config, LimitId{l.name, l.key}, working[slot_of[i]], l.count, mode, now);
          if (d.allowed && mode != Mode::kCheck) working[slot_of[i]] = d.next;
          all_allowed = all_allowed && d.allowed;
          verdict.decisions[i] = std::move(d);
        }
        verdict.allowed = all_allowed;
        if (all_allowed) {
          if (mode != Mode::kCheck) {
            for (size_t s = 0; s < keys.size(); ++s) writes[s] = working[s];
          }
          return absl::OkStatus();
        }
        // Denied: report balances as they are, since nothing is taken.
        for (size_t i = 0; i < limits.size(); ++i) {
          Decision& d = verdict.decisions[i];
          if (d.allowed && mode != Mode::kCheck) {
            const Decision untouched =
                Decide(limits[i].config, LimitId{limits[i].name, limits[i].key},
                       current[slot_of[i]], limits[i].count, Mode::kCheck, now);
            d.value = untouched.value;
          }
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;

  const auto& ds = verdict.decisions;
  if (verdict.allowed) {
    for (const Decision& d : ds) {
      if (d.retry_at_us && (!verdict.retry_at_us || *d.retry_at_us > *verdict.retry_at_us)) {
        verdict.retry_at_us = d.retry_at_us;
      }
    }
    return verdict;
  }
  for (size_t i = 0; i < ds.size(); ++i) {
    if (ds[i].allowed) continue;
    if (!ds[i].retry_at_us) {  // never: this one decides
      verdict.denied_by = static_cast<int>(i);
      verdict.retry_at_us.reset();
      break;
    }
    if (verdict.denied_by < 0 || *ds[i].retry_at_us > *verdict.retry_at_us) {
      verdict.denied_by = static_cast<int>(i);
      verdict.retry_at_us = ds[i].retry_at_us;
    }
  }
  return verdict;
}

absl::Status Limiter::Reset(const std::string& name, const std::string& key, LimitSource source) {
  return store_.Delete(StateKey{name, key, source});
}

absl::Status Limiter::ResetAll(const std::string& name, LimitSource source) {
  return store_.DeleteAll(source, name);
}

}  // namespace ratelimit
