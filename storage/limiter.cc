#include "storage/limiter.h"

#include "absl/container/inlined_vector.h"
#include "storage/apply.h"

namespace ratelimit {

namespace {

absl::InlinedVector<LimitOp, 4> OpsOf(absl::Span<const LimitRequest> limits) {
  absl::InlinedVector<LimitOp, 4> ops;
  ops.reserve(limits.size());
  for (const LimitRequest& l : limits) {
    ops.push_back(LimitOp{StateKey{l.name, l.key, l.source}, l.config, l.count, std::nullopt});
  }
  return ops;
}

}  // namespace

absl::StatusOr<Verdict> Limiter::Evaluate(absl::Span<const LimitRequest> limits, Mode mode) {
  absl::InlinedVector<LimitOp, 4> ops = OpsOf(limits);
  Operation op;
  op.limits = ops;
  op.mode = mode;
  absl::StatusOr<Outcome> outcome = store_.Apply(op, clock_);
  if (!outcome.ok()) return outcome.status();
  return VerdictOf(*std::move(outcome));
}

void Limiter::EvaluateAsync(absl::Span<const LimitRequest> limits, Mode mode, VerdictDone done) {
  absl::InlinedVector<LimitOp, 4> ops = OpsOf(limits);
  Operation op;
  op.limits = ops;
  op.mode = mode;
  store_.ApplyAsync(op, clock_, [done = std::move(done)](absl::StatusOr<Outcome> outcome) mutable {
    if (!outcome.ok()) {
      std::move(done)(outcome.status());
    } else {
      std::move(done)(VerdictOf(*std::move(outcome)));
    }
  });
}

absl::StatusOr<Verdict> Limiter::Evaluate(absl::Span<const LimitRequest> limits, Mode mode,
                                          const Remember& remember) {
  absl::InlinedVector<LimitOp, 4> ops = OpsOf(limits);
  Operation op;
  op.limits = ops;
  op.mode = mode;
  op.records = absl::MakeConstSpan(&remember.record, 1);
  op.record_value = [&remember](const Outcome& outcome) {
    return remember.encode ? remember.encode(VerdictOf(outcome)) : std::string();
  };
  absl::StatusOr<Outcome> outcome = store_.ApplyRecorded(op, clock_);
  if (!outcome.ok()) return outcome.status();
  if (outcome->existing_record) {
    Verdict verdict;
    verdict.now_us = outcome->now_us;
    verdict.remembered = std::move(outcome->existing_value);
    return verdict;
  }
  return VerdictOf(*std::move(outcome));
}

std::vector<absl::StatusOr<Verdict>> Limiter::EvaluateBatch(absl::Span<const BatchItem> items) {
  std::vector<absl::StatusOr<Verdict>> verdicts;
  if (items.empty()) return verdicts;
  size_t total = 0;
  for (const BatchItem& item : items) total += item.limits.size();
  // Every item's limits in one array (reserved up front, so the spans into it stay valid).
  std::vector<LimitOp> limit_ops;
  limit_ops.reserve(total);
  std::vector<Operation> ops(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t first = limit_ops.size();
    for (const LimitRequest& l : items[i].limits) {
      limit_ops.push_back(
          LimitOp{StateKey{l.name, l.key, l.source}, l.config, l.count, std::nullopt});
    }
    ops[i].limits = absl::MakeConstSpan(limit_ops.data() + first, items[i].limits.size());
    ops[i].mode = items[i].mode;
  }
  std::vector<absl::StatusOr<Outcome>> outcomes = store_.ApplyBatch(ops, clock_);
  verdicts.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (i >= outcomes.size()) {
      verdicts.push_back(absl::InternalError("the store answered fewer operations than given"));
    } else if (!outcomes[i].ok()) {
      verdicts.push_back(outcomes[i].status());
    } else {
      verdicts.push_back(VerdictOf(*std::move(outcomes[i])));
    }
  }
  return verdicts;
}

absl::StatusOr<SettleVerdict> Limiter::Settle(absl::Span<const SettleItem> items) {
  absl::InlinedVector<LimitOp, 4> ops;
  std::vector<RecordSpec> records;
  for (const SettleItem& item : items) {
    ops.push_back(LimitOp{
        StateKey{item.name, item.key, item.source}, item.config, item.taken,
        LimitOp::Settlement{item.taken, item.used, item.taken_at_us, item.value_after_take}});
    records.push_back(item.spent);
  }
  Operation op;
  op.limits = ops;
  op.mode = Mode::kConsume;
  op.records = records;
  absl::StatusOr<Outcome> outcome = store_.ApplyRecorded(op, clock_);
  if (!outcome.ok()) return outcome.status();
  SettleVerdict verdict;
  verdict.now_us = outcome->now_us;
  if (outcome->existing_record) {
    verdict.already_settled = outcome->existing_record;
    return verdict;
  }
  for (Decision& d : outcome->decisions) verdict.results.push_back(*std::move(d.settled));
  return verdict;
}

Verdict VerdictOf(Outcome outcome) {
  Verdict verdict;
  verdict.allowed = outcome.allowed;
  verdict.decisions = std::move(outcome.decisions);
  verdict.now_us = outcome.now_us;
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

absl::StatusOr<uint64_t> Limiter::Reset(const std::string& name, const std::string& key,
                                        LimitSource source) {
  return store_.Delete(StateKey{name, key, source});
}

absl::StatusOr<uint64_t> Limiter::ResetAll(const std::string& name, LimitSource source) {
  return store_.DeleteAll(source, name);
}

}  // namespace ratelimit
