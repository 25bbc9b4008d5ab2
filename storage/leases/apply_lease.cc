#include "storage/leases/apply_lease.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/apply.h"
#include "storage/leases/lease_codec.h"
#include "storage/status_util.h"

namespace ratelimit {
absl::Status ValidateLeaseOperation(const LeaseOperation& op) {
  if (absl::Status s = ValidateLeaseOp(op.lease); !s.ok()) return s;
  if (!op.limits.empty() && op.lease.action != LeaseAction::kAcquire) {
    return InvalidField("limits", "rate limits are taken only with an acquire");
  }
  if (op.limits.size() > static_cast<size_t>(kMaxLimitsPerRequest)) {
    return InvalidField("limits", absl::StrCat("at most ", kMaxLimitsPerRequest));
  }
  for (size_t i = 0; i < op.limits.size(); ++i) {
    const LimitOp& l = op.limits[i];
    const std::string field = absl::StrCat("limits[", i, "].");
    if (l.config.kind == LimitKind::kConcurrency) {
      return InvalidField(field, "config.kind", "one concurrency limit per lease operation");
    }
    if (absl::Status s = ValidateLimitConfig(l.config, absl::StrCat(field, "config.")); !s.ok()) {
      return s;
    }
    if (!(l.count > 0) || !(l.count <= kMaxAmount) || l.settle) {
      return InvalidField(field, "count", "must be finite and > 0, and not a settlement");
    }
  }
  return absl::OkStatus();
}

LeaseOutcome DecideLeaseOperation(const LeaseOperation& op, const OperationKeys& keys, LeaseSet set,
                                  absl::Span<const std::optional<State>> current, int64_t now_us,
                                  absl::Span<std::optional<State>> writes) {
  LeaseOutcome outcome;
  LeaseSetSummary unknown;
  DecideLeaseOperation(op, keys, std::move(set), current, now_us, writes, unknown, outcome);
  return outcome;
}

void DecideLeaseOperation(const LeaseOperation& op, const OperationKeys& keys, LeaseSet set,
                          absl::Span<const std::optional<State>> current, int64_t now_us,
                          absl::Span<std::optional<State>> writes, LeaseSetSummary& summary,
                          LeaseOutcome& outcome) {
  outcome.now_us = now_us;
  LeaseDecision& d = outcome.lease;
  DecideLease(op.lease, std::move(set), now_us, summary, d);
  bool rates_allowed = true;
  if (op.lease.action == LeaseAction::kAcquire && d.replayed && !op.limits.empty()) {
    // A replay takes nothing again: the rate limits are read for their balances as they are now.
    const Operation read{op.limits, Mode::kCheck};
    outcome.decisions = DecideOperation(read, keys, current, now_us, writes).decisions;
    AsReplayed(outcome.decisions);
  } else if (op.lease.action == LeaseAction::kAcquire && !op.limits.empty()) {
    const Operation rates{op.limits, d.allowed ? Mode::kConsume : Mode::kCheck};
    Outcome rated = DecideOperation(rates, keys, current, now_us, writes);
    rates_allowed = rated.allowed;
    outcome.decisions = std::move(rated.decisions);
    if (d.allowed && !rates_allowed) WithdrawAcquire(op.lease, d, summary);  // nothing taken
  }
  outcome.allowed = d.allowed && rates_allowed;
}

void AsReplayed(Decisions& rates) {
  for (Decision& r : rates) {
    r.allowed = true;
    r.reason = DenyReason::kNone;
    r.retry_at_us.reset();
  }
}

int64_t LeaseRecordExpiresAt(const LeaseOp& op, const LeaseSet& next, int64_t now_us) {
  const int64_t by_ttl = now_us > INT64_MAX - op.config.max_lease_ttl_us
                             ? INT64_MAX
                             : now_us + op.config.max_lease_ttl_us;
  return LeaseRecordExpiry(std::max(by_ttl, LeaseSetExpiresAt(next)));
}

std::string LeaseRecordPrefix(LimitSource source, absl::string_view name) {
  std::string out;
  out.reserve(4 + name.size());
  out.push_back('L');
  out.push_back(static_cast<char>(source));
  out.push_back(static_cast<char>((name.size() >> 8) & 0xff));
  out.push_back(static_cast<char>(name.size() & 0xff));
  out.append(name.data(), name.size());
  return out;
}

std::string LeaseRecordKey(const StateKey& key) {
  return absl::StrCat(LeaseRecordPrefix(key.source, key.name), key.key);
}

std::optional<StateKey> ParseLeaseRecordKey(absl::string_view record_key) {
  // LeaseRecordPrefix's layout, then the key.
  if (record_key.size() < 4 || record_key[0] != 'L') return std::nullopt;
  const std::optional<LimitSource> source = LimitSourceOfByte(record_key[1]);
  if (!source) return std::nullopt;
  const size_t n =
      (size_t{static_cast<uint8_t>(record_key[2])} << 8) | static_cast<uint8_t>(record_key[3]);
  if (record_key.size() < 4 + n) return std::nullopt;
  return StateKey{std::string(record_key.substr(4, n)), std::string(record_key.substr(4 + n)),
                  *source};
}

bool LeaseRecordHoldsLiveLease(absl::string_view record, int64_t now_us) {
  absl::StatusOr<LeaseSet> set = DecodeLeaseSet(record);
  return !set.ok() || std::any_of(set->leases.begin(), set->leases.end(), [now_us](const Lease& l) {
    return !l.released && l.expires_at_us > now_us;
  });
}

bool LeaseSetHoldsKeptLeak(const LeaseSet& set, int64_t now_us) {
  return std::any_of(set.leases.begin(), set.leases.end(), [now_us](const Lease& l) {
    return !l.released && l.expires_at_us <= now_us && LeaseRecordExpiry(l.expires_at_us) > now_us;
  });
}

bool LeaseRecordHoldsLeak(absl::string_view record, int64_t now_us) {
  absl::StatusOr<LeaseSet> set = DecodeLeaseSet(record);
  return !set.ok() || LeaseSetHoldsKeptLeak(*set, now_us);
}

absl::StatusOr<LeaseOutcome> ApplyLeaseWithRecords(StateStore& store, const LeaseOperation& op,
                                                   const Clock& clock) {
  if (absl::Status s = ValidateLeaseOperation(op); !s.ok()) return s;
  const OperationKeys keys = DistinctKeys(op.limits);
  RecordSpec record{LeaseRecordKey(op.lease.key), 0};
  record.expires_at_us =
      clock.NowMicros() + op.lease.config.max_lease_ttl_us + kLeaseRecordMarginMicros;
  LeaseOutcome outcome;
  // A lease outliving the record's expiry (taken under a longer max_lease_ttl) makes the decision
  // refuse to write; it is made again with the record expiring after that lease.
  std::optional<int64_t> record_too_short;
  for (int attempt = 0; attempt < 3; ++attempt) {
    record_too_short.reset();
    absl::Status status = store.UpdateWithRecords(
        keys.keys, absl::MakeConstSpan(&record, 1), clock,
        [&](absl::Span<const std::optional<State>> current,
            absl::Span<const std::optional<std::string>> records,
            absl::Span<std::optional<State>> writes,
            absl::Span<std::optional<std::string>> record_writes) -> absl::Status {
          LeaseSet set;
          if (records[0]) {
            absl::StatusOr<LeaseSet> stored = DecodeLeaseSet(*records[0]);
            if (!stored.ok()) return stored.status();
            set = *std::move(stored);
          }
          outcome =
              DecideLeaseOperation(op, keys, std::move(set), current, clock.NowMicros(), writes);
          LeaseDecision& d = outcome.lease;
          d.seq = NextLeaseDecisionSeq();  // inside the transaction, which holds the key
          if (d.write) {
            const int64_t latest = LeaseSetExpiresAt(d.next);
            if (latest >= record.expires_at_us) {
              record_too_short = latest;
              return absl::AbortedError("lease set record expires too early");
            }
            record_writes[0] = EncodeLeaseSet(d.next);
          }
          return absl::OkStatus();
        });
    if (record_too_short) {
      record.expires_at_us = *record_too_short + kLeaseRecordMarginMicros;
      continue;
    }
    if (!status.ok()) return status;
    return outcome;
  }
  return absl::InternalError("lease set record expiry kept moving");
}

}  // namespace ratelimit
