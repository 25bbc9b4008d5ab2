// Where the Redis store keeps a lease set (RedisLeaseKeysFor), how it finds the sets of a name or
// all of them (ParseRedisLeaseSet, RedisLeaseNamePattern, RedisLeaseKeysPattern) and how it
// encodes a lease (no server needed); and
// a differential test on a real redis-server: random lease ops decided by the function library
// (ratelimit_lease, storage/redis/leases.lua, through RedisLeaseCommand and RedisLeaseOutcome)
// and by the algebra (DecideLease) give the same decisions and leave the same lease sets.
#include "storage/redis/redis_lease_library.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/leases/apply_lease.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_state_store.h"
#include "tests/support/lease_test_ids.h"
#include "tests/support/lease_test_ops.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/test_support.h"

namespace ratelimit {

// Leases as gtest prints them in a failure.
void PrintTo(const Lease& l, std::ostream* os) {
  *os << "{" << l.id << " count " << l.count << " acquired " << l.acquired_at_us << " expires "
      << l.expires_at_us << (l.released ? " released" : "") << " request_id '" << l.request_id
      << "' holder '" << l.holder << "'}";
}

namespace {

using ::ratelimit::testing::ById;
using ::ratelimit::testing::kSecond;

RedisLeaseKeys KeysOf(const StateKey& key) {
  return RedisLeaseKeysFor("p:", key, RedisHashTagOfKey(key.key));
}

TEST(RedisLeaseKeysTest, BothKeysLiveInTheSlotOfTheState) {
  for (const StateKey& key : {StateKey{"jobs", "t1"}, StateKey{"jobs", "{org7}u42"},
                              StateKey{"a{b}", "c}d{"}, StateKey{"x", ""}}) {
    const int slot = redis::KeySlot(RedisKeyFor("p:", key, RedisHashTagOfKey(key.key)));
    const RedisLeaseKeys keys = KeysOf(key);
    EXPECT_EQ(redis::KeySlot(keys.expiries), slot) << keys.expiries;
    EXPECT_EQ(redis::KeySlot(keys.leases), slot) << keys.leases;
    EXPECT_NE(keys.expiries, keys.leases);
  }
}

TEST(RedisLeaseKeysTest, ALeaseKeyIsNeverAStateOrARecord) {
  const StateKey key{"jobs", "{org7}u42"};
  const RedisLeaseKeys keys = KeysOf(key);
  EXPECT_EQ(keys.expiries, "p:{org7}Lzd4:jobs{org7}u42");
  EXPECT_EQ(KeysOf(StateKey{"jobs", "t1"}).expiries, "p:{d4:jobst1}Lzd4:jobst1");
  for (const std::string& k : {keys.expiries, keys.leases}) {
    EXPECT_FALSE(ParseRedisKey("p:", k).has_value()) << k;
  }
  EXPECT_NE(keys.expiries, RedisRecordKey("p:", "org7", "Lzd4:jobs{org7}u42"));
}

TEST(RedisLeaseKeysTest, ParseAndThePatternFindTheSetsOfOneNameOnly) {
  for (const StateKey& key : {StateKey{"jobs", "t1"}, StateKey{"jobs", "{org7}u42"},
                              StateKey{"jobs", "*?[x]"}, StateKey{"jobs", ""}}) {
    const RedisLeaseKeys keys = KeysOf(key);
    const std::optional<RedisLeaseSet> parsed = ParseRedisLeaseSet("p:", keys.expiries);
    ASSERT_TRUE(parsed.has_value()) << keys.expiries;
    EXPECT_EQ(parsed->key, key);
    EXPECT_EQ(parsed->keys.expiries, keys.expiries);
    EXPECT_EQ(parsed->keys.leases, keys.leases);
    const std::string pattern = RedisLeaseNamePattern("p:", key.source, key.name);
    EXPECT_EQ(fnmatch(pattern.c_str(), keys.expiries.c_str(), 0), 0) << pattern;
    const std::string other = RedisLeaseNamePattern("p:", key.source, "job");
    EXPECT_NE(fnmatch(other.c_str(), keys.expiries.c_str(), 0), 0) << other;
    // The leak search's pattern covers every set's expiries key under the prefix, and only it.
    const std::string all = RedisLeaseKeysPattern("p:");
    EXPECT_EQ(fnmatch(all.c_str(), keys.expiries.c_str(), 0), 0) << all;
    EXPECT_NE(fnmatch(RedisLeaseKeysPattern("q:").c_str(), keys.expiries.c_str(), 0), 0);
  }
  // A prefix's glob characters are matched as themselves.
  EXPECT_EQ(fnmatch(RedisLeaseKeysPattern("a*[b]:").c_str(), "a*[b]:{t1}Lzd4:jobst1", 0), 0);
  EXPECT_NE(fnmatch(RedisLeaseKeysPattern("a*:").c_str(), "aXY:{t1}Lzd4:jobst1", 0), 0);
  EXPECT_FALSE(ParseRedisLeaseSet("p:", KeysOf(StateKey{"jobs", "t1"}).leases).has_value());
  EXPECT_FALSE(ParseRedisLeaseSet("p:", RedisKeyFor("p:", StateKey{"jobs", "t1"}, "")));
  EXPECT_FALSE(ParseRedisLeaseSet("q:", KeysOf(StateKey{"jobs", "t1"}).expiries));
  // The shape of a set's key under a tag that is not its key's own: not a set this store writes.
  EXPECT_FALSE(ParseRedisLeaseSet("p:", "p:{org7}Lzd4:jobst1").has_value());
  EXPECT_FALSE(ParseRedisLeaseSet("p:", "p:{other}Lzd4:jobs{org7}u42").has_value());
}

TEST(RedisLeaseEncodingTest, RoundTripsAnyRequestIdAndHolder) {
  Lease lease;
  lease.id = *LeaseId::Parse("0123456789abcdef0123456789abcdef");
  lease.count = 1000000000;
  lease.acquired_at_us = 1800000000000000;
  lease.expires_at_us = 1800000086400000;
  lease.request_id = "r 1:2\n";
  lease.holder = "host 7: pid 9 \xff";
  lease.released = true;
  const std::optional<Lease> back = DecodeRedisLease(lease.id.ToString(), EncodeRedisLease(lease));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, lease);
  lease.request_id = "";
  lease.holder = "";
  lease.released = false;
  EXPECT_EQ(DecodeRedisLease(lease.id.ToString(), EncodeRedisLease(lease)), lease);
  // A field that is not a lease id's digits holds no lease.
  for (const std::string& id :
       {std::string("a"), std::string(32, '0'), std::string("0123456789ABCDEF0123456789abcdef")}) {
    EXPECT_FALSE(DecodeRedisLease(id, EncodeRedisLease(lease)).has_value()) << id;
  }
}

TEST(RedisLeaseEncodingTest, RejectsMalformedText) {
  for (const char* text :
       {"", "1 2 3 0", "1 2 3 2 0:", "1 2 3 0 5:abc", "-1 2 3 0 0:", "x 2 3 0 0:"}) {
    EXPECT_FALSE(DecodeRedisLease("0123456789abcdef0123456789abcdef", text).has_value()) << text;
  }
}

// --- Against a real redis-server: the library decides as DecideLease ---------------------------

constexpr int64_t kMs = 1000;

// A key of the sequence: its concurrency limit and the ids its acquires used.
struct SequenceKey {
  StateKey key;
  int64_t capacity = 1;
  std::vector<LeaseId> ids;
};

class RedisLeaseDifferentialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::RedisServerInstalled()) << "redis-server is required (scripts/setup.sh)";
    auto server = testing::RedisStandalone::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    auto connection = server_->Connect();
    ASSERT_OK(connection);
    redis_ = *std::move(connection);
    ASSERT_OK(EnsureRedisLibrary(*redis_));
  }

  redis::Reply Call(std::vector<std::string> argv) {
    auto reply = redis_->Command(argv);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : redis::Reply{};
  }

  static RedisLeaseKeys KeysOf(const StateKey& key) {
    return RedisLeaseKeysFor("rl:", key, RedisHashTagOfKey(key.key));
  }

  // `op` decided by the library at `now`.
  absl::StatusOr<LeaseOutcome> DecideInRedis(const LeaseOp& op, int64_t now) {
    const LeaseOperation operation{op};
    auto reply =
        redis_->Command(RedisLeaseCommand(operation, KeysOf(op.key), OperationKeys{}, {}, now));
    if (!reply.ok()) return reply.status();
    return RedisLeaseOutcome(operation, OperationKeys{}, *reply);
  }

  // Expects the lease set of `key` in Redis to be `want`: the same leases (HGETALL), each scored
  // by its expiry (ZRANGE), the slots held ('#') those of the leases not released, each
  // request_id naming its lease, and both keys expiring at the latest expiry (ms, rounded up), or
  // both gone when `want` is empty.
  void ExpectStoredSet(const StateKey& key, LeaseSet want, const std::string& where) {
    const RedisLeaseKeys keys = KeysOf(key);
    const redis::Reply hash = Call({"HGETALL", keys.leases});
    absl::StatusOr<LeaseSet> got = RedisLeaseSetFromHash(hash);
    ASSERT_OK(got);
    want.leases = ById(std::move(want.leases));
    ASSERT_EQ(*got, want) << where;
    if (want.leases.empty()) {
      EXPECT_EQ(Call({"EXISTS", keys.expiries, keys.leases}).integer, 0) << where;
      return;
    }
    std::map<std::string, std::string> fields;
    for (size_t i = 0; i + 1 < hash.elements.size(); i += 2) {
      fields[hash.elements[i].str] = hash.elements[i + 1].str;
    }
    int64_t held = 0;
    size_t request_ids = 0;
    for (const Lease& l : want.leases) {
      if (!l.released) held += l.count;
      if (l.request_id.empty()) continue;
      ++request_ids;
      EXPECT_EQ(fields["r:" + l.request_id], l.id.ToString()) << where;
    }
    EXPECT_EQ(fields["#"], absl::StrCat(held)) << where;
    EXPECT_EQ(fields.size(), want.leases.size() + request_ids + 1) << where;
    const redis::Reply scores = Call({"ZRANGE", keys.expiries, "0", "-1", "WITHSCORES"});
    ASSERT_EQ(scores.elements.size(), 2 * want.leases.size()) << where;
    for (size_t i = 0; i < scores.elements.size(); i += 2) {
      const auto lease = std::find_if(want.leases.begin(), want.leases.end(), [&](const Lease& l) {
        return l.id.ToString() == scores.elements[i].str;
      });
      ASSERT_NE(lease, want.leases.end()) << where;
      EXPECT_EQ(scores.elements[i + 1].str, absl::StrCat(lease->expires_at_us)) << where;
    }
    const int64_t latest = LeaseSetExpiresAt(want);
    for (const std::string& k : {keys.expiries, keys.leases}) {
      // Kept as long as a RocksDB record keeps a lease: the leak detector's window.
      EXPECT_EQ(Call({"PEXPIRETIME", k}).integer,
                (latest + kLeaseRecordMarginMicros + kMs - 1) / kMs)
          << where << " " << k;
    }
  }

  std::unique_ptr<testing::RedisStandalone> server_;
  std::unique_ptr<testing::HiredisConnection> redis_;
};

TEST_F(RedisLeaseDifferentialTest, RandomLeaseOpsDecideAndStoreExactlyAsTheAlgebra) {
  std::mt19937_64 rng(20261129);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  // Request ids and holders of any bytes the encoding must keep (spaces, ':', newlines).
  const std::vector<std::string> request_ids = {"", "", "q1", "q 2", "r:3\n"};
  const std::vector<std::string> holders = {"", "worker 7", "host:9 \xff"};
  std::map<LeaseAction, int> actions;
  int allowed = 0, denied = 0, exceeds = 0, replayed = 0, not_held = 0, retry_at = 0;
  int expired_unreleased = 0, emptied = 0, ops = 0, ties = 0, paged = 0;
  for (int sequence = 0; sequence < 40; ++sequence) {
    ASSERT_EQ(Call({"FLUSHALL"}).type, redis::Reply::Type::kStatus);
    // A day ahead of the real clock: Redis' own expiry (PEXPIREAT, real time) never drops a set.
    int64_t now = SystemClock::Default().NowMicros() + 86400 * kSecond + pick(kMs);
    std::vector<SequenceKey> keys;
    const int nkeys = 1 + static_cast<int>(pick(3));
    for (int k = 0; k < nkeys; ++k) {
      SequenceKey s;
      s.key = StateKey{absl::StrCat("n", k % 2), k == 2 ? "{org}u1" : absl::StrCat("k", k),
                       k % 2 ? LimitSource::kInline : LimitSource::kDefined};
      s.capacity = 1 + pick(8);
      keys.push_back(s);
    }
    std::map<size_t, LeaseSet> model;  // by index in `keys`
    int next_id = 0;
    for (int step = 0; step < 60; ++step) {
      const std::string where = absl::StrCat("sequence ", sequence, " step ", step);
      const size_t k = static_cast<size_t>(pick(nkeys));
      SequenceKey& key = keys[k];
      // The clock only moves forward: often by less than a TTL, sometimes onto a lease's expiry
      // or just before it, sometimes not at all.
      switch (pick(6)) {
        case 0:
          break;
        case 1:
          if (!model[k].leases.empty()) {
            const int64_t at = model[k].leases[pick(model[k].leases.size())].expires_at_us;
            if (at - 1 >= now) now = at - pick(2);
          }
          break;
        default:
          now += pick(2 * kSecond);
      }
      // Now and then the limit's capacity changes (held may then exceed it).
      if (pick(20) == 0) key.capacity = 1 + pick(8);

      LeaseOp op;
      op.key = key.key;
      op.config.kind = LimitKind::kConcurrency;
      op.config.capacity = static_cast<double>(key.capacity);
      op.config.lease_ttl_us = 10 * kSecond;
      op.config.max_lease_ttl_us = 3600 * kSecond;
      const int64_t a = pick(30);
      op.action = a < 12   ? LeaseAction::kAcquire
                  : a < 17 ? LeaseAction::kRelease
                  : a < 21 ? LeaseAction::kExtend
                  : a < 24 ? LeaseAction::kCheck
                  : a < 29 ? LeaseAction::kList
                           : LeaseAction::kReset;
      // Mostly one slot (sets of several leases), now and then more, or more than capacity.
      op.count = pick(3) ? 1 : 1 + pick(key.capacity + 1);
      // TTLs of whole ms and of any µs (the set's PEXPIREAT rounds up), from 1 ms to 20 s.
      op.ttl_us = pick(2) ? kMs * (1 + pick(20000)) : kMs + pick(20 * kSecond);
      // Or up to the expiry of a lease of the set: leases of one expiry (a list orders them by
      // acquisition, then id).
      if (pick(3) == 0 && !model[k].leases.empty()) {
        const int64_t to = model[k].leases[pick(model[k].leases.size())].expires_at_us - now;
        if (to >= kMinLeaseTtlMicros) op.ttl_us = to;
      }
      if (op.action == LeaseAction::kAcquire) {
        op.lease_id = NamedId(absl::StrCat("l", next_id++));
        op.request_id = request_ids[pick(request_ids.size())];
        op.holder = holders[pick(holders.size())];
        key.ids.push_back(op.lease_id);
      } else if (op.action == LeaseAction::kRelease || op.action == LeaseAction::kExtend) {
        op.lease_id =
            key.ids.empty() || pick(8) == 0 ? NamedId("unknown") : key.ids[pick(key.ids.size())];
      } else if (op.action == LeaseAction::kList && pick(3) != 0) {
        // A page: a few leases (or every one) after the place of a lease of the set (held,
        // released or expired), or after a place between leases, or from the first.
        op.list_limit = pick(4);
        if (pick(4) != 0 && !model[k].leases.empty()) {
          op.list_after = PlaceOf(model[k].leases[pick(model[k].leases.size())]);
          if (pick(4) == 0) op.list_after->id = NamedId("l5");
        }
      }
      ASSERT_OK(ValidateLeaseOp(op));

      const LeaseDecision want = DecideLease(op, model[k], now);
      absl::StatusOr<LeaseOutcome> got = DecideInRedis(op, now);
      ASSERT_TRUE(got.ok()) << where << ": " << got.status();
      const LeaseDecision& d = got->lease;
      ++ops;
      ++actions[op.action];
      ASSERT_EQ(got->now_us, now) << where;
      ASSERT_EQ(got->allowed, want.allowed) << where;
      ASSERT_EQ(d.allowed, want.allowed) << where;
      ASSERT_EQ(d.reason, want.reason) << where;
      ASSERT_EQ(d.state, want.state) << where;
      ASSERT_EQ(d.replayed, want.replayed) << where;
      ASSERT_EQ(d.lease, want.lease) << where;
      ASSERT_EQ(d.held, want.held) << where;
      ASSERT_EQ(d.free, want.free) << where;
      ASSERT_EQ(d.retry_at_us, want.retry_at_us) << where;
      ASSERT_EQ(d.expired_unreleased, want.expired_unreleased) << where;
      ASSERT_EQ(d.held_leases, want.held_leases) << where;
      ASSERT_EQ(d.more_listed, want.more_listed) << where;
      ASSERT_EQ(d.write, want.write) << where;
      if (want.write) {
        emptied += want.next.leases.empty() && !model[k].leases.empty();
        model[k] = want.next;
      }
      ExpectStoredSet(key.key, model[k], where);
      if (::testing::Test::HasFailure()) return;

      if (op.action == LeaseAction::kAcquire || op.action == LeaseAction::kCheck) {
        allowed += want.allowed && !want.replayed;
        denied += !want.allowed;
        exceeds += want.reason == DenyReason::kCountExceedsCapacity;
        retry_at += want.retry_at_us.has_value();
      }
      replayed += want.replayed;
      paged += want.more_listed;
      for (size_t i = 1; i < want.held_leases.size(); ++i) {
        ties += want.held_leases[i].expires_at_us == want.held_leases[i - 1].expires_at_us;
      }
      not_held += (op.action == LeaseAction::kRelease || op.action == LeaseAction::kExtend) &&
                  want.state == LeaseState::kNotHeld;
      expired_unreleased += want.write && want.expired_unreleased > 0;
    }
    // A decision touches its own key only: every other set is as its own decisions left it.
    for (size_t j = 0; j < keys.size(); ++j) {
      ExpectStoredSet(keys[j].key, model[j], absl::StrCat("sequence ", sequence, " key ", j));
    }
  }
  // The sequences covered what they are meant to.
  EXPECT_EQ(actions.size(), 6u);
  EXPECT_GT(allowed, ops / 10);
  EXPECT_GT(denied, ops / 20);
  EXPECT_GT(exceeds, 0);
  EXPECT_GT(retry_at, 0);
  EXPECT_GT(replayed, 0);
  EXPECT_GT(not_held, 0);
  EXPECT_GT(expired_unreleased, 0);
  EXPECT_GT(emptied, 0);
  EXPECT_GT(ties, 0);   // lists of leases of one expiry
  EXPECT_GT(paged, 0);  // pages that more leases follow
}

}  // namespace
}  // namespace ratelimit
