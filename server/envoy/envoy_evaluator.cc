#include "server/envoy/envoy_evaluator.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

using Kind = EnvoyDescriptorPlan::Kind;

// The requests of some descriptors in one transaction: each descriptor's limits in its rule's
// order, one after the other.
struct Flat {
  LimitRequests requests;
  // Per descriptor: its index in the plan and the index of its first request.
  std::vector<std::pair<size_t, size_t>> spans;

  void Add(const EnvoyDescriptorPlan& p, size_t i, bool count_one, bool reserve) {
    spans.emplace_back(i, requests.size());
    for (const LimitRequest& r : p.requests) {
      requests.push_back(r);
      if (count_one) requests.back().count = 1;
      if (reserve && !r.config.max_reserved.has_value()) requests.back().config.max_reserved = 0;
    }
  }
  // The decisions of descriptor `j` (the j-th added) in `v`.
  absl::Span<const Decision> Of(const Verdict& v, size_t j, size_t limits) const {
    return absl::MakeConstSpan(v.decisions).subspan(spans[j].second, limits);
  }
};

EnvoyOutcome OutcomeOf(const EnvoyDescriptorPlan& p, absl::Span<const Decision> decisions,
                       int64_t now_us) {
  return EnvoyOutcomeOf(*p.rule(), decisions, now_us);
}

// Outcomes without a transaction of their own carry the time of the request's last transaction.
void FillTimes(absl::Span<const EnvoyDescriptorPlan> plan, int64_t now,
               std::vector<EnvoyOutcome>& outcomes) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kLimited && plan[i].kind != Kind::kRefund &&
        plan[i].kind != Kind::kAcquire && plan[i].kind != Kind::kRelease) {
      outcomes[i].now_us = now;
    }
  }
}

// The requests of one consume transaction over the descriptors `active`.
Flat ConsumeRequests(absl::Span<const EnvoyDescriptorPlan> plan, absl::Span<const size_t> active,
                     bool reserve) {
  Flat flat;
  for (size_t i : active) flat.Add(plan[i], i, /*count_one=*/false, reserve);
  return flat;
}

// Records the verdict `v` of a consume transaction `flat` over `active` (whose kAcquire
// descriptor, if any, is not in `flat`: its outcome is recorded already). Returns true when the
// descriptors are decided; false when only soft descriptors (shadow, or quota while another quota
// descriptor is within its limit) denied, after narrowing `active` to the others, which are tried
// again without them (the outcome of a left-out one stays "over").
bool RecordConsume(absl::Span<const EnvoyDescriptorPlan> plan, const Verdict& v, const Flat& flat,
                   bool blocked, std::vector<size_t>& active, std::vector<EnvoyOutcome>& outcomes) {
  for (size_t j = 0; j < flat.spans.size(); ++j) {
    const EnvoyDescriptorPlan& p = plan[flat.spans[j].first];
    outcomes[flat.spans[j].first] = OutcomeOf(p, flat.Of(v, j, p.requests.size()), v.now_us);
  }
  if (blocked || v.allowed) return true;
  for (size_t i : active) {
    if (outcomes[i].over && !plan[i].soft()) return true;  // a real denial
  }
  if (EnvoyQuotaDenies(plan, outcomes)) return true;
  std::vector<size_t> next;
  for (size_t i : active) {
    if (!outcomes[i].over) next.push_back(i);
  }
  active = std::move(next);
  return active.empty();
}

// The outcome of a lease decision on a concurrency key: over when denied; `value` the free slots.
EnvoyOutcome LeaseOutcomeOf(const LeaseDecision& d, int64_t now_us) {
  EnvoyOutcome o;
  o.over = !d.allowed;
  o.value = static_cast<double>(d.free);
  o.now_us = now_us;
  if (!d.allowed) o.retry_at_us = d.retry_at_us;
  o.released = d.state == LeaseState::kReleased;
  o.leases_expired = d.expired_unreleased;
  o.lease_held = d.held;
  o.lease_seq = d.seq;
  return o;
}

// Decides the lease op of descriptor `i` alone (a release, or a check of its slots: `check`
// makes an acquire one) into its outcome.
absl::Status DecideLeaseAlone(DecisionScheduler& scheduler,
                              absl::Span<const EnvoyDescriptorPlan> plan, size_t i, bool check,
                              std::vector<EnvoyOutcome>& outcomes,
                              std::optional<int64_t>& transaction_now) {
  LeaseOperation op{plan[i].lease, {}};
  if (check) op.lease.action = LeaseAction::kCheck;
  absl::StatusOr<LeaseOutcome> o = scheduler.Lease(op);
  if (!o.ok()) return o.status();
  transaction_now = o->now_us;
  outcomes[i] = LeaseOutcomeOf(o->lease, o->now_us);
  outcomes[i].lease_decided = !check;
  return absl::OkStatus();
}

// The lease op `lease` with the rate limits `rates`, for a store that cannot decide them in one
// transaction (it says so by NotOneTransactionError: a Redis Cluster whose keys are on different
// hash slots): the lease first, then the rate limits (consumed if the lease was taken, else
// checked), and the lease released again when they deny. Never more than the capacity held, and
// no token taken for a slot refused; a slot refused a token is held for the moment between the
// two, never after the answer. The same outcome as one transaction would give.
absl::StatusOr<LeaseOutcome> LeaseThenRates(DecisionScheduler& scheduler, const LeaseOp& lease,
                                            const LimitRequests& rates) {
  absl::StatusOr<LeaseOutcome> taken = scheduler.Lease(LeaseOperation{lease, {}});
  if (!taken.ok()) return taken;
  const bool held = taken->allowed && taken->lease.lease.has_value();
  auto release = [&]() -> absl::StatusOr<LeaseOutcome> {
    LeaseOp op = lease;
    op.action = LeaseAction::kRelease;
    op.lease_id = taken->lease.lease->id;
    return scheduler.Lease(LeaseOperation{op, {}});
  };
  absl::StatusOr<Verdict> v = scheduler.Evaluate(rates, held ? Mode::kConsume : Mode::kCheck);
  if (!v.ok()) {
    if (held) release().IgnoreError();  // else its TTL ends it
    return v.status();
  }
  if (held && !v->allowed) {
    absl::StatusOr<LeaseOutcome> released = release();
    if (!released.ok()) return released.status();
    taken->lease.lease.reset();
    taken->lease.held = released->lease.held;
    taken->lease.free = released->lease.free;
    taken->lease.seq = released->lease.seq;
  }
  taken->allowed = taken->lease.allowed && v->allowed;
  taken->decisions = std::move(v->decisions);
  taken->now_us = v->now_us;
  return taken;
}

// Consume transactions over `active` until they are decided (RecordConsume). With a kAcquire
// descriptor among them, a transaction is one lease operation: its lease with the others' rate
// limits, all-or-nothing (consumed without debt: a lease operation does not reserve).
absl::Status ConsumeUntilDecided(DecisionScheduler& scheduler,
                                 absl::Span<const EnvoyDescriptorPlan> plan,
                                 std::vector<size_t> active, bool reserve, bool blocked,
                                 std::vector<EnvoyOutcome>& outcomes,
                                 std::optional<int64_t>& transaction_now) {
  while (!active.empty()) {
    const auto acquire = std::find_if(active.begin(), active.end(),
                                      [&plan](size_t i) { return plan[i].kind == Kind::kAcquire; });
    if (acquire == active.end()) {
      const Mode mode = blocked ? Mode::kCheck : reserve ? Mode::kReserve : Mode::kConsume;
      const Flat flat = ConsumeRequests(plan, active, reserve);
      absl::StatusOr<Verdict> v = scheduler.Evaluate(flat.requests, mode);
      if (!v.ok()) return v.status();
      transaction_now = v->now_us;
      if (RecordConsume(plan, *v, flat, blocked, active, outcomes)) break;
      continue;
    }
    const size_t a = *acquire;
    std::vector<size_t> rates(active.begin(), active.end());
    rates.erase(rates.begin() + (acquire - active.begin()));
    if (blocked) {  // only checked: the slots on their own, the rate limits in one transaction
      if (absl::Status st =
              DecideLeaseAlone(scheduler, plan, a, /*check=*/true, outcomes, transaction_now);
          !st.ok()) {
        return st;
      }
      if (rates.empty()) break;
      const Flat flat = ConsumeRequests(plan, rates, /*reserve=*/false);
      absl::StatusOr<Verdict> v = scheduler.Evaluate(flat.requests, Mode::kCheck);
      if (!v.ok()) return v.status();
      transaction_now = v->now_us;
      RecordConsume(plan, *v, flat, blocked, active, outcomes);
      break;
    }
    const Flat flat = ConsumeRequests(plan, rates, /*reserve=*/false);
    std::vector<LimitOp> ops;
    ops.reserve(flat.requests.size());
    for (const LimitRequest& r : flat.requests) {
      ops.push_back(LimitOp{StateKey{r.name, r.key, r.source}, r.config, r.count});
    }
    absl::StatusOr<LeaseOutcome> o = scheduler.Lease(LeaseOperation{plan[a].lease, ops});
    if (IsNotOneTransaction(o.status()) && !ops.empty()) {
      o = LeaseThenRates(scheduler, plan[a].lease, flat.requests);
    }
    if (!o.ok()) return o.status();
    transaction_now = o->now_us;
    outcomes[a] = LeaseOutcomeOf(o->lease, o->now_us);
    outcomes[a].lease_decided = true;
    if (o->allowed && o->lease.lease) {
      const LeaseOp& l = plan[a].lease;
      outcomes[a].lease_token = EnvoyLeaseToken(o->lease.lease->id, l.key.name, l.key.key);
    }
    Verdict v;
    v.allowed = o->allowed;
    v.now_us = o->now_us;
    v.decisions = std::move(o->decisions);
    if (v.decisions.size() != flat.requests.size()) {
      return absl::InternalError(
          "the store answered a lease operation with another number of rate-limit decisions");
    }
    if (RecordConsume(plan, v, flat, blocked, active, outcomes)) break;
  }
  return absl::OkStatus();
}

// A random 128-bit hexadecimal id.
std::string RandomId() {
  thread_local absl::BitGen gen;
  return absl::StrCat(absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16),
                      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

// How long the record that marks a refund applied is kept: a refund is never retried with it
// (each ShouldRateLimit is a new refund), so it only has to outlive the transaction.
constexpr int64_t kRefundRecordMicros = 60 * 1000000;

// Gives the hits of the kRefund descriptors back in one settlement transaction: each limit of
// each rule settles a take of `hits` made now of which nothing was used (storage/algebra Settle:
// never above capacity; a fixed window only in its current window).
absl::Status Refund(DecisionScheduler& scheduler, const Clock& clock,
                    absl::Span<const EnvoyDescriptorPlan> plan, std::vector<EnvoyOutcome>& outcomes,
                    std::optional<int64_t>& transaction_now) {
  std::vector<SettleItem> items;
  std::vector<size_t> owner;
  std::optional<int64_t> now;  // read only when there is a refund
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kRefund) continue;
    if (!now) now = clock.NowMicros();
    for (const LimitRequest& r : plan[i].requests) {
      SettleItem item;
      item.name = r.name;
      item.key = r.key;
      item.source = r.source;
      item.config = r.config;
      item.taken = r.count;
      item.used = 0;
      item.taken_at_us = *now;
      item.spent =
          RecordSpec{absl::StrCat("envoy-refund ", RandomId()), *now + kRefundRecordMicros};
      items.push_back(std::move(item));
      owner.push_back(i);
    }
  }
  if (items.empty()) return absl::OkStatus();
  absl::StatusOr<SettleVerdict> v = scheduler.Settle(items);
  if (!v.ok()) return v.status();
  if (v->already_settled || v->results.size() != items.size()) {
    return absl::InternalError("a refund's record was already present");
  }
  transaction_now = v->now_us;
  for (size_t k = 0; k < items.size();) {
    const size_t i = owner[k];
    Decisions decisions;
    for (; k < items.size() && owner[k] == i; ++k) {
      Decision d;
      d.allowed = true;
      d.value = v->results[k].value;
      decisions.push_back(d);
    }
    outcomes[i] = OutcomeOf(plan[i], decisions, v->now_us);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<EnvoyOutcome>> EvaluateEnvoyPlan(
    DecisionScheduler& scheduler, const Clock& clock, absl::Span<const EnvoyDescriptorPlan> plan) {
  // Outcomes without a transaction of their own carry the time of the request's last
  // transaction (read by the Limiter inside it); the clock is read here only when there is none.
  std::vector<EnvoyOutcome> outcomes(plan.size(), EnvoyOutcome{});
  std::optional<int64_t> transaction_now;
  if (absl::Status st = Refund(scheduler, clock, plan, outcomes, transaction_now); !st.ok()) {
    return st;
  }
  for (size_t i = 0; i < plan.size(); ++i) {  // releases, each a lease operation of its own
    if (plan[i].kind != Kind::kRelease) continue;
    if (absl::Status st =
            DecideLeaseAlone(scheduler, plan, i, /*check=*/false, outcomes, transaction_now);
        !st.ok()) {
      return st;
    }
    outcomes[i].over = false;  // a release is never over its limit
  }
  bool blocked = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kBlocked) continue;
    outcomes[i].over = true;
    blocked = blocked || !plan[i].soft();
  }
  blocked = blocked || EnvoyQuotaDenies(plan, outcomes);

  // 1. Checks. The check transaction also checks the descriptors that add hits when a check may
  // block them (a check of a descriptor not in shadow mode) or they are blocked already: if they
  // end up blocked, their outcomes are these checks and the request needs no second transaction.
  Flat flat;
  bool blocking_check = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kLimited || !(plan[i].check_only || plan[i].overdraft())) continue;
    flat.Add(plan[i], i, /*count_one=*/true, /*reserve=*/false);
    blocking_check = blocking_check || !plan[i].shadow;
  }
  std::vector<bool> settled(plan.size(), false);
  for (size_t i = 0; i < plan.size(); ++i) {  // checks of a concurrency rule's slots
    if (plan[i].kind != Kind::kAcquire || !plan[i].check_only) continue;
    if (absl::Status st =
            DecideLeaseAlone(scheduler, plan, i, /*check=*/true, outcomes, transaction_now);
        !st.ok()) {
      return st;
    }
    settled[i] = true;
    if (outcomes[i].over && !plan[i].soft()) blocked = true;
  }
  blocked = blocked || EnvoyQuotaDenies(plan, outcomes);
  const size_t checks = flat.spans.size();
  if (checks > 0 && (blocked || blocking_check)) {
    for (size_t i = 0; i < plan.size(); ++i) {
      if (plan[i].kind != Kind::kLimited || plan[i].check_only) continue;
      flat.Add(plan[i], i, /*count_one=*/false, /*reserve=*/false);
    }
  }
  if (!flat.requests.empty()) {
    absl::StatusOr<Verdict> v = scheduler.Evaluate(flat.requests, Mode::kCheck);
    if (!v.ok()) return v.status();
    transaction_now = v->now_us;
    for (size_t j = 0; j < checks; ++j) {
      const size_t i = flat.spans[j].first;
      const EnvoyOutcome o = OutcomeOf(plan[i], flat.Of(*v, j, plan[i].requests.size()), v->now_us);
      if (plan[i].check_only || o.over) {
        outcomes[i] = o;
        settled[i] = true;
      }
      if (o.over && !plan[i].soft()) blocked = true;
    }
    blocked = blocked || EnvoyQuotaDenies(plan, outcomes);
    if (blocked) {
      // Blocked: the descriptors that add hits are only checked (a checked kCheck decision
      // depends on its own state only, so the one transaction answers them all).
      for (size_t j = checks; j < flat.spans.size(); ++j) {
        const size_t i = flat.spans[j].first;
        if (settled[i] && plan[i].soft()) continue;  // a soft overdraft that failed its check
        outcomes[i] = OutcomeOf(plan[i], flat.Of(*v, j, plan[i].requests.size()), v->now_us);
      }
      for (size_t i = 0; i < plan.size(); ++i) {  // an acquire's slots, only checked
        if (plan[i].kind != Kind::kAcquire || plan[i].check_only) continue;
        if (absl::Status st =
                DecideLeaseAlone(scheduler, plan, i, /*check=*/true, outcomes, transaction_now);
            !st.ok()) {
          return st;
        }
      }
      FillTimes(plan, *transaction_now, outcomes);
      return outcomes;
    }
  }

  // 2./3. The descriptors that add hits.
  std::vector<size_t> active;
  bool reserve = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if ((plan[i].kind != Kind::kLimited && plan[i].kind != Kind::kAcquire) || plan[i].check_only) {
      continue;
    }
    if (settled[i] && plan[i].soft()) continue;  // a soft overdraft that failed its check
    active.push_back(i);
    reserve = reserve || plan[i].overdraft();
  }
  if (absl::Status st = ConsumeUntilDecided(scheduler, plan, std::move(active), reserve, blocked,
                                            outcomes, transaction_now);
      !st.ok()) {
    return st;
  }
  FillTimes(plan, transaction_now ? *transaction_now : clock.NowMicros(), outcomes);
  return outcomes;
}

void EvaluateEnvoyPlanAsync(DecisionScheduler& scheduler, const Clock& clock,
                            absl::Span<const EnvoyDescriptorPlan> plan, ServingLoop::Burst* burst,
                            EnvoyDone done) {
  std::vector<size_t> active;
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    // A check, a reservation, or a shadow rule (whose denial retries without it): evaluated
    // here, as EvaluateEnvoyPlan does, so `done` never has to call the store.
    const bool not_one_consume =
        p.kind == Kind::kBlocked || p.kind == Kind::kRefund || p.kind == Kind::kAcquire ||
        p.kind == Kind::kRelease ||
        (p.kind == Kind::kLimited && (p.check_only || p.overdraft() || p.soft()));
    if (not_one_consume) {
      scheduler.RunBlocking([&scheduler, &clock, plan, done = std::move(done)]() mutable {
        std::move(done)(EvaluateEnvoyPlan(scheduler, clock, plan));
      });
      return;
    }
    if (p.kind == Kind::kLimited) active.push_back(i);
  }
  if (active.empty()) {  // no store transaction at all
    std::move(done)(EvaluateEnvoyPlan(scheduler, clock, plan));
    return;
  }
  // The common case: one consume transaction, answered once it is durable (possibly on a store
  // thread).
  // The requests live on the heap, where the burst's view of them stays valid until `answer`.
  auto flat = std::make_unique<Flat>(ConsumeRequests(plan, active, /*reserve=*/false));
  const absl::Span<const LimitRequest> limits(flat->requests);
  auto answer = [plan, active = std::move(active), flat = std::move(flat),
                 done = std::move(done)](absl::StatusOr<Verdict> v) mutable {
    if (!v.ok()) {
      std::move(done)(v.status());
      return;
    }
    std::vector<EnvoyOutcome> outcomes(plan.size(), EnvoyOutcome{});
    // No soft descriptor: this transaction decides every descriptor.
    RecordConsume(plan, *v, *flat, /*blocked=*/false, active, outcomes);
    FillTimes(plan, v->now_us, outcomes);
    std::move(done)(std::move(outcomes));
  };
  scheduler.Decide(limits, Mode::kConsume, burst, std::move(answer));
}

}  // namespace ratelimit
