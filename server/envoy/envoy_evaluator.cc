#include "server/envoy/envoy_evaluator.h"

#include <algorithm>

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

}  // namespace

absl::StatusOr<std::vector<EnvoyOutcome>> EvaluateEnvoyPlan(
    Limiter& limiter, const Clock& clock, absl::Span<const EnvoyDescriptorPlan> plan) {
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
  std::vector<LimitRequest> requests;
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
    absl::StatusOr<Verdict> v = limiter.Evaluate(requests, Mode::kCheck);
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
  while (!active.empty()) {
    requests.clear();
    for (size_t i : active) {
      requests.push_back(plan[i].request);
      if (reserve && !plan[i].overdraft()) requests.back().config.max_reserved = 0;
    }
    const Mode mode = blocked ? Mode::kCheck : reserve ? Mode::kReserve : Mode::kConsume;
    absl::StatusOr<Verdict> v = limiter.Evaluate(requests, mode);
    if (!v.ok()) return v.status();
    transaction_now = v->now_us;
    Record(*v, active, outcomes);
    if (blocked || v->allowed) break;
    bool real_denial = false;
    for (size_t j = 0; j < active.size(); ++j) {
      if (!v->decisions[j].allowed && !plan[active[j]].shadow()) real_denial = true;
    }
    if (real_denial) break;
    // Only shadow rules denied: leave them out (their outcome stays "over") and retry.
    std::vector<size_t> next;
    for (size_t j = 0; j < active.size(); ++j) {
      if (v->decisions[j].allowed) next.push_back(active[j]);
    }
    active = std::move(next);
  }
  FillTimes(plan, transaction_now ? *transaction_now : clock.NowMicros(), outcomes);
  return outcomes;
}

}  // namespace ratelimit
