#include "storage/limiter.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
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

// A concurrency limit holds leases, not a balance: it is decided by StateStore::ApplyLease. Given
// to a rate decision it would be refilled with no period, so it is refused before the store.
absl::Status RefuseConcurrency(absl::Span<const LimitRequest> limits) {
  for (size_t i = 0; i < limits.size(); ++i) {
    if (limits[i].config.kind != LimitKind::kConcurrency) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("limits[", i, "].config.kind: \"", limits[i].name,
                     "\" is a concurrency limit, decided by leases (Acquire/Release), not by "
                     "Check/Consume/Reserve"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Verdict> Limiter::Evaluate(absl::Span<const LimitRequest> limits, Mode mode) {
  if (absl::Status refused = RefuseConcurrency(limits); !refused.ok()) return refused;
  absl::InlinedVector<LimitOp, 4> ops = OpsOf(limits);
  Operation op;
  op.limits = ops;
  op.mode = mode;
  absl::StatusOr<Outcome> outcome = store_.Apply(op, clock_);
  if (!outcome.ok()) return outcome.status();
  return VerdictOf(*std::move(outcome));
}

void Limiter::EvaluateAsync(absl::Span<const LimitRequest> limits, Mode mode, VerdictDone done) {
  if (absl::Status refused = RefuseConcurrency(limits); !refused.ok()) {
    std::move(done)(std::move(refused));
    return;
  }
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
  if (absl::Status refused = RefuseConcurrency(limits); !refused.ok()) return refused;
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
  verdicts.reserve(items.size());
  // A refused item is answered here; the others go to the store in their order.
  std::vector<size_t> sent;
  sent.reserve(items.size());
  size_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status refused = RefuseConcurrency(items[i].limits);
    verdicts.push_back(refused.ok() ? absl::StatusOr<Verdict>(Verdict{}) : refused);
    if (!refused.ok()) continue;
    sent.push_back(i);
    total += items[i].limits.size();
  }
  if (sent.empty()) return verdicts;
  // Every item's limits in one array (reserved up front, so the spans into it stay valid).
  std::vector<LimitOp> limit_ops;
  limit_ops.reserve(total);
  std::vector<Operation> ops(sent.size());
  for (size_t j = 0; j < sent.size(); ++j) {
    const BatchItem& item = items[sent[j]];
    const size_t first = limit_ops.size();
    for (const LimitRequest& l : item.limits) {
      limit_ops.push_back(
          LimitOp{StateKey{l.name, l.key, l.source}, l.config, l.count, std::nullopt});
    }
    ops[j].limits = absl::MakeConstSpan(limit_ops.data() + first, item.limits.size());
    ops[j].mode = item.mode;
  }
  std::vector<absl::StatusOr<Outcome>> outcomes = store_.ApplyBatch(ops, clock_);
  for (size_t j = 0; j < sent.size(); ++j) {
    absl::StatusOr<Verdict>& verdict = verdicts[sent[j]];
    if (j >= outcomes.size()) {
      verdict = absl::InternalError("the store answered fewer operations than given");
    } else if (!outcomes[j].ok()) {
      verdict = outcomes[j].status();
    } else {
      verdict = VerdictOf(*std::move(outcomes[j]));
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
