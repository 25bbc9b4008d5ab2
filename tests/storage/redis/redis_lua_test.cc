// The Redis function library (storage/redis/ratelimit.lua) against the C++ algebra: the key
// layout, the state encoding, loading by version, and a differential test on a real redis-server
// that compares every decision and every stored state with the in-memory store, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/memory/memory_state_store.h"
#include "storage/redis/redis_function_library.h"
#include "tests/support/algebra_vectors.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::AlgebraVector;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::HiredisConnection;
using ::ratelimit::testing::kAlgebraVectors;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::kVectorId;
using ::ratelimit::testing::RedisServerInstalled;
using ::ratelimit::testing::RedisStandalone;
using ::ratelimit::testing::TokenBucket;

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// --- Key layout and state encoding (no server needed) ---------------------------------------

TEST(RedisKeyForTest, WithoutHashTagTheIdentityIsTheTag) {
  EXPECT_EQ(RedisKeyFor("rl:", StateKey{"user", "u1", LimitSource::kDefined}, ""),
            "rl:{d4:useru1}");
  EXPECT_EQ(RedisKeyFor("", StateKey{"n", "k", LimitSource::kEnvoy}, ""), "{e1:nk}");
}

TEST(RedisKeyForTest, AHashTagGoesInTheBracesAndTheIdentityFollows) {
  EXPECT_EQ(RedisKeyFor("rl:", StateKey{"user", "u1", LimitSource::kInline}, "org42"),
            "rl:{org42}i4:useru1");
}

TEST(RedisKeyForTest, BracesAndPercentAreEscapedSoTheFirstCloseBraceEndsTheTag) {
  const std::string k = RedisKeyFor("p", StateKey{"a}b", "{%}", LimitSource::kDefined}, "t}{");
  EXPECT_EQ(k, "p{t%7D%7B}d3:a}b{%}");
  const std::string untagged = RedisKeyFor("p", StateKey{"a}b", "{%}"}, "");
  EXPECT_EQ(untagged, "p{d3:a%7Db%7B%25%7D}");
  // What Redis Cluster hashes: between the first '{' and the next '}'.
  const size_t open = untagged.find('{');
  EXPECT_EQ(untagged.find('}', open + 1), untagged.size() - 1);
}

TEST(RedisKeyForTest, DistinctStatesAndTagsGiveDistinctKeys) {
  // Names and keys made of the characters that could confuse a separator-based layout.
  const std::vector<std::string> parts = {"",  "a", "1", "1:",  ":a", "a1",
                                          "{", "}", "%", "%7D", "1:a"};
  const LimitSource sources[] = {LimitSource::kDefined, LimitSource::kEnvoy, LimitSource::kInline};
  std::set<std::string> seen;
  size_t made = 0;
  for (const std::string& tag : {std::string(), std::string("x"), std::string("}")}) {
    for (LimitSource s : sources) {
      for (const std::string& name : parts) {
        for (const std::string& key : parts) {
          seen.insert(RedisKeyFor("rl:", StateKey{name, key, s}, tag));
          ++made;
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), made);
}

TEST(RedisKeyForTest, ParseGivesBackTheStateWithOrWithoutTag) {
  const std::vector<StateKey> states = {{"user", "u1"},
                                        {"a}b", "{%}", LimitSource::kEnvoy},
                                        {"", "", LimitSource::kInline},
                                        {"12:3", "4:5"},
                                        {std::string(256, 'n'), std::string(1024, '}')}};
  for (const StateKey& k : states) {
    for (absl::string_view tag : {"", "org7", "}{%"}) {
      const std::optional<StateKey> back = ParseRedisKey("rl:", RedisKeyFor("rl:", k, tag));
      ASSERT_TRUE(back.has_value()) << RedisKeyFor("rl:", k, tag);
      EXPECT_EQ(*back, k);
    }
  }
}

TEST(RedisKeyForTest, ParseRejectsKeysOfAnyOtherShape) {
  for (const char* other :
       {"other:{d1:ab}", "rl:", "rl:{d1:ab", "rl:{x1:ab}", "rl:{d9:ab}", "rl:{d01:ab}",
        "rl:{d+1:ab}", "rl:{d1ab}", "rl:{d1:a%41}", "rl:{t}x1:a", "rl:{}"}) {
    EXPECT_FALSE(ParseRedisKey("rl:", other).has_value()) << other;
  }
}

TEST(RedisKeyForTest, PrefixMustNotChooseTheSlot) {
  EXPECT_TRUE(ValidateRedisKeyPrefix("ratelimit:").ok());
  EXPECT_EQ(ValidateRedisKeyPrefix("a{b").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRedisKeyPrefix("a}").code(), absl::StatusCode::kInvalidArgument);
}

TEST(RedisStateEncodingTest, RoundTripsEveryDoubleExactly) {
  std::mt19937_64 rng(7);
  std::vector<double> values = {
      0.0, -0.0, 1e-300, 5e-324, -1e15, 1e15, 0.1, 1.0 / 3, std::nextafter(1.0, 2.0)};
  for (int i = 0; i < 2000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) values.push_back(d);
  }
  for (double v : values) {
    const State s{v, 1763800000123456, 1763800000999999};
    const std::optional<State> back = DecodeRedisState(EncodeRedisState(s));
    ASSERT_TRUE(back.has_value()) << EncodeRedisState(s);
    EXPECT_TRUE(SameBits(back->value, v)) << EncodeRedisState(s);
    EXPECT_EQ(back->ts_us, s.ts_us);
    EXPECT_EQ(back->full_at_us, s.full_at_us);
  }
}

TEST(RedisStateEncodingTest, TimesAtOrPastTheHorizonAreNever) {
  const State far{1, 5, kRedisTimeHorizonUs};
  EXPECT_EQ(DecodeRedisState(EncodeRedisState(far))->full_at_us, kNever);
  const State never{1, 5, kNever};
  EXPECT_EQ(DecodeRedisState(EncodeRedisState(never))->full_at_us, kNever);
  const State last{1, 5, kRedisTimeHorizonUs - 1};
  EXPECT_EQ(DecodeRedisState(EncodeRedisState(last))->full_at_us, kRedisTimeHorizonUs - 1);
}

TEST(RedisStateEncodingTest, RejectsMalformedText) {
  for (const char* bad : {"", "1 2", "1 2 3 4", "x 2 3", "1 2.5 3", "1  2 3", "1 2 3 "}) {
    EXPECT_FALSE(DecodeRedisState(bad).has_value()) << bad;
  }
}

TEST(RedisLibraryTest, VersionInTheCodeMatchesTheConstant) {
  EXPECT_NE(
      RedisLibraryCode().find(absl::StrCat("local LIBRARY_VERSION = '", kRedisLibraryVersion, "'")),
      absl::string_view::npos);
  EXPECT_TRUE(absl::StartsWith(RedisLibraryCode(), "#!lua name=ratelimit\n"));
}

// --- Against a real redis-server ----------------------------------------------------------------

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

TEST_F(RedisLuaTest, LoadsOnceThenKeepsTheSameVersion) {
  auto first = EnsureRedisLibrary(*redis_);
  ASSERT_OK(first);
  EXPECT_TRUE(*first);
  const redis::Reply version = Call({"FCALL_RO", "ratelimit_version", "0"});
  EXPECT_EQ(version.str, kRedisLibraryVersion);

  // The same version with other code (a comment added): a version check, so no reload.
  const std::string same_version = absl::StrCat(RedisLibraryCode(), "\n-- same version\n");
  ASSERT_EQ(Call({"FUNCTION", "LOAD", "REPLACE", same_version}).type, redis::Reply::Type::kString);
  auto second = EnsureRedisLibrary(*redis_);
  ASSERT_OK(second);
  EXPECT_FALSE(*second);
  const redis::Reply listed = Call({"FUNCTION", "LIST", "LIBRARYNAME", "ratelimit", "WITHCODE"});
  ASSERT_EQ(listed.elements.size(), 1u);
  EXPECT_NE(listed.elements[0].elements.back().str.find("-- same version"), std::string::npos);
}

TEST_F(RedisLuaTest, AnOldVersionIsReplacedAtStart) {
  const std::string old_code = absl::StrReplaceAll(
      RedisLibraryCode(), {{absl::StrCat("local LIBRARY_VERSION = '", kRedisLibraryVersion, "'"),
                            "local LIBRARY_VERSION = 'old'"}});
  ASSERT_NE(old_code, RedisLibraryCode());
  ASSERT_EQ(Call({"FUNCTION", "LOAD", old_code}).type, redis::Reply::Type::kString);
  ASSERT_EQ(Call({"FCALL_RO", "ratelimit_version", "0"}).str, "old");
  auto loaded = EnsureRedisLibrary(*redis_);
  ASSERT_OK(loaded);
  EXPECT_TRUE(*loaded);
  EXPECT_EQ(Call({"FCALL_RO", "ratelimit_version", "0"}).str, kRedisLibraryVersion);
}

TEST_F(RedisLuaTest, ALibraryWithoutTheVersionFunctionIsReplaced) {
  ASSERT_EQ(Call({"FUNCTION", "LOAD",
                  "#!lua name=ratelimit\nredis.register_function('ratelimit_apply', "
                  "function() return 0 end)"})
                .type,
            redis::Reply::Type::kString);
  auto loaded = EnsureRedisLibrary(*redis_);
  ASSERT_OK(loaded);
  EXPECT_TRUE(*loaded);
  EXPECT_EQ(Call({"FCALL_RO", "ratelimit_version", "0"}).str, kRedisLibraryVersion);
}

TEST_F(RedisLuaTest, WithoutOverrideTheTimeIsTheServersClock) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  const LimitOp limit{StateKey{"user", "u1"}, TokenBucket(10, kSecond), 1};
  const int64_t before = SystemClock::Default().NowMicros();
  auto out = ApplyInRedis(Operation{absl::MakeConstSpan(&limit, 1), Mode::kConsume}, {});
  const int64_t after = SystemClock::Default().NowMicros();
  ASSERT_OK(out);
  EXPECT_TRUE(out->allowed);
  EXPECT_GE(out->now_us, before);
  EXPECT_LE(out->now_us, after);
  EXPECT_EQ(StoredInRedis(limit.key)->ts_us, out->now_us);
}

TEST_F(RedisLuaTest, ATimeAtOrPastTheHorizonIsRefusedAndWritesNothing) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  const LimitOp limit{StateKey{"user", "u1"}, TokenBucket(10, kSecond), 1};
  const Operation op{absl::MakeConstSpan(&limit, 1), Mode::kConsume};
  auto out = ApplyInRedis(op, kRedisTimeHorizonUs);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("time out of range"), std::string::npos);
  EXPECT_EQ(StoredInRedis(limit.key), std::nullopt);
  EXPECT_EQ(ApplyInRedis(op, -1).status().code(), absl::StatusCode::kInternal);
  EXPECT_OK(ApplyInRedis(op, kRedisTimeHorizonUs - 1));
}

TEST_F(RedisLuaTest, AnUnreadableStateFailsTheCallAndWritesNothing) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  const LimitOp limits[] = {{StateKey{"a", "1"}, TokenBucket(10, kSecond), 1},
                            {StateKey{"b", "1"}, TokenBucket(10, kSecond), 1}};
  Call({"SET", RedisKeyFor("rl:", limits[1].key, ""), "not a state"});
  auto out = ApplyInRedis(Operation{limits, Mode::kConsume}, 1800000000 * kSecond);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(StoredInRedis(limits[0].key), std::nullopt);
}

TEST_F(RedisLuaTest, AReplyThatDisagreesWithTheAlgebraIsAnInternalError) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  const LimitOp limit{StateKey{"user", "u1"}, TokenBucket(10, kSecond), 3};
  const Operation op{absl::MakeConstSpan(&limit, 1), Mode::kConsume};
  const OperationKeys keys = DistinctKeys(op.limits);
  auto reply = redis_->Command(RedisApplyCommand(op, keys, RedisKeys(keys), 1800000000 * kSecond));
  ASSERT_OK(reply);
  ASSERT_OK(RedisApplyOutcome(op, keys, *reply));

  redis::Reply off_by_an_ulp = *reply;
  std::optional<State> written = DecodeRedisState(off_by_an_ulp.elements[3].str);
  ASSERT_TRUE(written.has_value());
  written->value = std::nextafter(written->value, 100.0);
  off_by_an_ulp.elements[3].str = EncodeRedisState(*written);
  EXPECT_EQ(RedisApplyOutcome(op, keys, off_by_an_ulp).status().code(),
            absl::StatusCode::kInternal);

  redis::Reply wrong_verdict = *reply;
  wrong_verdict.elements[1].integer = 0;
  EXPECT_EQ(RedisApplyOutcome(op, keys, wrong_verdict).status().code(),
            absl::StatusCode::kInternal);

  redis::Reply early_expiry = *reply;
  written = DecodeRedisState(reply->elements[3].str);
  written->full_at_us -= 1;
  early_expiry.elements[3].str = EncodeRedisState(*written);
  EXPECT_EQ(RedisApplyOutcome(op, keys, early_expiry).status().code(), absl::StatusCode::kInternal);
}

TEST_F(RedisLuaTest, AnExpiredStateIsGoneAndDecidesAsAFullOne) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  // A state that refilled ten seconds ago by the server's clock: Redis has expired it.
  const int64_t t0 = SystemClock::Default().NowMicros() - 20 * kSecond;
  const LimitOp limit{StateKey{"user", "u1"}, TokenBucket(10, kSecond), 5};
  const Operation op{absl::MakeConstSpan(&limit, 1), Mode::kConsume};
  auto first = ApplyInRedis(op, t0);
  ASSERT_OK(first);
  ASSERT_TRUE(first->allowed);
  const State written = first->decisions[0].next;
  ASSERT_LT(written.full_at_us, t0 + 10 * kSecond);
  EXPECT_EQ(Call({"EXISTS", RedisKeyFor("rl:", limit.key, "")}).integer, 0);

  // Decided later (an hour ahead of the server's clock, so that this write stays), the missing
  // state gives what the written one (full by then) would have.
  const int64_t t1 = t0 + 3600 * kSecond;
  auto second = ApplyInRedis(op, t1);
  ASSERT_OK(second);
  const Decision from_written =
      Decide(limit.config, LimitId{"user", "u1"}, written, 5, Mode::kConsume, t1);
  const Decision from_missing =
      Decide(limit.config, LimitId{"user", "u1"}, std::nullopt, 5, Mode::kConsume, t1);
  EXPECT_EQ(from_written.next, from_missing.next);
  EXPECT_EQ(second->decisions[0].next, from_written.next);
  EXPECT_EQ(StoredInRedis(limit.key), from_written.next);
}

TEST_F(RedisLuaTest, AStateNotYetFullExpiresNoEarlierThanFullAt) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  // One token per hour: the state stays for a while, by the server's own clock.
  const LimitOp limit{StateKey{"user", "u1"}, TokenBucket(1, 3600 * kSecond, 5), 2};
  auto out = ApplyInRedis(Operation{absl::MakeConstSpan(&limit, 1), Mode::kConsume}, {});
  ASSERT_OK(out);
  const int64_t full_at = out->decisions[0].next.full_at_us;
  EXPECT_EQ(full_at, out->now_us + 2 * 3600 * kSecond + 1);
  const redis::Reply expires = Call({"PEXPIRETIME", RedisKeyFor("rl:", limit.key, "")});
  EXPECT_GE(expires.integer * 1000, full_at);
  EXPECT_LT(expires.integer * 1000, full_at + 1000);
}

// --- The differential test --------------------------------------------------------------------

// A valid random config with magnitudes from 1e-6 to 1e15.
LimitConfig RandomConfig(std::mt19937_64& rng) {
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

double RandomCount(std::mt19937_64& rng, const LimitConfig& c) {
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

void ExpectSameState(const std::optional<State>& redis, const std::optional<State>& memory,
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

TEST_F(RedisLuaTest, RandomOperationsDecideAndStoreExactlyAsTheAlgebra) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  std::mt19937_64 rng(20261123);
  // Far enough ahead of the server's clock that no state expires during the test, and close to
  // the horizon, where full_at values cross it.
  const int64_t real_now = SystemClock::Default().NowMicros();
  const int64_t bases[] = {real_now + int64_t{365} * 86400 * kSecond,
                           kRedisTimeHorizonUs - int64_t{30} * 86400 * kSecond};
  const Mode modes[] = {Mode::kCheck, Mode::kConsume, Mode::kConsume, Mode::kReserve};
  int decisions = 0;
  int allowed = 0;
  int horizon_states = 0;
  for (int sequence = 0; sequence < 160; ++sequence) {
    ASSERT_EQ(Call({"FLUSHALL"}).type, redis::Reply::Type::kStatus);
    MemoryStateStore memory;
    FakeClock clock(bases[sequence % 2]);
    // A few keys, each with its own config.
    std::vector<StateKey> keys;
    std::vector<LimitConfig> configs;
    const int nkeys = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < nkeys; ++k) {
      keys.push_back(StateKey{absl::StrCat("n", k % 3), absl::StrCat("k", k),
                              k % 2 ? LimitSource::kDefined : LimitSource::kInline});
      configs.push_back(RandomConfig(rng));
    }
    for (int step = 0; step < 60; ++step) {
      const std::string where = absl::StrCat("sequence ", sequence, " step ", step);
      // Time: mostly forward by a fraction of some period, sometimes back, sometimes tiny steps.
      const int64_t period = configs[rng() % configs.size()].period_us;
      int64_t dt;
      switch (rng() % 6) {
        case 0:
          dt = -static_cast<int64_t>(rng() % (10 * kSecond));
          break;
        case 1:
          dt = static_cast<int64_t>(rng() % 10);
          break;
        default: {
          const double f = std::uniform_real_distribution<double>(0, 1.5)(rng);
          dt = static_cast<int64_t>(std::min(f * static_cast<double>(period),
                                             static_cast<double>(kSecond) * 86400 * 365));
        }
      }
      if (clock.NowMicros() + dt >= kRedisTimeHorizonUs)
        dt = -static_cast<int64_t>(rng() % kSecond);
      clock.Advance(dt);
      std::vector<LimitOp> limits;
      const int n = 1 + static_cast<int>(rng() % 6);  // up to 6 limits, repeats allowed
      for (int i = 0; i < n; ++i) {
        const size_t k = rng() % keys.size();
        limits.push_back(LimitOp{keys[k], configs[k], RandomCount(rng, configs[k])});
      }
      const Operation op{limits, modes[rng() % 4]};

      auto expected = memory.Apply(op, clock);
      ASSERT_OK(expected);
      auto got = ApplyInRedis(op, clock.NowMicros());
      ASSERT_TRUE(got.ok()) << where << ": " << got.status();
      ++decisions;
      allowed += got->allowed;
      ASSERT_EQ(got->allowed, expected->allowed) << where;
      ASSERT_EQ(got->now_us, expected->now_us) << where;
      for (size_t i = 0; i < limits.size(); ++i) {
        const Decision& g = got->decisions[i];
        const Decision& e = expected->decisions[i];
        ASSERT_EQ(g.allowed, e.allowed) << where << " limit " << i;
        ASSERT_EQ(g.reason, e.reason) << where;
        ASSERT_TRUE(SameBits(g.value, e.value)) << where;
        ASSERT_EQ(g.retry_at_us, e.retry_at_us) << where;
        ASSERT_EQ(g.next, e.next) << where;
      }
      for (const StateKey& k : DistinctKeys(limits).keys) {
        auto in_memory = memory.Get(k);
        ASSERT_OK(in_memory);
        const std::optional<State> in_redis = StoredInRedis(k);
        ExpectSameState(in_redis, *in_memory, where);
        if (!in_redis) continue;
        // The expiry: at or after full_at (less than a millisecond after), or none for never.
        const redis::Reply expires = Call({"PEXPIRETIME", RedisKeyFor("rl:", k, "")});
        if (in_redis->full_at_us == kNever) {
          ++horizon_states;
          EXPECT_EQ(expires.integer, -1) << where;
        } else {
          EXPECT_GE(expires.integer * 1000, in_redis->full_at_us) << where;
          EXPECT_LT(expires.integer * 1000, in_redis->full_at_us + 1000) << where;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
  // The sequences covered what they are meant to.
  EXPECT_GT(allowed, decisions / 10);
  EXPECT_LT(allowed, decisions * 9 / 10);
  EXPECT_GT(horizon_states, 0);
}

// States placed directly (not reached by a sequence) just around every threshold the algebra
// tests: the count, the capacity, the reservation floor, zero, each a few units of tolerance away.
TEST_F(RedisLuaTest, StatesAroundEveryThresholdDecideExactlyAsTheAlgebra) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  std::mt19937_64 rng(99);
  const int64_t now = SystemClock::Default().NowMicros() + int64_t{365} * 86400 * kSecond;
  const Mode modes[] = {Mode::kCheck, Mode::kConsume, Mode::kReserve};
  int flips = 0;  // cases where the allowed answer differs from that of the neighbouring state
  for (int i = 0; i < 4000; ++i) {
    const LimitConfig c = RandomConfig(rng);
    const double count = RandomCount(rng, c);
    const double cap = c.EffectiveCapacity();
    const double targets[] = {count, cap, count - c.max_reserved.value_or(cap), 0};
    const double target = targets[rng() % 4];
    const double unit = std::numeric_limits<double>::epsilon() * std::max(cap, count);
    const double value = target + unit * (static_cast<double>(rng() % 97) / 8.0 - 6);
    // Refill since then: none, a little, or windows.
    const int64_t back = rng() % 2 ? 0 : static_cast<int64_t>(rng() % (2 * c.period_us + 1));
    const State state{value, now - back, 0};
    const StateKey key{"t", absl::StrCat(i)};
    const LimitOp limit{key, c, count};
    const Operation op{absl::MakeConstSpan(&limit, 1), modes[rng() % 3]};

    MemoryStateStore memory;
    State stored = state;
    stored.full_at_us = FullAt(c, state);
    ASSERT_OK(memory.Update(absl::MakeConstSpan(&key, 1),
                            [&](auto, absl::Span<std::optional<State>> writes) {
                              writes[0] = stored;
                              return absl::OkStatus();
                            }));
    Call({"SET", RedisKeyFor("rl:", key, ""), EncodeRedisState(stored)});
    FakeClock clock(now);
    auto expected = memory.Apply(op, clock);
    ASSERT_OK(expected);
    auto got = ApplyInRedis(op, now);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    ASSERT_EQ(got->allowed, expected->allowed) << i;
    ASSERT_TRUE(SameBits(got->decisions[0].value, expected->decisions[0].value)) << i;
    ASSERT_EQ(got->decisions[0].next, expected->decisions[0].next) << i;
    auto in_memory = memory.Get(key);
    ASSERT_OK(in_memory);
    ExpectSameState(StoredInRedis(key), *in_memory, absl::StrCat("case ", i));

    const Decision nudged =
        Decide(c, LimitId{key.name, key.key}, State{std::nextafter(value, -1e300), state.ts_us, 0},
               count, op.mode, now);
    flips += nudged.allowed != expected->allowed;
  }
  // The states sat on the thresholds: some answers change with the last bit of the balance.
  EXPECT_GT(flips, 0);
}

// --- Limits under a runtime override (LimitConfig::adjustment) ----------------------------------

using Effect = LimitConfig::Adjustment::Effect;

// `after` under an override: changed at `changed_at` (unset: no change to carry) from the token
// bucket `before`, counted against `base_capacity`, with `effect`.
LimitConfig Adjusted(LimitConfig after, std::optional<int64_t> changed_at,
                     const LimitConfig& before, double base_capacity,
                     Effect effect = Effect::kLimit) {
  LimitConfig::Adjustment a;
  a.effect = effect;
  a.changed_at_us = changed_at;
  a.before_rate = before.rate;
  a.before_period_us = before.period_us;
  a.before_capacity = before.EffectiveCapacity();
  a.base_capacity = base_capacity;
  after.adjustment = a;
  return after;
}

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
            EXPECT_EQ(StoredInRedis(key), current) << where;
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

// --- The shared vectors -----------------------------------------------------------------------

// Every vector of tests/support/algebra_vectors.h (exact answers worked out by hand, which
// storage/algebra gives too: tests/storage/algebra_test.cc) decided by the library from the
// state the vector starts from: the verdict and the state it writes, bit for bit, straight from
// the function's reply; then the whole decision (retry_at, reasons) as the server explains it.
TEST_F(RedisLuaTest, EachAlgebraVectorDecidesAndStoresItsExactAnswer) {
  ASSERT_OK(EnsureRedisLibrary(*redis_));
  for (const AlgebraVector& v : kAlgebraVectors) {
    SCOPED_TRACE(v.name);
    ASSERT_EQ(Call({"FLUSHALL"}).type, redis::Reply::Type::kStatus);
    const StateKey key{std::string(kVectorId.name), std::string(kVectorId.key)};
    if (v.current) Call({"SET", RedisKeyFor("rl:", key, ""), EncodeRedisState(*v.current)});
    const LimitOp limit{key, v.config, v.count};
    const Operation op{absl::MakeConstSpan(&limit, 1), v.mode};
    const OperationKeys keys = DistinctKeys(op.limits);
    auto reply = redis_->Command(RedisApplyCommand(op, keys, RedisKeys(keys), v.now_us));
    ASSERT_OK(reply);

    // {now, allowed, the state read, the state written}.
    ASSERT_EQ(reply->type, redis::Reply::Type::kArray);
    ASSERT_EQ(reply->elements.size(), 4u);
    EXPECT_EQ(reply->elements[0].str, absl::StrCat(v.now_us));
    EXPECT_EQ(reply->elements[1].integer, v.allowed ? 1 : 0);
    EXPECT_EQ(reply->elements[2].str, v.current ? EncodeRedisState(*v.current) : "");
    if (v.next) {
      const std::optional<State> written = DecodeRedisState(reply->elements[3].str);
      ASSERT_TRUE(written.has_value()) << reply->elements[3].str;
      EXPECT_TRUE(SameBits(written->value, v.next->value))
          << written->value << " vs " << v.next->value;
      EXPECT_EQ(written->ts_us, v.next->ts_us);
      EXPECT_EQ(written->full_at_us, v.next->full_at_us);
      EXPECT_EQ(StoredInRedis(key), v.next);
    } else {
      EXPECT_EQ(reply->elements[3].str, "");
      EXPECT_EQ(StoredInRedis(key), v.current);
    }

    auto outcome = RedisApplyOutcome(op, keys, *reply);
    ASSERT_OK(outcome);
    const Decision& d = outcome->decisions[0];
    EXPECT_EQ(d.allowed, v.allowed);
    EXPECT_EQ(d.reason, v.reason);
    EXPECT_TRUE(SameBits(d.value, v.value)) << d.value << " vs " << v.value;
    EXPECT_EQ(d.retry_at_us, v.retry_at_us);
  }
}

}  // namespace
}  // namespace ratelimit
