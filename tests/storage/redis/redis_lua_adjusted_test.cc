// The Redis function library (storage/redis/ratelimit.lua) deciding limits under a runtime
// override (LimitConfig::adjustment: a changed limit carried from its earlier config, an
// unlimited or blocked key) exactly as the C++ algebra does, case by case and at random, against
// a real redis-server.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/memory/memory_state_store.h"
#include "storage/redis/redis_function_library.h"
#include "tests/storage/redis/redis_lua_fixture.h"
#include "tests/support/adjusted_config.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Adjusted;
using ::ratelimit::testing::ExpectSameState;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::kNever;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RandomConfig;
using ::ratelimit::testing::RandomCount;
using ::ratelimit::testing::RedisLuaTest;
using ::ratelimit::testing::SameBits;
using ::ratelimit::testing::TokenBucket;

// --- Limits under a runtime override (LimitConfig::adjustment) ----------------------------------

using Effect = LimitConfig::Adjustment::Effect;

// A random adjustment of `c`: any effect, a change before or after `now`, or none, from a random
// token bucket, against a base capacity above, at or below c's.
LimitConfig RandomAdjusted(std::mt19937_64& rng, LimitConfig c, int64_t now) {
  const double cap = c.EffectiveCapacity();
  const Effect effects[] = {Effect::kLimit, Effect::kLimit, Effect::kLimit, Effect::kUnlimited,
                            Effect::kBlocked};
  std::optional<int64_t> changed_at;
  if (rng() % 4 != 0) {
    changed_at =
        now -
        static_cast<int64_t>(
            rng() % static_cast<uint64_t>(std::min<int64_t>(c.period_us, 86400 * kSecond) + 1));
  }
  const LimitConfig before =
      TokenBucket(cap > 0 ? cap * std::uniform_real_distribution<double>(0.1, 10)(rng) : 1,
                  c.period_us, cap * std::uniform_real_distribution<double>(0, 3)(rng));
  const double bases[] = {cap, cap * 2, cap / 2, cap + 1};
  return Adjusted(c, changed_at, before, bases[rng() % 4], effects[rng() % 5]);
}

class RedisLuaAdjustedTest : public RedisLuaTest {
 protected:
  // Places `states` (nullopt: none) at the keys of `op` in Redis and in a memory store, decides
  // `op` in both at `now` and expects the same decisions and stored states, bit for bit. Returns
  // the library's outcome.
  Outcome DecideBoth(const Operation& op, const std::vector<std::optional<State>>& states,
                     int64_t now, const std::string& where) {
    Call({"FLUSHALL"});
    MemoryStateStore memory;
    const OperationKeys keys = DistinctKeys(op.limits);
    for (size_t k = 0; k < keys.keys.size(); ++k) {
      if (!states[k]) continue;
      EXPECT_TRUE(memory
                      .Update(absl::MakeConstSpan(&keys.keys[k], 1),
                              [&](auto, absl::Span<std::optional<State>> writes) {
                                writes[0] = states[k];
                                return absl::OkStatus();
                              })
                      .ok());
      Call({"SET", RedisKeyFor("rl:", keys.keys[k], ""), EncodeRedisState(*states[k])});
    }
    FakeClock clock(now);
    auto want = memory.Apply(op, clock);
    EXPECT_TRUE(want.ok()) << where << ": " << want.status();
    auto got = ApplyInRedis(op, now);
    EXPECT_TRUE(got.ok()) << where << ": " << got.status();
    if (!want.ok() || !got.ok()) return Outcome();
    EXPECT_EQ(got->allowed, want->allowed) << where;
    for (size_t i = 0; i < op.limits.size(); ++i) {
      const Decision& g = got->decisions[i];
      const Decision& e = want->decisions[i];
      EXPECT_EQ(g.allowed, e.allowed) << where << " limit " << i;
      EXPECT_EQ(g.reason, e.reason) << where << " limit " << i;
      EXPECT_TRUE(SameBits(g.value, e.value)) << where << ": " << g.value << " vs " << e.value;
      EXPECT_EQ(g.retry_at_us, e.retry_at_us) << where;
      EXPECT_EQ(g.next, e.next) << where;
    }
    for (const StateKey& k : keys.keys) {
      auto in_memory = memory.Get(k);
      EXPECT_TRUE(in_memory.ok());
      if (!in_memory.ok()) continue;
      // A state full before the server's own clock (a window starting long ago, full at its
      // start) expires at once in Redis: a missing state is a full one.
      const std::optional<State> in_redis = StoredInRedis(k);
      if (!in_redis && *in_memory &&
          (*in_memory)->full_at_us < SystemClock::Default().NowMicros()) {
        continue;
      }
      ExpectSameState(in_redis, *in_memory, where);
    }
    return *got;
  }
  // Far enough ahead of the server's clock that no state written here expires during the test.
  const int64_t now_ = SystemClock::Default().NowMicros() + int64_t{365} * 86400 * kSecond;
};

TEST_F(RedisLuaAdjustedTest, EachCaseOfTheAdjustmentDecidesAsTheAlgebra) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  const int64_t t = now_;
  const StateKey key{"api", "customer-42"};
  // A window of 10 per minute starting at t: a state of its window has ts t.
  const LimitConfig window = FixedWindow(10, 60 * kSecond, t % (60 * kSecond));
  auto one = [&](const std::string& where, const LimitConfig& c, std::optional<State> current,
                 double count, Mode mode) {
    const LimitOp limit{key, c, count};
    return DecideBoth(Operation{absl::MakeConstSpan(&limit, 1), mode}, {current}, t, where);
  };

  // A raise carried from changed_at: 2 + 5 s at 1/s = 7 at the change, + 5 s at 10/s = 57.
  const LimitConfig slow = TokenBucket(1, kSecond, 10);
  Outcome o = one("raise", Adjusted(TokenBucket(10, kSecond, 100), t - 5 * kSecond, slow, 10),
                  State{2, t - 10 * kSecond, t}, 1, Mode::kConsume);
  EXPECT_TRUE(o.allowed);
  EXPECT_EQ(o.decisions[0].value, 56);
  // A cut clamps at the change: 80 + 50 = 100 at the change, clamped to 20; full under the cut
  // never expires.
  const LimitConfig fast = TokenBucket(10, kSecond, 100);
  o = one("cut", Adjusted(TokenBucket(1, kSecond, 20), t - 5 * kSecond, fast, 100),
          State{80, t - 10 * kSecond, t}, 1, Mode::kConsume);
  EXPECT_EQ(o.decisions[0].value, 19);
  EXPECT_EQ(o.decisions[0].next.full_at_us, kNever);
  // A state written after the change is not carried: it refills at the new rate only.
  o = one("written after", Adjusted(TokenBucket(10, kSecond, 100), t - 5 * kSecond, slow, 10),
          State{2, t - kSecond, t}, 1, Mode::kConsume);
  EXPECT_EQ(o.decisions[0].value, 11);
  // No change to carry (changed_at unset).
  one("no change", Adjusted(TokenBucket(10, kSecond, 100), std::nullopt, slow, 10),
      State{2, t - 10 * kSecond, t}, 1, Mode::kConsume);
  // A debt carried across the change: -4 + 5 = 1 at the change, + 5 s at 2/s = 11.
  o = one("debt", Adjusted(TokenBucket(2, kSecond, 20), t - 5 * kSecond, slow, 10),
          State{-4, t - 10 * kSecond, t}, 1, Mode::kConsume);
  EXPECT_EQ(o.decisions[0].value, 10);
  // Reserve under a cut: a debt, kept without expiry.
  o = one("reserve under a cut", Adjusted(TokenBucket(1, kSecond, 5), t - kSecond, fast, 100),
          State{1, t, t + 1}, 3, Mode::kReserve);
  EXPECT_TRUE(o.allowed);
  EXPECT_EQ(o.decisions[0].value, -2);
  EXPECT_EQ(o.decisions[0].next.full_at_us, kNever);

  // A fixed window raised from 10 to 50 keeps the 6 taken: 44 left, stored counted against 10.
  LimitConfig raised = window;
  raised.rate = 50;
  raised.capacity = 50;
  o = one("window raise", Adjusted(raised, t, slow, 10), State{4, t, t + 1}, 1, Mode::kConsume);
  EXPECT_EQ(o.decisions[0].value, 43);
  EXPECT_EQ(StoredInRedis(key)->value, 3);
  // Cut to 3 with 6 taken: nothing left, not below zero.
  LimitConfig cut = window;
  cut.rate = 3;
  cut.capacity = 3;
  o = one("window cut", Adjusted(cut, t, slow, 10), State{4, t, t + 1}, 1, Mode::kConsume);
  EXPECT_FALSE(o.allowed);
  EXPECT_EQ(o.decisions[0].value, 0);
  // A debt the window had stays.
  cut.max_reserved = 10;
  o = one("window cut with a debt", Adjusted(cut, t, slow, 10), State{-2, t, t + 1}, 1,
          Mode::kReserve);
  EXPECT_EQ(o.decisions[0].value, -3);
  EXPECT_EQ(StoredInRedis(key)->value, 4);  // -3 - (3 - 10)
  EXPECT_EQ(StoredInRedis(key)->full_at_us, kNever);

  // Unlimited and blocked take nothing, with a state or without, in every mode.
  for (Effect effect : {Effect::kUnlimited, Effect::kBlocked}) {
    for (Mode mode : {Mode::kCheck, Mode::kConsume, Mode::kReserve}) {
      for (const LimitConfig& c : {slow, window}) {
        for (std::optional<State> current :
             {std::optional<State>(), std::optional<State>(State{3, t - kSecond, t + 1})}) {
          const std::string where =
              absl::StrCat("effect ", static_cast<int>(effect), " mode ", static_cast<int>(mode),
                           c.kind == LimitKind::kTokenBucket ? " bucket" : " window",
                           current ? " with a state" : " without");
          o = one(where, Adjusted(c, t - kSecond, fast, 100, effect), current, 1000, mode);
          EXPECT_EQ(o.allowed, effect == Effect::kUnlimited) << where;
          if (current) {
            // As it was; an unlimited take writes a window's state back recording the
            // configured capacity (100) its value is counted against.
            State expected = *current;
            if (effect == Effect::kUnlimited && mode != Mode::kCheck &&
                c.kind == LimitKind::kFixedWindow) {
              expected.counted_against = 100;
            }
            EXPECT_EQ(StoredInRedis(key), expected) << where;
          }
        }
      }
    }
  }

  // All or nothing: an unlimited key and a cut one that denies, on two keys: nothing written.
  const StateKey other{"api", "org-7"};
  const LimitOp both[] = {
      LimitOp{key, Adjusted(slow, t, fast, 100, Effect::kUnlimited), 1},
      LimitOp{other, Adjusted(TokenBucket(1, kSecond, 2), t - kSecond, fast, 100), 5}};
  o = DecideBoth(Operation{both, Mode::kConsume}, {std::nullopt, State{1, t, t + 1}}, t, "both");
  EXPECT_FALSE(o.allowed);
  EXPECT_FALSE(StoredInRedis(key).has_value());
  EXPECT_EQ(StoredInRedis(other)->value, 1);
}

// Random configs, adjustments, states and operations (several limits, on shared keys too): the
// library decides and stores exactly what the algebra does.
TEST_F(RedisLuaAdjustedTest, RandomAdjustedOperationsDecideAsTheAlgebra) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  std::mt19937_64 rng(20261128);
  const Mode modes[] = {Mode::kCheck, Mode::kConsume, Mode::kReserve};
  int allowed = 0;
  constexpr int kCases = 1500;
  for (int i = 0; i < kCases; ++i) {
    const int nkeys = 1 + static_cast<int>(rng() % 3);
    std::vector<StateKey> keys;
    std::vector<LimitConfig> configs;
    std::vector<std::optional<State>> states;
    for (int k = 0; k < nkeys; ++k) {
      keys.push_back(StateKey{"n", absl::StrCat("k", k)});
      LimitConfig c = RandomConfig(rng);
      if (rng() % 4 != 0) c = RandomAdjusted(rng, c, now_);
      configs.push_back(c);
    }
    std::vector<LimitOp> limits;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < n; ++l) {
      const size_t k = rng() % keys.size();
      limits.push_back(LimitOp{keys[k], configs[k], RandomCount(rng, configs[k])});
    }
    const Operation op{limits, modes[rng() % 3]};
    const OperationKeys distinct = DistinctKeys(op.limits);
    for (size_t k = 0; k < distinct.keys.size(); ++k) {
      const LimitConfig& c =
          op.limits[std::find(distinct.slot_of.begin(), distinct.slot_of.end(), k) -
                    distinct.slot_of.begin()]
              .config;
      if (rng() % 5 == 0) {
        states.push_back(std::nullopt);
        continue;
      }
      const double cap = c.EffectiveCapacity();
      const double value = cap * std::uniform_real_distribution<double>(-0.5, 1.2)(rng);
      const int64_t back = static_cast<int64_t>(
          rng() % static_cast<uint64_t>(std::min<int64_t>(2 * c.period_us, 86400 * kSecond) + 1));
      states.push_back(State{value, now_ - back, now_ + 1});
    }
    const Outcome o = DecideBoth(op, states, now_, absl::StrCat("case ", i));
    allowed += o.allowed;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(allowed, kCases / 10);
  EXPECT_LT(allowed, kCases * 9 / 10);
}

}  // namespace
}  // namespace ratelimit
