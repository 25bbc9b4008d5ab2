// The Envoy evaluation policy on its own: plans built by hand, a limiter on an in-memory store,
// a fake clock. No protos, no gRPC.
#include "server/envoy/envoy_evaluator.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/envoy/envoy_plan.h"
#include "storage/leases/lease_id.h"
#include "storage/memory/memory_state_store.h"
#include "storage/status_util.h"
#include "tests/support/forwarding_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
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

// A limiter over `store` and a fake clock, evaluating plans that must succeed.
class EvaluatorFixture : public ::testing::Test {
 protected:
  explicit EvaluatorFixture(std::unique_ptr<StateStore> store) : store_(std::move(store)) {}

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
  std::unique_ptr<StateStore> store_;
  Limiter limiter_{*store_, clock_};
  DecisionScheduler scheduler_{limiter_, nullptr};
};

// On a store that fails when told to.
class EnvoyEvaluatorTest : public EvaluatorFixture {
 protected:
  EnvoyEvaluatorTest()
      : EvaluatorFixture(std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>())),
        failing_(static_cast<FailingStateStore*>(store_.get())) {}
  FailingStateStore* const failing_;
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
  failing_->FailWith(absl::UnavailableError("disk gone"));
  absl::StatusOr<std::vector<EnvoyOutcome>> o = EvaluateEnvoyPlan(scheduler_, clock_, {Limited(a)});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnavailable);
  failing_->Heal();
  EXPECT_EQ(Left(a), 2);
}

// A concurrency rule of `capacity` slots and a 10 s lease TTL.
EnvoyRateLimit Concurrency(const std::string& name, uint32_t capacity) {
  EnvoyRateLimit r;
  r.limit_name = "d." + name;
  r.state_name = EnvoyStateName("d", {EnvoyEntry{name, ""}}, /*override_limit=*/false);
  r.concurrency = EnvoyConcurrency{capacity, 10 * kSecond};
  return r;
}

// A descriptor of concurrency rule `rule` for key "k" taking `slots` (0: checking one).
EnvoyDescriptorPlan Acquire(const EnvoyRateLimit& rule, uint64_t slots = 1) {
  EnvoyDescriptorPlan p;
  p.kind = Kind::kAcquire;
  p.config_rule = &rule;
  p.stat_key = rule.limit_name;
  p.hits = slots;
  p.check_only = slots == 0;
  p.shadow = rule.shadow_mode;
  p.lease.key = StateKey{rule.state_name, "k", LimitSource::kEnvoy};
  p.lease.config = EnvoyConcurrencyConfig(*rule.concurrency);
  p.lease.action = slots == 0 ? LeaseAction::kCheck : LeaseAction::kAcquire;
  p.lease.count = slots == 0 ? 1 : static_cast<int64_t>(slots);
  p.lease.ttl_us = rule.concurrency->lease_ttl_us;
  p.lease.lease_id = LeaseId::New();
  return p;
}

// The release descriptor of the lease whose token is `token`.
EnvoyDescriptorPlan Release(const EnvoyRateLimit& rule, const std::string& token) {
  const std::optional<EnvoyLeaseRef> ref = ParseEnvoyLeaseToken(token);
  EXPECT_TRUE(ref.has_value()) << token;
  EnvoyDescriptorPlan p;
  p.kind = Kind::kRelease;
  p.config_rule = &rule;
  p.lease.key = StateKey{ref->state_name, ref->key, LimitSource::kEnvoy};
  p.lease.config = EnvoyConcurrencyConfig(*rule.concurrency);
  p.lease.action = LeaseAction::kRelease;
  p.lease.lease_id = ref->lease_id;
  return p;
}

// Concurrency rules need a store that keeps leases: the memory store itself.
class EnvoyLeaseEvaluatorTest : public EvaluatorFixture {
 protected:
  EnvoyLeaseEvaluatorTest() : EvaluatorFixture(std::make_unique<MemoryStateStore>()) {}
  // Slots of `rule` free for key "k", by a check that takes nothing.
  double Free(const EnvoyRateLimit& rule) { return Evaluate({Acquire(rule, 0)})[0].value; }
};

// A request never holds a slot it was refused a token for, and never takes a token for a slot it
// was refused: the lease and the rate limits are one transaction.
TEST_F(EnvoyLeaseEvaluatorTest, AnAcquireTakesItsSlotsWithTheRateLimitsOrNothing) {
  const EnvoyRateLimit slots = Concurrency("slots", 2), rate = Rule("rate", 1), b = Rule("b", 5);
  std::vector<EnvoyOutcome> o = Evaluate({Acquire(slots), Limited(rate)});
  EXPECT_FALSE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_EQ(o[0].value, 1);  // free after the take
  ASSERT_TRUE(ParseEnvoyLeaseToken(o[0].lease_token).has_value()) << o[0].lease_token;
  // The rate limit is spent: the slots were free, but none is taken.
  o = Evaluate({Acquire(slots), Limited(rate)});
  EXPECT_FALSE(o[0].over);
  EXPECT_TRUE(o[1].over);
  EXPECT_TRUE(o[0].lease_token.empty());
  EXPECT_EQ(Free(slots), 1);
  // The slots are spent: b's token is not taken.
  EXPECT_FALSE(Evaluate({Acquire(slots)})[0].over);
  o = Evaluate({Acquire(slots), Limited(b)});
  EXPECT_TRUE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_TRUE(o[0].lease_token.empty());
  ASSERT_TRUE(o[0].retry_at_us.has_value());
  EXPECT_EQ(*o[0].retry_at_us, clock_.NowMicros() + 10 * kSecond);  // the first lease's expiry
  EXPECT_EQ(Left(b), 5);
}

TEST_F(EnvoyLeaseEvaluatorTest, AReleaseGivesTheSlotsBackOnceAndALeaseEndsByItsTtl) {
  const EnvoyRateLimit slots = Concurrency("slots", 1);
  const std::string token = Evaluate({Acquire(slots)})[0].lease_token;
  EXPECT_TRUE(Evaluate({Acquire(slots)})[0].over);
  std::vector<EnvoyOutcome> o = Evaluate({Release(slots, token)});
  EXPECT_FALSE(o[0].over);
  EXPECT_TRUE(o[0].released);
  EXPECT_EQ(o[0].value, 1);
  o = Evaluate({Release(slots, token)});  // released already: nothing changes
  EXPECT_FALSE(o[0].over);
  EXPECT_FALSE(o[0].released);
  // A lease never released frees its slot when its TTL runs out, and is counted as a leak.
  EXPECT_FALSE(Evaluate({Acquire(slots)})[0].over);
  clock_.Advance(10 * kSecond - 1);
  EXPECT_TRUE(Evaluate({Acquire(slots)})[0].over);
  clock_.Advance(1);
  o = Evaluate({Acquire(slots)});
  EXPECT_FALSE(o[0].over);
  EXPECT_EQ(o[0].leases_expired, 1);
}

// A check (hits 0) of the slots that finds them full blocks the request, whose rate limits are
// then only checked.
TEST_F(EnvoyLeaseEvaluatorTest, AFullSlotCheckBlocksTheRequestAndTakesNothing) {
  const EnvoyRateLimit slots = Concurrency("slots", 1), rate = Rule("rate", 3);
  EXPECT_FALSE(Evaluate({Acquire(slots)})[0].over);
  std::vector<EnvoyOutcome> o = Evaluate({Acquire(slots, 0), Limited(rate)});
  EXPECT_TRUE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_EQ(Left(rate), 3);
}

// A concurrency rule in shadow mode never denies: full, the request goes on without a lease and
// the other descriptors are taken.
TEST_F(EnvoyLeaseEvaluatorTest, AShadowConcurrencyRuleNeverDenies) {
  EnvoyRateLimit slots = Concurrency("slots", 1);
  slots.shadow_mode = true;
  const EnvoyRateLimit rate = Rule("rate", 3);
  EXPECT_FALSE(Evaluate({Acquire(slots), Limited(rate)})[0].over);
  std::vector<EnvoyOutcome> o = Evaluate({Acquire(slots), Limited(rate)});
  EXPECT_TRUE(o[0].over);
  EXPECT_TRUE(o[0].lease_token.empty());
  EXPECT_FALSE(o[1].over);
  EXPECT_EQ(Left(rate), 1);
}

// A store that refuses an acquire together with rate limits by `refusal` (a Redis Cluster
// refuses keys on different hash slots so), and decides everything else.
class NotTogetherStore : public testing::ForwardingStore {
 public:
  absl::StatusOr<LeaseOutcome> ApplyLease(const LeaseOperation& op, const Clock& clock) override {
    if (!op.limits.empty()) return refusal;
    return ForwardingStore::ApplyLease(op, clock);
  }
  absl::Status refusal = NotOneTransactionError("the keys are on different shards");
};

class EnvoySplitAcquireTest : public EvaluatorFixture {
 protected:
  EnvoySplitAcquireTest() : EvaluatorFixture(std::make_unique<NotTogetherStore>()) {}
  NotTogetherStore& store() { return static_cast<NotTogetherStore&>(*store_); }
  double Free(const EnvoyRateLimit& rule) { return Evaluate({Acquire(rule, 0)})[0].value; }
};

// A store that says it cannot decide the lease and the rate limits in one transaction gets them
// one after the other, with the same outcome: a slot refused a token is given back.
TEST_F(EnvoySplitAcquireTest, AnAcquireTheStoreCannotDecideInOneTransactionIsSplit) {
  const EnvoyRateLimit slots = Concurrency("slots", 2), rate = Rule("rate", 1);
  std::vector<EnvoyOutcome> o = Evaluate({Acquire(slots), Limited(rate)});
  EXPECT_FALSE(o[0].over);
  EXPECT_FALSE(o[1].over);
  EXPECT_FALSE(o[0].lease_token.empty());
  o = Evaluate({Acquire(slots), Limited(rate)});
  EXPECT_TRUE(o[1].over);
  EXPECT_TRUE(o[0].lease_token.empty());
  EXPECT_EQ(Free(slots), 1);
}

// Any other failed precondition is the request's failure: it is not split, and takes nothing.
TEST_F(EnvoySplitAcquireTest, AnotherFailedPreconditionFailsTheRequestUnsplit) {
  store().refusal = absl::FailedPreconditionError("some other precondition");
  const EnvoyRateLimit slots = Concurrency("slots", 2), rate = Rule("rate", 1);
  absl::StatusOr<std::vector<EnvoyOutcome>> o =
      EvaluateEnvoyPlan(scheduler_, clock_, {Acquire(slots), Limited(rate)});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition) << o.status();
  EXPECT_EQ(Free(slots), 2);
  EXPECT_EQ(Left(rate), 1);
}

TEST(EnvoyLeaseTokenTest, NamesTheLeaseAndItsKeyAndRefusesWhatItDidNotMake) {
  const std::string state_name = EnvoyStateName("web", {EnvoyEntry{"org", ""}}, false);
  const LeaseId id = LeaseId::New();
  const std::string token = EnvoyLeaseToken(id, state_name, "acme|eu\\x");
  const std::optional<EnvoyLeaseRef> ref = ParseEnvoyLeaseToken(token);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->lease_id, id);
  EXPECT_EQ(ref->state_name, state_name);
  EXPECT_EQ(ref->key, "acme|eu\\x");
  EXPECT_EQ(ref->domain, "web");
  EXPECT_EQ(token.find_first_of("+/="), std::string::npos) << token;  // URL-safe, no padding
  EXPECT_FALSE(ParseEnvoyLeaseToken(""));
  EXPECT_FALSE(ParseEnvoyLeaseToken(token + ".x"));
  EXPECT_FALSE(ParseEnvoyLeaseToken("X" + token.substr(1)));  // not a server lease id
  EXPECT_FALSE(ParseEnvoyLeaseToken(EnvoyLeaseToken(id, "not a state name", "k")));
  EXPECT_FALSE(ParseEnvoyLeaseToken(
      EnvoyLeaseToken(id, EnvoyStateName("web", {EnvoyEntry{"org", ""}}, true), "k")));
  EXPECT_FALSE(ParseEnvoyLeaseToken(EnvoyLeaseToken(id, state_name, "")));
  EXPECT_FALSE(ParseEnvoyLeaseToken(id.ToString() + ".!!." + token.substr(LeaseId::kDigits + 1)));
  // The id's digits are the token's first part; all zeros is no lease's id.
  EXPECT_EQ(token.substr(0, LeaseId::kDigits), id.ToString());
  EXPECT_FALSE(
      ParseEnvoyLeaseToken(std::string(LeaseId::kDigits, '0') + token.substr(LeaseId::kDigits)));
}

}  // namespace
}  // namespace ratelimit
