// Limiter::EvaluateBatch on the in-memory store: one store call per batch, each item decided as
// Evaluate would decide it, in order, and a store failure confined to the items it concerns.
#include <memory>

#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/selective_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::SelectiveFailingStore;
using ::ratelimit::testing::TokenBucket;

LimitRequest Req(std::string key, double count, std::optional<double> max_reserved = {}) {
  LimitRequest r;
  r.name = "api";
  r.key = std::move(key);
  r.config = TokenBucket(10, kSecond, std::nullopt, max_reserved);
  r.count = count;
  return r;
}

class LimiterBatchTest : public ::testing::Test {
 protected:
  double Value(const std::string& key) {
    auto s = store_->Get({"api", key});
    EXPECT_TRUE(s.ok());
    return s.ok() && s->has_value() ? (*s)->value : 10;  // no state: full
  }
  FakeClock clock_;
  std::unique_ptr<SelectiveFailingStore> store_ =
      std::make_unique<SelectiveFailingStore>(std::make_unique<MemoryStateStore>(), "broken");
  Limiter limiter_{*store_, clock_};
};

TEST_F(LimiterBatchTest, ItemsAreDecidedInOrderWithOneStoreCall) {
  const std::vector<LimitRequest> six = {Req("a", 6)};
  const std::vector<LimitRequest> five = {Req("a", 5)};  // after six: only 4 left
  const std::vector<LimitRequest> four = {Req("a", 4)};
  const std::vector<LimitRequest> check = {Req("a", 1)};
  const std::vector<BatchItem> items = {
      {six, Mode::kConsume}, {five, Mode::kConsume}, {four, Mode::kConsume}, {check, Mode::kCheck}};
  std::vector<absl::StatusOr<Verdict>> v = limiter_.EvaluateBatch(items);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(store_->batches(), 1);
  EXPECT_EQ(store_->operations(), 4);
  for (const auto& r : v) ASSERT_OK(r);
  EXPECT_TRUE(v[0]->allowed);
  EXPECT_DOUBLE_EQ(v[0]->decisions[0].value, 4);
  EXPECT_FALSE(v[1]->allowed);  // sees the first item's take
  EXPECT_EQ(v[1]->denied_by, 0);
  EXPECT_DOUBLE_EQ(v[1]->decisions[0].value, 4);  // denied: nothing taken
  EXPECT_TRUE(v[2]->allowed);
  EXPECT_DOUBLE_EQ(v[2]->decisions[0].value, 0);
  EXPECT_FALSE(v[3]->allowed);  // a check of 1 on an empty bucket, writing nothing
  EXPECT_DOUBLE_EQ(Value("a"), 0);
}

TEST_F(LimiterBatchTest, EachItemIsAllOrNothingOnItsOwn) {
  // Item 0 denies as a whole (b would take 11 of 10) and so takes nothing from a; item 1 is
  // allowed and takes from both.
  const std::vector<LimitRequest> denied = {Req("a", 3), Req("b", 11)};
  const std::vector<LimitRequest> allowed = {Req("a", 2), Req("b", 2)};
  const std::vector<BatchItem> items = {{denied, Mode::kConsume}, {allowed, Mode::kConsume}};
  std::vector<absl::StatusOr<Verdict>> v = limiter_.EvaluateBatch(items);
  ASSERT_EQ(v.size(), 2u);
  ASSERT_OK(v[0]);
  ASSERT_OK(v[1]);
  EXPECT_FALSE(v[0]->allowed);
  EXPECT_EQ(v[0]->denied_by, 1);
  EXPECT_FALSE(v[0]->retry_at_us.has_value());  // can never fit
  EXPECT_TRUE(v[1]->allowed);
  EXPECT_DOUBLE_EQ(Value("a"), 8);
  EXPECT_DOUBLE_EQ(Value("b"), 8);
}

TEST_F(LimiterBatchTest, SameAsEvaluateOneByOne) {
  MemoryStateStore other_store;
  Limiter other(other_store, clock_);
  const std::vector<std::vector<LimitRequest>> reqs = {
      {Req("a", 4)}, {Req("a", 3), Req("b", 1)}, {Req("a", 4)}, {Req("b", 12, 5)},
      {Req("c", 1)}, {Req("a", 2), Req("a", 1)}, {Req("b", 3)}};
  const std::vector<Mode> modes = {Mode::kConsume, Mode::kConsume, Mode::kReserve, Mode::kReserve,
                                   Mode::kCheck,   Mode::kConsume, Mode::kReserve};
  std::vector<BatchItem> items;
  for (size_t i = 0; i < reqs.size(); ++i) items.push_back({reqs[i], modes[i]});
  std::vector<absl::StatusOr<Verdict>> batch = limiter_.EvaluateBatch(items);
  ASSERT_EQ(batch.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    absl::StatusOr<Verdict> single = other.Evaluate(reqs[i], modes[i]);
    ASSERT_OK(single);
    ASSERT_OK(batch[i]);
    EXPECT_EQ(batch[i]->allowed, single->allowed) << i;
    EXPECT_EQ(batch[i]->denied_by, single->denied_by) << i;
    EXPECT_EQ(batch[i]->retry_at_us, single->retry_at_us) << i;
    ASSERT_EQ(batch[i]->decisions.size(), single->decisions.size()) << i;
    for (size_t j = 0; j < single->decisions.size(); ++j) {
      EXPECT_DOUBLE_EQ(batch[i]->decisions[j].value, single->decisions[j].value) << i;
      EXPECT_EQ(batch[i]->decisions[j].reason, single->decisions[j].reason) << i;
    }
  }
}

TEST_F(LimiterBatchTest, StoreFailureFailsOnlyTheItemsItConcerns) {
  const std::vector<LimitRequest> first = {Req("a", 1)};
  const std::vector<LimitRequest> broken = {Req("a", 1), Req("broken", 1)};
  const std::vector<LimitRequest> last = {Req("a", 1)};
  const std::vector<BatchItem> items = {
      {first, Mode::kConsume}, {broken, Mode::kConsume}, {last, Mode::kConsume}};
  std::vector<absl::StatusOr<Verdict>> v = limiter_.EvaluateBatch(items);
  ASSERT_EQ(v.size(), 3u);
  ASSERT_OK(v[0]);
  EXPECT_EQ(v[1].status().code(), absl::StatusCode::kUnavailable);
  ASSERT_OK(v[2]);
  EXPECT_DOUBLE_EQ(v[2]->decisions[0].value, 8);  // the failed item took nothing from a
  EXPECT_DOUBLE_EQ(Value("a"), 8);
}

TEST_F(LimiterBatchTest, EmptyBatchMakesNoStoreCall) {
  EXPECT_TRUE(limiter_.EvaluateBatch({}).empty());
  EXPECT_EQ(store_->batches(), 0);
}

}  // namespace
}  // namespace ratelimit
