// The Redis function library (storage/redis/ratelimit.lua) against the C++ algebra: the key
// layout, the state encoding, loading by version, and a differential test on a real redis-server
// that compares every decision and every stored state with the in-memory store, bit for bit.
// Limits under a runtime override: redis_lua_adjusted_test.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/memory/memory_state_store.h"
#include "storage/redis/redis_function_library.h"
#include "tests/storage/redis/redis_lua_fixture.h"
#include "tests/support/algebra_vectors.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::AlgebraVector;
using ::ratelimit::testing::ExpectSameState;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FixedWindow;
using ::ratelimit::testing::HiredisConnection;
using ::ratelimit::testing::kAlgebraVectors;
using ::ratelimit::testing::kNever;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::kVectorId;
using ::ratelimit::testing::RandomConfig;
using ::ratelimit::testing::RandomCount;
using ::ratelimit::testing::RedisLuaTest;
using ::ratelimit::testing::SameBits;
using ::ratelimit::testing::TokenBucket;

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
  for (const char* bad : {"", "1 2", "1 2 3 4 5", "x 2 3", "1 2.5 3", "1  2 3", "1 2 3 ", "1 2 3 0",
                          "1 2 3 -4", "1 2 3 x"}) {
    EXPECT_FALSE(DecodeRedisState(bad).has_value()) << bad;
  }
}

TEST(RedisStateEncodingTest, AFixedWindowsCountedCapacityIsAFourthNumber) {
  const State s{17.5, 1000, 2000, 50};
  EXPECT_EQ(EncodeRedisState(s), "17.5 1000 2000 50");
  EXPECT_EQ(DecodeRedisState("17.5 1000 2000 50"), s);
  EXPECT_EQ(EncodeRedisState(State{17.5, 1000, 2000}), "17.5 1000 2000");
}

TEST(RedisLibraryTest, VersionInTheCodeMatchesTheConstant) {
  EXPECT_NE(
      RedisLibraryCode().find(absl::StrCat("local LIBRARY_VERSION = '", kRedisLibraryVersion, "'")),
      absl::string_view::npos);
  EXPECT_TRUE(absl::StartsWith(RedisLibraryCode(), "#!lua name=ratelimit\n"));
}

// The library's code, pinned to its version. A server keeps a library of its own version that it
// finds loaded (EnsureRedisLibrary), so code changed under an unchanged version would never reach
// a Redis that holds the earlier code. A change to ratelimit.lua, holds.lua or leases.lua is a new
// version with a new row here; a row, once landed, is never edited.
TEST(RedisLibraryTest, TheCodeIsPinnedToItsVersion) {
  const std::map<std::string, uint64_t> pinned = {
      {"11", 0x0a59eceb019b58ccull},
      {"12", 0x478c47e552cc0886ull},
      {"13", 0xd8c0e9e946b8f954ull},
  };
  const uint64_t code = StableKeyHash("redis-library", RedisLibraryCode());
  const auto it = pinned.find(std::string(kRedisLibraryVersion));
  ASSERT_NE(it, pinned.end()) << "version " << kRedisLibraryVersion << " needs its row: 0x"
                              << std::hex << code;
  EXPECT_EQ(code, it->second) << "the library changed under version " << kRedisLibraryVersion
                              << ": give it a new version (its code is 0x" << std::hex << code
                              << ")";
}

// --- Against a real redis-server ----------------------------------------------------------------

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
      EXPECT_TRUE(SameBits(written->counted_against, v.next->counted_against));
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
