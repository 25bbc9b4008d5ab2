// The Envoy evaluation policy on its own: plans built by hand, a limiter on an in-memory store,
// a fake clock. No protos, no gRPC.
#include "server/envoy/envoy_evaluator.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/envoy/envoy_plan.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeClock;
using Kind = EnvoyDescriptorPlan::Kind;

EnvoyRateLimit Rule(const std::string& name, uint32_t requests_per_unit) {
  EnvoyRateLimit r;
  r.limit_name = "d." + name;
  r.state_name = "d/" + name;
  EnvoyLimit& l = r.limits.emplace_back();
  l.requests_per_unit = requests_per_unit;
  l.unit = EnvoyUnit::kMinute;
  return r;
}

// A descriptor evaluated against `rule` (which must outlive the plan) for key "k".
EnvoyDescriptorPlan Limited(const EnvoyRateLimit& rule, uint64_t hits = 1) {
  EnvoyDescriptorPlan p;
  p.kind = rule.blocks() ? Kind::kBlocked : Kind::kLimited;
  p.config_rule = &rule;
  p.stat_key = rule.limit_name;
  p.hits = hits;
  p.check_only = hits == 0;
  p.shadow = rule.shadow_mode;
  if (p.kind == Kind::kLimited) {
    p.requests.push_back(LimitRequest{rule.state_name, "k", EnvoyLimitConfig(rule.limits[0]),
                                      static_cast<double>(hits == 0 ? 1 : hits),
                                      LimitSource::kEnvoy});
  }
  return p;
}

class EnvoyEvaluatorTest : public ::testing::Test {
 protected:
  // Evaluates `plan`, which must succeed.
  std::vector<EnvoyOutcome> Evaluate(const std::vector<EnvoyDescriptorPlan>& plan) {
    absl::StatusOr<std::vector<EnvoyOutcome>> outcomes =
        EvaluateEnvoyPlan(scheduler_, clock_, plan);
    EXPECT_TRUE(outcomes.ok()) << outcomes.status();
    return outcomes.ok() ? *outcomes : std::vector<EnvoyOutcome>(plan.size());
  }
  // Tokens `rule` has left for key "k", by a check that consumes nothing.
  double Left(const EnvoyRateLimit& rule) { return Evaluate({Limited(rule, 0)})[0].value; }

  FakeClock clock_;
  FailingStateStore store_{std::make_unique<MemoryStateStore>()};
  Limiter limiter_{store_, clock_};
  DecisionScheduler scheduler_{limiter_, nullptr};
};

TEST_F(EnvoyEvaluatorTest, ConsumesEveryDescriptorOrNone) {
  const EnvoyRateLimit a = Rule("a", 2), b = Rule("b", 5);
  for (int i = 0; i < 2; ++i) {
    std::vector<EnvoyOutcome> o = Evaluate({Limited(a), Limited(b)});
    EXPECT_FALSE(o[0].over);
    EXPECT_FALSE(o[1].over);
  }
  std::vector<EnvoyOutcome> o = Evaluate({Limited(a), Limited(b)});
  EXPECT_TRUE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_EQ(Left(b), 3);  // the denied request took nothing from b
}

TEST_F(EnvoyEvaluatorTest, CheckOnlyDescriptorsConsumeNothing) {
  const EnvoyRateLimit a = Rule("a", 2);
  std::vector<EnvoyOutcome> o = Evaluate({Limited(a, 0)});
  EXPECT_FALSE(o[0].over);
  EXPECT_EQ(Left(a), 2);
}

TEST_F(EnvoyEvaluatorTest, BlockedDescriptorDeniesAndOthersAreOnlyChecked) {
  const EnvoyRateLimit blocked = Rule("blocked", 0), a = Rule("a", 2);
  std::vector<EnvoyOutcome> o = Evaluate({Limited(blocked), Limited(a)});
  EXPECT_TRUE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_EQ(Left(a), 2);
}

TEST_F(EnvoyEvaluatorTest, ShadowDenialNeitherDeniesNorDrainsTheOthers) {
  EnvoyRateLimit shadow = Rule("shadow", 1);
  shadow.shadow_mode = true;
  const EnvoyRateLimit a = Rule("a", 5);
  Evaluate({Limited(shadow), Limited(a)});
  std::vector<EnvoyOutcome> o = Evaluate({Limited(shadow), Limited(a)});
  EXPECT_TRUE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_EQ(Left(a), 3);  // both requests were counted on a
}

TEST_F(EnvoyEvaluatorTest, UnlimitedAndUnmatchedDescriptorsCarryOnlyTheTime) {
  const EnvoyRateLimit unlimited = [] {
    EnvoyRateLimit r = Rule("u", 1);
    r.unlimited = true;
    return r;
  }();
  EnvoyDescriptorPlan none;
  EnvoyDescriptorPlan open;
  open.kind = Kind::kUnlimited;
  open.config_rule = &unlimited;
  std::vector<EnvoyOutcome> o = Evaluate({none, open});
  for (const EnvoyOutcome& outcome : o) {
    EXPECT_FALSE(outcome.over);
    EXPECT_EQ(outcome.now_us, clock_.NowMicros());
  }
}

TEST_F(EnvoyEvaluatorTest, StoreFailureIsReturnedAndNothingIsConsumed) {
  const EnvoyRateLimit a = Rule("a", 2);
  store_.FailWith(absl::UnavailableError("disk gone"));
  absl::StatusOr<std::vector<EnvoyOutcome>> o = EvaluateEnvoyPlan(scheduler_, clock_, {Limited(a)});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnavailable);
  store_.Heal();
  EXPECT_EQ(Left(a), 2);
}

}  // namespace
}  // namespace ratelimit
