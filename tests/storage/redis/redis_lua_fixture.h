#ifndef RATELIMIT_TESTS_STORAGE_REDIS_REDIS_LUA_FIXTURE_H_
#define RATELIMIT_TESTS_STORAGE_REDIS_REDIS_LUA_FIXTURE_H_

// What the function library's differential tests (redis_lua_test, redis_lua_adjusted_test)
// share: a fixture with a real redis-server that decides an operation in the library and reads a
// stored state back, random configs and counts over every magnitude, and the comparison of a
// state stored in Redis with the memory store's, bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/redis/redis_function_library.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

inline bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class RedisLuaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServerInstalled())
        << "redis-server is required (scripts/setup.sh installs it)";
    auto server = RedisStandalone::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    auto connection = server_->Connect();
    ASSERT_OK(connection);
    redis_ = *std::move(connection);
  }

  redis::Reply Call(std::vector<std::string> argv) {
    auto reply = redis_->Command(argv);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : redis::Reply{};
  }

  std::vector<std::string> RedisKeys(const OperationKeys& keys) {
    std::vector<std::string> out;
    for (const StateKey& k : keys.keys) out.push_back(RedisKeyFor("rl:", k, ""));
    return out;
  }

  // The operation decided by the library at `now` (nullopt: the server's TIME).
  absl::StatusOr<Outcome> ApplyInRedis(const Operation& op, std::optional<int64_t> now) {
    const OperationKeys keys = DistinctKeys(op.limits);
    auto reply = redis_->Command(RedisApplyCommand(op, keys, RedisKeys(keys), now));
    if (!reply.ok()) return reply.status();
    return RedisApplyOutcome(op, keys, *reply);
  }

  std::optional<State> StoredInRedis(const StateKey& key) {
    const redis::Reply r = Call({"GET", RedisKeyFor("rl:", key, "")});
    if (r.type != redis::Reply::Type::kString) return std::nullopt;
    auto s = DecodeRedisState(r.str);
    EXPECT_TRUE(s.has_value()) << r.str;
    return s;
  }

  std::unique_ptr<RedisStandalone> server_;
  std::unique_ptr<HiredisConnection> redis_;
};

// A valid random config with magnitudes from 1e-6 to 1e15.
inline LimitConfig RandomConfig(std::mt19937_64& rng) {
  auto magnitude = [&](double lo_exp, double hi_exp) {
    return std::pow(10.0, std::uniform_real_distribution<double>(lo_exp, hi_exp)(rng));
  };
  static const int64_t kPeriods[] = {
      1, 1000, kSecond, 60 * kSecond, 3600 * kSecond, 86400 * kSecond, kMaxPeriodMicros};
  for (;;) {
    LimitConfig c;
    c.kind = rng() % 2 ? LimitKind::kTokenBucket : LimitKind::kFixedWindow;
    c.rate = rng() % 4 == 0 ? static_cast<double>(1 + rng() % 20) : magnitude(-6, 15);
    c.period_us = rng() % 3 == 0 ? static_cast<int64_t>(1 + rng() % (1000 * kSecond))
                                 : kPeriods[rng() % std::size(kPeriods)];
    switch (rng() % 4) {
      case 0:
        break;
      case 1:
        c.capacity = std::min(kMaxAmount, c.rate * magnitude(-3, 3));
        break;
      case 2:
        c.capacity = 0;
        break;
      default:
        c.capacity = magnitude(-6, 15);
    }
    switch (rng() % 4) {
      case 0:
        break;
      case 1:
        c.max_reserved = 0;
        break;
      default:
        c.max_reserved = std::min(kMaxAmount, c.EffectiveCapacity() * magnitude(-2, 1));
    }
    if (c.kind == LimitKind::kFixedWindow && rng() % 2) {
      c.start_us = static_cast<int64_t>(rng() % static_cast<uint64_t>(kMaxPeriodMicros));
    }
    if (rng() % 3 == 0) c.jitter = 0.25;
    if (ValidateLimitConfig(c, "").ok()) return c;
  }
}

inline double RandomCount(std::mt19937_64& rng, const LimitConfig& c) {
  const double cap = c.EffectiveCapacity();
  switch (rng() % 5) {
    case 0:
      return std::pow(10.0, std::uniform_real_distribution<double>(-6, 15)(rng));
    case 1:
      return std::min(kMaxAmount, cap * 1.5 + 1e-6);  // more than capacity
    case 2:
      return cap > 0 ? cap : 1;
    default: {
      const double x = cap * std::uniform_real_distribution<double>(0, 0.6)(rng);
      return x > 0 ? std::min(x, kMaxAmount) : 1e-6;
    }
  }
}

inline void ExpectSameState(const std::optional<State>& redis, const std::optional<State>& memory,
                            const std::string& where) {
  ASSERT_EQ(redis.has_value(), memory.has_value()) << where;
  if (!redis) return;
  EXPECT_TRUE(SameBits(redis->value, memory->value))
      << where << ": " << redis->value << " vs " << memory->value;
  EXPECT_EQ(redis->ts_us, memory->ts_us) << where;
  if (memory->full_at_us >= kRedisTimeHorizonUs) {
    EXPECT_EQ(redis->full_at_us, kNever) << where;
  } else {
    EXPECT_EQ(redis->full_at_us, memory->full_at_us) << where;
  }
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_STORAGE_REDIS_REDIS_LUA_FIXTURE_H_
