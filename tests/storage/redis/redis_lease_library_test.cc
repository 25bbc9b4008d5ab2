// Where the Redis store keeps a lease set (RedisLeaseKeysFor), how it finds the sets of a name
// (ParseRedisLeaseKey, RedisLeaseNamePattern) and how it encodes a lease: no server needed.
#include "storage/redis/redis_lease_library.h"

#include <fnmatch.h>

#include <string>

#include "gtest/gtest.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_state_store.h"

namespace ratelimit {
namespace {

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
    const std::optional<StateKey> parsed = ParseRedisLeaseKey("p:", keys.expiries);
    ASSERT_TRUE(parsed.has_value()) << keys.expiries;
    EXPECT_EQ(*parsed, key);
    const std::string pattern = RedisLeaseNamePattern("p:", key.source, key.name);
    EXPECT_EQ(fnmatch(pattern.c_str(), keys.expiries.c_str(), 0), 0) << pattern;
    const std::string other = RedisLeaseNamePattern("p:", key.source, "job");
    EXPECT_NE(fnmatch(other.c_str(), keys.expiries.c_str(), 0), 0) << other;
  }
  EXPECT_FALSE(ParseRedisLeaseKey("p:", KeysOf(StateKey{"jobs", "t1"}).leases).has_value());
  EXPECT_FALSE(ParseRedisLeaseKey("p:", RedisKeyFor("p:", StateKey{"jobs", "t1"}, "")));
  EXPECT_FALSE(ParseRedisLeaseKey("q:", KeysOf(StateKey{"jobs", "t1"}).expiries));
}

TEST(RedisLeaseEncodingTest, RoundTripsAnyRequestIdAndHolder) {
  Lease lease;
  lease.id = "0123456789abcdef0123456789abcdef";
  lease.count = 1000000000;
  lease.acquired_at_us = 1800000000000000;
  lease.expires_at_us = 1800000086400000;
  lease.request_id = "r 1:2\n";
  lease.holder = "host 7: pid 9 \xff";
  lease.released = true;
  const std::optional<Lease> back = DecodeRedisLease(lease.id, EncodeRedisLease(lease));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, lease);
  lease.request_id = "";
  lease.holder = "";
  lease.released = false;
  EXPECT_EQ(DecodeRedisLease(lease.id, EncodeRedisLease(lease)), lease);
}

TEST(RedisLeaseEncodingTest, RejectsMalformedText) {
  for (const char* text :
       {"", "1 2 3 0", "1 2 3 2 0:", "1 2 3 0 5:abc", "-1 2 3 0 0:", "x 2 3 0 0:"}) {
    EXPECT_FALSE(DecodeRedisLease("a", text).has_value()) << text;
  }
}

}  // namespace
}  // namespace ratelimit
