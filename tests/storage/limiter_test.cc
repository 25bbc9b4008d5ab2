// Requests of several limits: all-or-nothing, the deciding denial, duplicates, and that a
// denied request writes nothing.
#include "storage/limiter.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;

LimitRequest Req(std::string name, std::string key, double rate, double count,
                 std::optional<double> max_reserved = {}) {
  LimitRequest r;
  r.name = std::move(name);
  r.key = std::move(key);
  r.config.kind = LimitKind::kTokenBucket;
  r.config.rate = rate;
  r.config.period_us = kSecond;
  r.config.max_reserved = max_reserved;
  r.count = count;
  return r;
}

class LimiterTest : public ::testing::Test {
 protected:
  double Value(const std::string& name, const std::string& key) {
    auto s = store_.Get({name, key});
    EXPECT_TRUE(s.ok());
    return s.ok() && s->has_value() ? (*s)->value : -1e300;
  }
  FakeClock clock_;
  MemoryStateStore store_;
  Limiter limiter_{store_, clock_};
};

TEST_F(LimiterTest, AllLimitsConsumedTogether) {
  std::vector<LimitRequest> reqs = {Req("user", "u1", 10, 2), Req("org", "o1", 100, 2)};
  auto v = limiter_.Evaluate(reqs, Mode::kConsume);
  ASSERT_OK(v);
  EXPECT_TRUE(v->allowed);
  EXPECT_EQ(v->denied_by, -1);
  EXPECT_DOUBLE_EQ(Value("user", "u1"), 8);
  EXPECT_DOUBLE_EQ(Value("org", "o1"), 98);
}

TEST_F(LimiterTest, OneDenialConsumesNothingAnywhere) {
  ASSERT_OK(limiter_.Evaluate({Req("org", "o1", 3, 3)}, Mode::kConsume));  // org now empty
  std::vector<LimitRequest> reqs = {Req("user", "u1", 10, 1), Req("org", "o1", 3, 1)};
  auto v = limiter_.Evaluate(reqs, Mode::kConsume);
  ASSERT_OK(v);
  EXPECT_FALSE(v->allowed);
  EXPECT_EQ(v->denied_by, 1);
  EXPECT_TRUE(v->decisions[0].allowed);
  EXPECT_DOUBLE_EQ(v->decisions[0].value, 10);  // reported untouched
  EXPECT_FALSE(v->decisions[1].allowed);
  EXPECT_EQ(v->retry_at_us, clock_.NowMicros() + kSecond / 3 + 1);
  auto user = store_.Get({"user", "u1"});
  ASSERT_OK(user);
  EXPECT_FALSE(user->has_value());  // nothing written
  EXPECT_DOUBLE_EQ(Value("org", "o1"), 0);
}

TEST_F(LimiterTest, DenialNamesTheLatestRetryAndNeverBeatsLatest) {
  ASSERT_OK(limiter_.Evaluate({Req("a", "k", 10, 10)}, Mode::kConsume));  // 1 token in 0.1 s
  ASSERT_OK(limiter_.Evaluate({Req("b", "k", 1, 1)}, Mode::kConsume));    // 1 token in 1 s
  auto v = limiter_.Evaluate({Req("a", "k", 10, 1), Req("b", "k", 1, 1)}, Mode::kConsume);
  ASSERT_OK(v);
  EXPECT_EQ(v->denied_by, 1);
  EXPECT_EQ(v->retry_at_us, clock_.NowMicros() + kSecond);
  // A limit that can never allow decides, and there is no retry_at.
  auto never = limiter_.Evaluate({Req("a", "k", 10, 1), Req("c", "k", 1, 5)}, Mode::kConsume);
  ASSERT_OK(never);
  EXPECT_EQ(never->denied_by, 1);
  EXPECT_FALSE(never->retry_at_us.has_value());
}

TEST_F(LimiterTest, SameKeyTwiceSeesTheFirstEffect) {
  auto v = limiter_.Evaluate({Req("a", "k", 10, 6), Req("a", "k", 10, 6)}, Mode::kConsume);
  ASSERT_OK(v);
  EXPECT_FALSE(v->allowed);  // 10 - 6 leaves 4 < 6
  EXPECT_FALSE(store_.Get({"a", "k"})->has_value());
  auto ok = limiter_.Evaluate({Req("a", "k", 10, 4), Req("a", "k", 10, 6)}, Mode::kConsume);
  ASSERT_OK(ok);
  EXPECT_TRUE(ok->allowed);
  EXPECT_NEAR(Value("a", "k"), 0, 1e-9);
}

TEST_F(LimiterTest, CheckWritesNothing) {
  auto v = limiter_.Evaluate({Req("a", "k", 10, 1)}, Mode::kCheck);
  ASSERT_OK(v);
  EXPECT_TRUE(v->allowed);
  EXPECT_EQ(store_.Size(), 0u);
}

TEST_F(LimiterTest, MaxReservedRefusalWritesNothing) {
  ASSERT_OK(limiter_.Evaluate({Req("a", "k", 3, 3, 1)}, Mode::kConsume));
  auto before = store_.Get({"a", "k"});
  auto v = limiter_.Evaluate({Req("a", "k", 3, 2, /*max_reserved=*/1)}, Mode::kReserve);
  ASSERT_OK(v);
  EXPECT_FALSE(v->allowed);
  EXPECT_EQ(v->decisions[0].reason, DenyReason::kMaxReservedExceeded);
  EXPECT_EQ(*store_.Get({"a", "k"}), *before);
}

TEST_F(LimiterTest, AllowedReservationCarriesTheLatestRunTime) {
  auto v = limiter_.Evaluate({Req("a", "k", 1, 3), Req("b", "k", 1, 2)}, Mode::kReserve);
  ASSERT_OK(v);
  EXPECT_TRUE(v->allowed);
  EXPECT_EQ(v->retry_at_us, clock_.NowMicros() + 2 * kSecond);  // a owes 2 tokens
  EXPECT_DOUBLE_EQ(Value("a", "k"), -2);
}

TEST_F(LimiterTest, ResetAndResetAll) {
  ASSERT_OK(limiter_.Evaluate({Req("a", "1", 3, 1), Req("a", "2", 3, 1), Req("b", "1", 3, 1)},
                              Mode::kConsume));
  ASSERT_OK(limiter_.Reset("a", "1"));
  EXPECT_EQ(store_.Size(), 2u);
  ASSERT_OK(limiter_.ResetAll("a"));
  EXPECT_EQ(store_.Size(), 1u);
  EXPECT_DOUBLE_EQ(Value("b", "1"), 2);
}

TEST_F(LimiterTest, StoreErrorIsReturnedAndNothingIsConsumed) {
  testing::FailingStateStore failing(std::make_unique<MemoryStateStore>());
  Limiter limiter(failing, clock_);
  failing.FailWith(absl::UnavailableError("disk on fire"));
  auto v = limiter.Evaluate({Req("a", "k", 3, 1)}, Mode::kConsume);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  failing.Heal();
  auto after = limiter.Evaluate({Req("a", "k", 3, 1)}, Mode::kConsume);
  ASSERT_OK(after);
  EXPECT_DOUBLE_EQ(after->decisions[0].value, 2);
}

// A concurrency limit has no period to refill by: a rate decision on it is refused by name in
// every entry point, and nothing is written for the request's other limits.
TEST_F(LimiterTest, ConcurrencyLimitIsRefusedByEveryRateDecision) {
  LimitRequest slots;
  slots.name = "llm";
  slots.key = "org";
  slots.config.kind = LimitKind::kConcurrency;
  slots.config.capacity = 5;
  slots.count = 1;
  const std::vector<LimitRequest> reqs = {Req("user", "u1", 10, 1), slots};
  for (Mode mode : {Mode::kCheck, Mode::kConsume, Mode::kReserve}) {
    auto v = limiter_.Evaluate(reqs, mode);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(v.status().message(), "limits[1].config.kind")) << v.status();
    std::optional<absl::StatusOr<Verdict>> async;
    limiter_.EvaluateAsync(reqs, mode, [&async](absl::StatusOr<Verdict> v) { async = v; });
    ASSERT_TRUE(async.has_value());
    EXPECT_EQ(async->status().code(), absl::StatusCode::kInvalidArgument);
  }
  Remember remember;
  remember.record = RecordSpec{"req-1", clock_.NowMicros() + kSecond};
  EXPECT_EQ(limiter_.Evaluate(reqs, Mode::kConsume, remember).status().code(),
            absl::StatusCode::kInvalidArgument);
  // In a batch only the item holding it is refused; the others are decided.
  const std::vector<LimitRequest> alone = {Req("user", "u2", 10, 1)};
  const std::vector<BatchItem> items = {{reqs, Mode::kConsume}, {alone, Mode::kConsume}};
  std::vector<absl::StatusOr<Verdict>> batch = limiter_.EvaluateBatch(items);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_OK(batch[1]);
  EXPECT_TRUE(batch[1]->allowed);
  EXPECT_EQ(store_.Size(), 1u);  // only user/u2
  EXPECT_DOUBLE_EQ(Value("user", "u2"), 9);
}

}  // namespace
}  // namespace ratelimit
