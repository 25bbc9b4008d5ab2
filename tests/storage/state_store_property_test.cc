// Random operation sequences give identical answers from a store (RocksDB; Redis standalone and
// cluster) and the in-memory reference model.
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/limiter.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RedisTestTarget;
using ::ratelimit::testing::RedisTopology;
using ::ratelimit::testing::TempDir;

std::vector<LimitConfig> Configs() {
  std::vector<LimitConfig> out;
  LimitConfig tb;
  tb.kind = LimitKind::kTokenBucket;
  tb.rate = 5;
  tb.period_us = kSecond;
  out.push_back(tb);
  tb.capacity = 12;
  tb.max_reserved = 8;
  tb.jitter = 0.3;
  out.push_back(tb);
  LimitConfig fw;
  fw.kind = LimitKind::kFixedWindow;
  fw.rate = 4;
  fw.period_us = 2 * kSecond;
  out.push_back(fw);
  fw.start_us = 700000;
  fw.capacity = 9;
  out.push_back(fw);
  return out;
}

void ExpectSameVerdict(const absl::StatusOr<Verdict>& a, const absl::StatusOr<Verdict>& b,
                       int step) {
  ASSERT_EQ(a.ok(), b.ok()) << "step " << step;
  if (!a.ok()) return;
  ASSERT_EQ(a->allowed, b->allowed) << "step " << step;
  ASSERT_EQ(a->denied_by, b->denied_by) << "step " << step;
  ASSERT_EQ(a->retry_at_us, b->retry_at_us) << "step " << step;
  ASSERT_EQ(a->decisions.size(), b->decisions.size());
  for (size_t i = 0; i < a->decisions.size(); ++i) {
    const Decision &x = a->decisions[i], &y = b->decisions[i];
    ASSERT_EQ(x.allowed, y.allowed) << "step " << step;
    ASSERT_EQ(x.reason, y.reason) << "step " << step;
    ASSERT_NEAR(x.value, y.value, 1e-9) << "step " << step;
    ASSERT_EQ(x.retry_at_us, y.retry_at_us) << "step " << step;
  }
}

enum class Backend { kRocksDb, kRedisStandalone, kRedisCluster };

struct Param {
  Backend backend;
  uint32_t seed;
};

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const char* names[] = {"RocksDb", "RedisStandalone", "RedisCluster"};
  return absl::StrCat(names[static_cast<int>(info.param.backend)], "_", info.param.seed);
}

class PropertyTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    options_.path = dir_.path() + "/db";
    options_.clock = &gc_clock_;
    if (GetParam().backend != Backend::kRocksDb) {
      auto target = testing::StartRedisTestTarget(GetParam().backend == Backend::kRedisStandalone
                                                      ? RedisTopology::kStandalone
                                                      : RedisTopology::kCluster);
      ASSERT_OK(target);
      redis_ = *std::move(target);
    }
  }

  // Opens the store under test; opened again after Close, it holds the same states.
  absl::StatusOr<std::unique_ptr<StateStore>> Open() {
    if (GetParam().backend == Backend::kRocksDb) {
      auto rocks = RocksDbStateStore::Open(options_);
      if (!rocks.ok()) return rocks.status();
      return std::unique_ptr<StateStore>(*std::move(rocks));
    }
    auto opened = testing::OpenRedisTestStore(redis_, &clock_);
    if (!opened.ok()) return opened.status();
    return std::unique_ptr<StateStore>(*std::move(opened));
  }

  absl::Status Compact(StateStore& store) {
    if (GetParam().backend != Backend::kRocksDb) return absl::OkStatus();  // states expire
    return static_cast<RocksDbStateStore&>(store).CompactAll();
  }

  TempDir dir_;
  // Ahead of the real clock, so that Redis (which expires states by its own clock) keeps every
  // state until the test's clock says it has refilled.
  FakeClock clock_{int64_t{4102444800} * kSecond};  // 2100-01-01
  // Garbage collection runs on a clock 1 s behind the latest time the test has reached, and the
  // test never steps back further than that: a state is only dropped once every later decision
  // would find it full. (A wall clock that steps back further than the age of a dropped state
  // makes that key slightly more generous than it would have been; see README.)
  FakeClock gc_clock_{0};
  RocksDbStateStoreOptions options_;
  RedisTestTarget redis_;
};

TEST_P(PropertyTest, StoreMatchesTheReferenceModel) {
  std::mt19937 rng(GetParam().seed);
  FakeClock& clock = clock_;
  FakeClock& gc_clock = gc_clock_;
  int64_t high = clock.NowMicros();
  MemoryStateStore memory;
  auto rocks = Open();
  ASSERT_OK(rocks);
  Limiter reference(memory, clock);
  auto rocks_limiter = std::make_unique<Limiter>(**rocks, clock);

  const std::vector<LimitConfig> configs = Configs();
  const char* names[] = {"n0", "n1", "n2", "n3"};
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };

  for (int step = 0; step < 3000; ++step) {
    // Time moves forward mostly, sometimes not at all, sometimes back.
    const int t = pick(10);
    if (t < 6)
      clock.Advance(pick(400000));
    else if (t == 6)
      clock.Set(std::max(high - kSecond, clock.NowMicros() - pick(300000)));
    else if (t == 7)
      clock.Advance(pick(5 * kSecond));
    high = std::max(high, clock.NowMicros());
    gc_clock.Set(high - kSecond);
    if (step % 500 == 499) {
      ASSERT_OK(Compact(**rocks));
    }

    const int op = pick(20);
    if (op == 0) {
      const int n = pick(4);
      const std::string key = "k" + std::to_string(pick(3));
      ASSERT_EQ(reference.Reset(names[n], key).ok(), rocks_limiter->Reset(names[n], key).ok());
      continue;
    }
    if (op == 1) {
      const int n = pick(4);
      ASSERT_OK(reference.ResetAll(names[n]));
      ASSERT_OK(rocks_limiter->ResetAll(names[n]));
      continue;
    }
    // Reopen the database, 1 step in 100 (about 30 times a run; an open and a close of RocksDB
    // cost more than a hundred decisions): the states must come back unchanged.
    if (op == 2 && pick(5) == 0) {
      rocks_limiter.reset();
      ASSERT_OK((*rocks)->Close());
      rocks = Open();
      ASSERT_OK(rocks);
      rocks_limiter = std::make_unique<Limiter>(**rocks, clock);
      continue;
    }
    std::vector<LimitRequest> reqs(1 + pick(3));
    for (LimitRequest& r : reqs) {
      const int n = pick(4);
      r.name = names[n];
      r.key = "k" + std::to_string(pick(3));
      r.config = configs[n];
      r.count = pick(4) == 0 ? 0.5 + pick(20) : 1;
    }
    const Mode mode = op < 12 ? Mode::kConsume : op < 16 ? Mode::kReserve : Mode::kCheck;
    ExpectSameVerdict(reference.Evaluate(reqs, mode), rocks_limiter->Evaluate(reqs, mode), step);
    if (HasFatalFailure()) return;
  }
}

std::vector<Param> Params() {
  std::vector<Param> out;
  for (Backend b : {Backend::kRocksDb, Backend::kRedisStandalone, Backend::kRedisCluster}) {
    for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) out.push_back({b, seed});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Seeds, PropertyTest, ::testing::ValuesIn(Params()), ParamName);

}  // namespace
}  // namespace ratelimit
