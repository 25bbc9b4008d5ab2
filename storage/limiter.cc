#include "storage/limiter.h"

#include "absl/container/inlined_vector.h"

namespace ratelimit {

absl::StatusOr<Verdict> Limiter::Evaluate(absl::Span<const LimitRequest> limits, Mode mode) {
  absl::InlinedVector<LimitOp, 4> ops;
  ops.reserve(limits.size());
  for (const LimitRequest& l : limits) {
    ops.push_back(LimitOp{StateKey{l.name, l.key, l.source}, l.config, l.count});
  }
  absl::StatusOr<Outcome> outcome = store_.Apply(Operation{ops, mode}, clock_);
  if (!outcome.ok()) return outcome.status();

  Verdict verdict;
  verdict.allowed = outcome->allowed;
  verdict.decisions = std::move(outcome->decisions);
  verdict.now_us = outcome->now_us;
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
