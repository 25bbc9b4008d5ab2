// How many store transactions one ShouldRateLimit evaluation makes, case by case, and that the
// outcomes and the stored states are those of the documented policy for random plans. A counting
// store (delegating to the in-memory one) and a fake clock; no protos, no gRPC.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/envoy/envoy_evaluator.h"
#include "server/envoy/envoy_plan.h"
#include "storage/apply.h"
#include "tests/support/forwarding_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using Kind = EnvoyDescriptorPlan::Kind;

// A StateStore that counts its transactions (Apply, ApplyBatch, Update, UpdateWithRecords calls)
// and delegates everything to an in-memory store.
class CountingStore final : public testing::ForwardingStore {
 public:
  int transactions() const { return transactions_; }
  void ResetCount() { transactions_ = 0; }

  absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock) override {
    ++transactions_;
    return ForwardingStore::Apply(op, clock);
  }
  std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                  const Clock& clock) override {
    ++transactions_;
    return ForwardingStore::ApplyBatch(ops, clock);
  }
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override {
    ++transactions_;
    return ForwardingStore::Update(keys, decide);
  }
  absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                 absl::Span<const RecordSpec> records, const Clock& clock,
                                 RecordDecideFn decide) override {
    ++transactions_;
    return ForwardingStore::UpdateWithRecords(keys, records, clock, decide);
  }

 private:
  int transactions_ = 0;  // the tests call from one thread
};

EnvoyRateLimit Rule(const std::string& name, uint32_t requests_per_unit, bool shadow = false,
                    std::optional<uint32_t> max_reserved = std::nullopt) {
  EnvoyRateLimit r;
  r.limit_name = "d." + name;
  r.state_name = "d/" + name;
  EnvoyLimit& l = r.limits.emplace_back();
  l.requests_per_unit = requests_per_unit;
  l.unit = EnvoyUnit::kMinute;
  r.shadow_mode = shadow;
  if (max_reserved) {
    l.algorithm = EnvoyAlgorithm::kTokenBucket;
    l.max_reserved = max_reserved;
  }
  return r;
}

// A descriptor evaluated against `rule` (which must outlive the plan) for `key`.
EnvoyDescriptorPlan Limited(const EnvoyRateLimit& rule, uint64_t hits = 1,
                            const std::string& key = "k") {
  EnvoyDescriptorPlan p;
  p.kind = rule.blocks() ? Kind::kBlocked : Kind::kLimited;
  p.config_rule = &rule;
  p.stat_key = rule.limit_name;
  p.hits = hits;
  p.check_only = hits == 0;
  p.shadow = rule.shadow_mode;
  if (p.kind == Kind::kLimited) {
    p.requests.push_back(LimitRequest{rule.state_name, key, EnvoyLimitConfig(rule.limits[0]),
                                      static_cast<double>(hits == 0 ? 1 : hits),
                                      LimitSource::kEnvoy});
  }
  return p;
}

class EnvoyTransactionsTest : public ::testing::Test {
 protected:
  // Evaluates `plan` (which must succeed) and returns the number of store transactions it made.
  int Transactions(const std::vector<EnvoyDescriptorPlan>& plan) {
    store_.ResetCount();
    absl::StatusOr<std::vector<EnvoyOutcome>> o = EvaluateEnvoyPlan(scheduler_, clock_, plan);
    EXPECT_TRUE(o.ok()) << o.status();
    last_ = o.ok() ? *o : std::vector<EnvoyOutcome>();
    return store_.transactions();
  }

  FakeClock clock_;
  CountingStore store_;
  Limiter limiter_{store_, clock_};
  DecisionScheduler scheduler_{limiter_, nullptr};
  std::vector<EnvoyOutcome> last_;
};

TEST_F(EnvoyTransactionsTest, OneDescriptorIsOneTransaction) {
  const EnvoyRateLimit a = Rule("a", 1);
  EXPECT_EQ(Transactions({Limited(a)}), 1);
  EXPECT_FALSE(last_[0].over);
  EXPECT_EQ(Transactions({Limited(a)}), 1);  // denied: still one
  EXPECT_TRUE(last_[0].over);
}

TEST_F(EnvoyTransactionsTest, ManyDescriptorsAreOneTransaction) {
  const EnvoyRateLimit a = Rule("a", 5), b = Rule("b", 5), c = Rule("c", 1);
  EXPECT_EQ(Transactions({Limited(a), Limited(b, 2), Limited(c)}), 1);
  EXPECT_EQ(Transactions({Limited(a), Limited(b, 2), Limited(c)}), 1);  // c denies
  EXPECT_FALSE(last_[0].over);
  EXPECT_TRUE(last_[2].over);
}

TEST_F(EnvoyTransactionsTest, ShadowRuleUnderItsLimitIsOneTransaction) {
  const EnvoyRateLimit shadow = Rule("s", 5, /*shadow=*/true), a = Rule("a", 5);
  EXPECT_EQ(Transactions({Limited(shadow), Limited(a)}), 1);
}

TEST_F(EnvoyTransactionsTest, ShadowRuleOverItsLimitRetriesOnce) {
  const EnvoyRateLimit shadow = Rule("s", 1, /*shadow=*/true), a = Rule("a", 5);
  EXPECT_EQ(Transactions({Limited(shadow), Limited(a)}), 1);
  EXPECT_EQ(Transactions({Limited(shadow), Limited(a)}), 2);
  EXPECT_TRUE(last_[0].over);
  EXPECT_FALSE(last_[1].over);
}

TEST_F(EnvoyTransactionsTest, NoLimitedDescriptorIsNoTransaction) {
  EXPECT_EQ(Transactions({EnvoyDescriptorPlan{}}), 0);
}

TEST_F(EnvoyTransactionsTest, CheckOnlyRequestIsOneTransaction) {
  const EnvoyRateLimit a = Rule("a", 1), b = Rule("b", 1);
  EXPECT_EQ(Transactions({Limited(a, 0), Limited(b, 0)}), 1);
}

TEST_F(EnvoyTransactionsTest, BlockedDescriptorIsOneTransaction) {
  const EnvoyRateLimit blocked = Rule("x", 0), a = Rule("a", 1);
  EXPECT_EQ(Transactions({Limited(blocked), Limited(a)}), 1);
  EXPECT_TRUE(last_[0].over);
  EXPECT_FALSE(last_[1].over);
}

TEST_F(EnvoyTransactionsTest, BlockedDescriptorWithChecksIsOneTransaction) {
  const EnvoyRateLimit blocked = Rule("x", 0), a = Rule("a", 1), b = Rule("b", 3);
  EXPECT_EQ(Transactions({Limited(blocked), Limited(a, 0), Limited(b, 2)}), 1);
  EXPECT_TRUE(last_[0].over);
  EXPECT_FALSE(last_[1].over);
  EXPECT_FALSE(last_[2].over);
  EXPECT_EQ(last_[2].value, 3);  // checked, not consumed
}

TEST_F(EnvoyTransactionsTest, FailedCheckIsOneTransaction) {
  const EnvoyRateLimit a = Rule("a", 1), b = Rule("b", 5);
  EXPECT_EQ(Transactions({Limited(a)}), 1);
  // a is exhausted: its check fails and blocks b, which is only checked.
  EXPECT_EQ(Transactions({Limited(a, 0), Limited(b)}), 1);
  EXPECT_TRUE(last_[0].over);
  EXPECT_FALSE(last_[1].over);
  EXPECT_EQ(last_[1].value, 5);
}

TEST_F(EnvoyTransactionsTest, FailedOverdraftCheckIsOneTransaction) {
  const EnvoyRateLimit debt = Rule("debt", 2, false, 10), b = Rule("b", 5);
  EXPECT_EQ(Transactions({Limited(debt, 5), Limited(b)}), 2);  // check, then reserve
  EXPECT_FALSE(last_[0].over);
  EXPECT_EQ(Transactions({Limited(debt, 1), Limited(b)}), 1);  // in debt: the check fails
  EXPECT_TRUE(last_[0].over);
  EXPECT_FALSE(last_[1].over);
  EXPECT_EQ(last_[1].value, 4);  // b was only checked
}

TEST_F(EnvoyTransactionsTest, PassingChecksThenConsumeAreTwoTransactions) {
  const EnvoyRateLimit a = Rule("a", 3), b = Rule("b", 5);
  EXPECT_EQ(Transactions({Limited(a, 0), Limited(b)}), 2);
  EXPECT_FALSE(last_[0].over);
  EXPECT_EQ(last_[1].value, 4);
}

// The documented policy (envoy_evaluator.h), restated on a map of states: what one request's
// outcomes are and which states it leaves, when nothing else runs concurrently.
struct Expected {
  std::vector<EnvoyOutcome> outcomes;
  std::map<std::string, std::optional<State>> states;  // by "name/key"
};

std::string Id(const LimitRequest& r) { return r.name + "/" + r.key; }

// Decides `limits` (plan indexes) as one all-or-nothing operation against `states`, writing the
// states when allowed and not a check.
Outcome Run(const std::vector<EnvoyDescriptorPlan>& plan, const std::vector<size_t>& limits,
            Mode mode, bool zero_reserve, int64_t now,
            std::map<std::string, std::optional<State>>& states) {
  std::vector<LimitOp> ops;
  for (size_t i : limits) {
    const LimitRequest& r = plan[i].requests[0];
    LimitOp op{StateKey{r.name, r.key, r.source}, r.config, r.count};
    if (zero_reserve && !plan[i].overdraft()) op.config.max_reserved = 0;
    ops.push_back(op);
  }
  Operation operation;
  operation.limits = ops;
  operation.mode = mode;
  const OperationKeys keys = DistinctKeys(ops);
  std::vector<std::optional<State>> current, writes(keys.keys.size());
  for (const StateKey& k : keys.keys) current.push_back(states[k.name + "/" + k.key]);
  Outcome out = DecideOperation(operation, keys, current, now, absl::MakeSpan(writes));
  for (size_t s = 0; s < keys.keys.size(); ++s) {
    if (writes[s]) states[keys.keys[s].name + "/" + keys.keys[s].key] = writes[s];
  }
  return out;
}

Expected Policy(const std::vector<EnvoyDescriptorPlan>& plan,
                std::map<std::string, std::optional<State>> states, int64_t now) {
  Expected e;
  e.outcomes.assign(plan.size(), EnvoyOutcome{false, 0, now});
  bool blocked = false;
  std::vector<bool> failed_check(plan.size(), false);
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind == Kind::kBlocked) {
      e.outcomes[i].over = true;
      blocked = blocked || !plan[i].shadow;
    }
    if (plan[i].kind != Kind::kLimited || !(plan[i].check_only || plan[i].overdraft())) continue;
    // One more hit, checked against the state as it is.
    const LimitRequest& r = plan[i].requests[0];
    const Decision d =
        Decide(r.config, LimitId{r.name, r.key}, states[Id(r)], 1, Mode::kCheck, now);
    if (plan[i].check_only || !d.allowed) e.outcomes[i] = EnvoyOutcome{!d.allowed, d.value, now};
    failed_check[i] = !d.allowed;
    blocked = blocked || (!d.allowed && !plan[i].shadow);
  }
  std::vector<size_t> active;
  bool reserve = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Kind::kLimited || plan[i].check_only) continue;
    if (failed_check[i] && plan[i].shadow) continue;
    active.push_back(i);
    reserve = reserve || plan[i].overdraft();
  }
  while (!active.empty()) {
    const Mode mode = blocked ? Mode::kCheck : reserve ? Mode::kReserve : Mode::kConsume;
    const Outcome out = Run(plan, active, mode, reserve, now, states);
    for (size_t j = 0; j < active.size(); ++j) {
      e.outcomes[active[j]] = EnvoyOutcome{!out.decisions[j].allowed, out.decisions[j].value, now};
    }
    if (blocked || out.allowed) break;
    std::vector<size_t> next;
    bool real_denial = false;
    for (size_t j = 0; j < active.size(); ++j) {
      if (out.decisions[j].allowed) next.push_back(active[j]);
      if (!out.decisions[j].allowed && !plan[active[j]].shadow) real_denial = true;
    }
    if (real_denial) break;
    active = std::move(next);
  }
  e.states = std::move(states);
  return e;
}

TEST_F(EnvoyTransactionsTest, RandomPlansFollowThePolicy) {
  std::mt19937_64 rng(20261123);
  // Small limits, some shadow, some with debt, one blocked; few keys, so descriptors collide.
  std::vector<EnvoyRateLimit> rules = {
      Rule("a", 2),           Rule("b", 3),          Rule("c", 1, true), Rule("d", 2, true),
      Rule("e", 2, false, 3), Rule("f", 1, true, 2), Rule("g", 0),       Rule("h", 0, true),
  };
  const std::vector<std::string> keys = {"k1", "k2"};
  for (int round = 0; round < 3000; ++round) {
    const size_t n = 1 + rng() % 4;
    std::vector<EnvoyDescriptorPlan> plan;
    for (size_t d = 0; d < n; ++d) {
      const EnvoyRateLimit& rule = rules[rng() % rules.size()];
      const uint64_t hits = rng() % 4;  // 0: check only
      plan.push_back(Limited(rule, hits, keys[rng() % keys.size()]));
    }
    std::map<std::string, std::optional<State>> before;
    for (const EnvoyRateLimit& rule : rules) {
      for (const std::string& key : keys) {
        absl::StatusOr<std::optional<State>> s =
            store_.Get(StateKey{rule.state_name, key, LimitSource::kEnvoy});
        ASSERT_TRUE(s.ok());
        before[rule.state_name + "/" + key] = *s;
      }
    }
    const Expected expected = Policy(plan, before, clock_.NowMicros());
    absl::StatusOr<std::vector<EnvoyOutcome>> got = EvaluateEnvoyPlan(scheduler_, clock_, plan);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < plan.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " descriptor " << i);
      EXPECT_EQ((*got)[i].over, expected.outcomes[i].over);
      EXPECT_EQ((*got)[i].value, expected.outcomes[i].value);
      EXPECT_EQ((*got)[i].now_us, expected.outcomes[i].now_us);
    }
    for (const auto& [id, state] : expected.states) {
      const size_t slash = id.rfind('/');
      absl::StatusOr<std::optional<State>> s =
          store_.Get(StateKey{id.substr(0, slash), id.substr(slash + 1), LimitSource::kEnvoy});
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(*s, state) << "round " << round << " state " << id;
    }
    if (::testing::Test::HasFailure()) return;
    clock_.Advance(static_cast<int64_t>(rng() % 20) * kSecond);
  }
}

}  // namespace
}  // namespace ratelimit
