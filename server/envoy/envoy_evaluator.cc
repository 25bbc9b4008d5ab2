#include "server/envoy/envoy_evaluator.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace ratelimit {
namespace {

using Kind = EnvoyDescriptorPlan::Kind;

void Record(const Verdict& v, absl::Span<const size_t> index, std::vector<EnvoyOutcome>& outcomes) {
  for (size_t j = 0; j < index.size(); ++j) {
    const Decision& d = v.decisions[j];
    outcomes[index[j]] = EnvoyOutcome{!d.allowed, d.value, v.now_us};
  }
}

// Outcomes without a transaction of their own carry the time of the request's last transaction.
void FillTimes(absl::Span<const EnvoyDescriptorPlan> plan, int64_t now,
               std::vector<EnvoyOutcome>& outcomes) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kLimited) outcomes[i].now_us = now;
  }
}

// The requests of one consume transaction over the descriptors `active`.
LimitRequests ConsumeRequests(absl::Span<const EnvoyDescriptorPlan> plan,
                              absl::Span<const size_t> active, bool reserve) {
  LimitRequests requests;
  requests.reserve(active.size());
  for (size_t i : active) {
    requests.push_back(plan[i].request);
    if (reserve && !plan[i].overdraft()) requests.back().config.max_reserved = 0;
  }
  return requests;
}

// Records the verdict `v` of a consume transaction over `active`. Returns true when the
// descriptors are decided; false when only shadow rules denied, after narrowing `active` to the
// others, which are tried again without them (the outcome of a left-out one stays "over").
bool RecordConsume(absl::Span<const EnvoyDescriptorPlan> plan, const Verdict& v, bool blocked,
                   std::vector<size_t>& active, std::vector<EnvoyOutcome>& outcomes) {
  Record(v, active, outcomes);
  if (blocked || v.allowed) return true;
  for (size_t j = 0; j < active.size(); ++j) {
    if (!v.decisions[j].allowed && !plan[active[j]].shadow()) return true;  // a real denial
  }
  std::vector<size_t> next;
  for (size_t j = 0; j < active.size(); ++j) {
    if (v.decisions[j].allowed) next.push_back(active[j]);
  }
  active = std::move(next);
  return active.empty();
}

// Consume transactions over `active` until they are decided (RecordConsume).
absl::Status ConsumeUntilDecided(DecisionScheduler& scheduler,
                                 absl::Span<const EnvoyDescriptorPlan> plan,
                                 std::vector<size_t> active, bool reserve, bool blocked,
                                 std::vector<EnvoyOutcome>& outcomes,
                                 std::optional<int64_t>& transaction_now) {
  while (!active.empty()) {
    const Mode mode = blocked ? Mode::kCheck : reserve ? Mode::kReserve : Mode::kConsume;
    absl::StatusOr<Verdict> v = scheduler.Evaluate(ConsumeRequests(plan, active, reserve), mode);
    if (!v.ok()) return v.status();
    transaction_now = v->now_us;
    if (RecordConsume(plan, *v, blocked, active, outcomes)) break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<EnvoyOutcome>> EvaluateEnvoyPlan(
    DecisionScheduler& scheduler, const Clock& clock, absl::Span<const EnvoyDescriptorPlan> plan) {
  // Outcomes without a transaction of their own carry the time of the request's last
  // transaction (read by the Limiter inside it); the clock is read here only when there is none.
  std::vector<EnvoyOutcome> outcomes(plan.size(), EnvoyOutcome{false, 0, 0});
  std::optional<int64_t> transaction_now;
  bool blocked = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kBlocked) continue;
    outcomes[i].over = true;
    blocked = blocked || !plan[i].shadow();
  }

  // 1. Checks. The check transaction also checks the descriptors that add hits when a check may
  // block them (a non-shadow check) or they are blocked already: if they end up blocked, their
  // outcomes are these checks and the request needs no second transaction.
  std::vector<size_t> index;
  LimitRequests requests;
  bool blocking_check = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kLimited || !(plan[i].check_only || plan[i].overdraft())) continue;
    index.push_back(i);
    requests.push_back(plan[i].request);
    requests.back().count = 1;
    blocking_check = blocking_check || !plan[i].shadow();
  }
  const size_t checks = index.size();
  if (checks > 0 && (blocked || blocking_check)) {
    for (size_t i = 0; i < plan.size(); ++i) {
      if (plan[i].kind != Kind::kLimited || plan[i].check_only) continue;
      index.push_back(i);
      requests.push_back(plan[i].request);
    }
  }
  std::vector<bool> settled(plan.size(), false);
  if (!requests.empty()) {
    absl::StatusOr<Verdict> v = scheduler.Evaluate(requests, Mode::kCheck);
    if (!v.ok()) return v.status();
    transaction_now = v->now_us;
    for (size_t j = 0; j < checks; ++j) {
      const size_t i = index[j];
      const Decision& d = v->decisions[j];
      if (plan[i].check_only || !d.allowed) {
        outcomes[i] = EnvoyOutcome{!d.allowed, d.value, v->now_us};
        settled[i] = true;
      }
      if (!d.allowed && !plan[i].shadow()) blocked = true;
    }
    if (blocked) {
      // Blocked: the descriptors that add hits are only checked (a checked kCheck decision
      // depends on its own state only, so the one transaction answers them all).
      for (size_t j = checks; j < index.size(); ++j) {
        const size_t i = index[j];
        if (settled[i] && plan[i].shadow()) continue;  // a shadow overdraft that failed its check
        const Decision& d = v->decisions[j];
        outcomes[i] = EnvoyOutcome{!d.allowed, d.value, v->now_us};
      }
      FillTimes(plan, *transaction_now, outcomes);
      return outcomes;
    }
  }

  // 2./3. The descriptors that add hits.
  std::vector<size_t> active;
  bool reserve = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kLimited || plan[i].check_only) continue;
    if (settled[i] && plan[i].shadow()) continue;  // a shadow overdraft that failed its check
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
        p.kind == Kind::kBlocked ||
        (p.kind == Kind::kLimited && (p.check_only || p.overdraft() || p.shadow()));
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
  auto requests = std::make_unique<LimitRequests>(ConsumeRequests(plan, active, /*reserve=*/false));
  const absl::Span<const LimitRequest> limits(*requests);
  auto answer = [plan, active = std::move(active), requests = std::move(requests),
                 done = std::move(done)](absl::StatusOr<Verdict> v) mutable {
    if (!v.ok()) {
      std::move(done)(v.status());
      return;
    }
    std::vector<EnvoyOutcome> outcomes(plan.size(), EnvoyOutcome{false, 0, 0});
    // No shadow rule: this transaction decides every descriptor.
    RecordConsume(plan, *v, /*blocked=*/false, active, outcomes);
    FillTimes(plan, v->now_us, outcomes);
    std::move(done)(std::move(outcomes));
  };
  scheduler.Decide(limits, Mode::kConsume, burst, std::move(answer));
}

}  // namespace ratelimit
