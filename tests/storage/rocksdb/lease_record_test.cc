// A lease's record in the RocksDB store (storage/rocksdb/lease_record.h): its key (a key's
// records share a prefix no other key's records start with, which the records family's prefix
// extractor gives for each of them) and value (padded to a size class;
// round trips; a free record reads as no lease; malformed bytes are DATA_LOSS); the set records
// of earlier versions are still read. On the store: decisions on a key rewrite its records in
// place (a release frees its record, the next acquire takes it again), so a hot key adds no
// memtable entries; record numbers survive a restart (an acquire after it never takes a held
// lease's); set records of earlier versions are moved to per-lease records at open.
#include "storage/rocksdb/lease_record.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/slice_transform.h"
#include "storage/leases/apply_lease.h"
#include "storage/leases/lease_codec.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "storage/rocksdb/state_codec.h"
#include "tests/storage/lease_store_contract.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace testing {
// Only the contract's helpers are used here; its suite runs in the stores' own tests.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LeaseStoreContractTest);
}  // namespace testing
namespace {

using namespace ::ratelimit::testing;  // NOLINT: the contract's helpers

LeaseSet SetOf(int leases) {
  LeaseSet set;
  for (int i = 0; i < leases; ++i) {
    Lease l;
    l.id = *LeaseId::Parse(absl::StrCat("0123456789abcdef0123456789ab", 1000 + i));
    l.count = 1 + i % 3;
    l.acquired_at_us = 1000 + i;
    l.expires_at_us = 5000 + i;
    l.request_id = i % 2 == 0 ? absl::StrCat("req-", i) : "";
    l.released = i % 5 == 4 && !l.request_id.empty();
    set.leases.push_back(l);
  }
  return set;
}

// The padded set record of the version before per-lease records.
std::string PaddedSetRecord(int64_t expires_at_us, const LeaseSet& set, size_t padding) {
  const std::string bytes = EncodeLeaseSet(set);
  std::string payload(1, '\xff');
  for (int i = 0; i < 4; ++i)
    payload.push_back(static_cast<char>((bytes.size() >> (8 * i)) & 0xff));
  payload += bytes;
  payload.append(padding, '\0');
  return EncodeRecordValue(expires_at_us, payload);
}

TEST(LeaseEntryKeyTest, AKeysRecordsShareAPrefixNoOtherKeysRecordsStartWith) {
  const std::string t = LeaseEntryPrefix(StateKey{"jobs", "t"});
  std::string key;
  LeaseEntryKey(t, 7, &key);
  EXPECT_TRUE(absl::StartsWith(key, t));
  EXPECT_TRUE(absl::StartsWith(key, LeaseEntryLimitPrefix(LimitSource::kDefined, "jobs")));
  // The key's length ends the key: "t" and "t1", "ab"/"c" and "a"/"bc" never share records.
  EXPECT_FALSE(absl::StartsWith(LeaseEntryPrefix(StateKey{"jobs", "t1"}), t));
  EXPECT_FALSE(absl::StartsWith(LeaseEntryPrefix(StateKey{"ab", "c"}),
                                LeaseEntryPrefix(StateKey{"a", "bc"})));
  EXPECT_FALSE(absl::StartsWith(LeaseEntryPrefix(StateKey{"jobs2", "t"}),
                                LeaseEntryLimitPrefix(LimitSource::kDefined, "jobs")));
  EXPECT_FALSE(absl::StartsWith(LeaseEntryPrefix(StateKey{"jobs", "t", LimitSource::kInline}),
                                LeaseEntryLimitPrefix(LimitSource::kDefined, "jobs")));
  // No other record of the store starts as a lease record does.
  EXPECT_EQ(key[0], 'M');
  EXPECT_NE(LeaseRecordKey(StateKey{"jobs", "t"})[0], 'M');
}

TEST(LeaseEntryKeyTest, AKeyParsesBackToItsKeyAndNumber) {
  for (const StateKey& k :
       {StateKey{"jobs", "t"}, StateKey{"", ""},
        StateKey{std::string(256, 'n'), std::string(1024, '\xff'), LimitSource::kEnvoy}}) {
    std::string key;
    LeaseEntryKey(LeaseEntryPrefix(k), 0x01020304, &key);
    std::optional<LeaseEntryKeyParts> parts = ParseLeaseEntryKey(key);
    ASSERT_TRUE(parts.has_value());
    EXPECT_EQ(parts->key, k);
    EXPECT_EQ(parts->record, 0x01020304u);
    EXPECT_FALSE(ParseLeaseEntryKey(key.substr(0, key.size() - 1)).has_value());
    EXPECT_FALSE(ParseLeaseEntryKey(key + "x").has_value());
  }
  EXPECT_FALSE(ParseLeaseEntryKey(LeaseRecordKey(StateKey{"jobs", "t"})).has_value());
  EXPECT_FALSE(ParseLeaseEntryKey("M").has_value());
  EXPECT_FALSE(ParseLeaseEntryKey(std::string("Mz\0\0\0\0\0\0\0\0", 10)).has_value());
}

TEST(LeaseEntryKeyTest, TheRecordsFamilysPrefixOfALeaseRecordIsItsKeysPrefix) {
  const std::shared_ptr<const rocksdb::SliceTransform> extractor = NewLeaseEntryPrefixExtractor();
  EXPECT_STREQ(extractor->Name(), "ratelimit.LeaseEntryPrefix");
  const auto prefix_of = [&](const std::string& key) {
    EXPECT_TRUE(extractor->InDomain(key));
    return extractor->Transform(key).ToString();
  };
  for (const StateKey& k :
       {StateKey{"jobs", "t"}, StateKey{"jobs", "t1"}, StateKey{"", ""},
        StateKey{std::string(256, 'n'), std::string(1024, '\xff'), LimitSource::kInline}}) {
    const std::string prefix = LeaseEntryPrefix(k);
    std::string key;
    for (uint32_t record : {1u, 0xffffffffu}) {
      LeaseEntryKey(prefix, record, &key);
      EXPECT_EQ(prefix_of(key), prefix);
    }
    // A key's reads seek its prefix, which is no record's key: its own prefix.
    EXPECT_EQ(prefix_of(prefix), prefix);
    // Keys that are no lease record's, whatever they start with, are their own prefix.
    EXPECT_EQ(prefix_of(key.substr(0, key.size() - 1)), key.substr(0, key.size() - 1));
    EXPECT_EQ(prefix_of(key + "x"), key + "x");
  }
  const std::string set_key = LeaseRecordKey(StateKey{"jobs", "t"});
  EXPECT_EQ(prefix_of(set_key), set_key);
  EXPECT_EQ(prefix_of(""), "");
  EXPECT_EQ(prefix_of("M"), "M");
}

TEST(LeaseRecordTest, ALeaseRecordRoundTripsPaddedToItsSizeClass) {
  for (const Lease& l : SetOf(7).leases) {
    std::string value;
    EncodeLeaseEntryRecord(l, &value);
    EXPECT_EQ(value.size(), LeaseEntryRecordBytes(l));
    EXPECT_GE(value.size(), kMinLeaseRecordBytes);
    EXPECT_EQ(value.size() % 64, 0u);
    EXPECT_EQ(DecodeRecordValue(value)->first, l.expires_at_us + kLeaseRecordMarginMicros);
    absl::StatusOr<Lease> back = DecodeLeaseEntryRecord(value);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, l);
  }
  Lease big = SetOf(1).leases[0];
  big.holder = std::string(300, 'h');
  // 8 + 1 + 1 + 1 + 16 + 16 (the id) + 6 (the request_id) + 302 (the holder) = 351 bytes
  EXPECT_EQ(LeaseEntryRecordBytes(big), 384u);
  // A lease that never expires: its record neither.
  big.expires_at_us = INT64_MAX;
  std::string value;
  EncodeLeaseEntryRecord(big, &value);
  EXPECT_EQ(DecodeRecordValue(value)->first, INT64_MAX);
}

TEST(LeaseRecordTest, ALeaseTheServerMadeTakesOneSizeClassOf64Bytes) {
  Lease l;
  l.id = *LeaseId::Parse("9f86d081884c7d659a2feaa0c55ad015");
  l.count = 1'000'000'000;  // the most slots a lease can hold
  l.acquired_at_us = INT64_MAX - 1;
  l.expires_at_us = INT64_MAX;
  std::string value;
  EncodeLeaseEntryRecord(l, &value);
  EXPECT_EQ(value.size(), 64u);
  // With a request_id and holder of 15 bytes together: still 64.
  l.request_id = "retry-1234";
  l.holder = "pod-7";
  EncodeLeaseEntryRecord(l, &value);
  EXPECT_EQ(value.size(), 64u);
  absl::StatusOr<Lease> back = DecodeLeaseEntryRecord(value);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, l);
}

// The compact record of `l` with its id written as a string (the binary-id flag clear), as earlier
// versions could write it: `digits` (its 32 digits, or anything else to test the reader with).
// REQUIRES: l.count < 128 (a varint of one byte).
std::string StringIdRecord(const Lease& l, absl::string_view digits) {
  std::string value;
  EncodeLeaseEntryRecord(l, &value);
  value[9] = static_cast<char>(value[9] & ~2);
  constexpr size_t kIdAt = 8 + 1 + 1 + 1 + 8 + 8;
  value.replace(kIdAt, LeaseId::kBytes, std::string(1, static_cast<char>(digits.size())));
  value.insert(kIdAt + 1, digits.data(), digits.size());
  return value;
}

TEST(LeaseRecordTest, AnIdWrittenAsItsDigitsIsReadAsTheSameId) {
  Lease l;
  l.id = *LeaseId::Parse("9f86d081884c7d659a2feaa0c55ad015");
  l.count = 3;
  l.acquired_at_us = 10;
  l.expires_at_us = 20;
  l.released = true;
  l.request_id = "r";
  absl::StatusOr<Lease> back = DecodeLeaseEntryRecord(StringIdRecord(l, l.id.ToString()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, l);
  // Digits that are no lease id's: the record is malformed.
  for (const std::string& id : {std::string("9F86D081884C7D659A2FEAA0C55AD015"),
                                std::string("9f86d081884c7d659a2feaa0c55ad01"),
                                std::string("9f86d081884c7d659a2feaa0c55ad0155"),
                                std::string(32, '0'), std::string("lease-1"), std::string()}) {
    EXPECT_EQ(DecodeLeaseEntryRecord(StringIdRecord(l, id)).status().code(),
              absl::StatusCode::kDataLoss)
        << id;
  }
}

// The lease record of the version before the compact one.
std::string EarlierLeaseRecord(const Lease& l, size_t bytes) {
  std::string value;
  const uint64_t expiry = static_cast<uint64_t>(l.expires_at_us + kLeaseRecordMarginMicros);
  for (int i = 0; i < 8; ++i) value.push_back(static_cast<char>((expiry >> (8 * i)) & 0xff));
  value.push_back('\x01');
  const size_t n = EncodedLeaseEntrySize(l);
  for (int i = 0; i < 4; ++i) value.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  AppendLeaseEntry(l, &value);
  value.resize(bytes, '\0');
  return value;
}

TEST(LeaseRecordTest, TheLeaseRecordsOfEarlierVersionsAreRead) {
  for (const Lease& l : SetOf(7).leases) {
    const std::string value = EarlierLeaseRecord(l, 128);
    absl::StatusOr<Lease> back = DecodeLeaseEntryRecord(value);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, l);
  }
  const std::string good = EarlierLeaseRecord(SetOf(1).leases[0], 128);
  std::string nonzero_padding = good;
  nonzero_padding.back() = 'x';
  std::string too_long = good;
  too_long[12] = '\x7f';  // the lease's length, past the record's end
  for (const std::string& bad : {good.substr(0, 12), nonzero_padding, too_long}) {
    EXPECT_EQ(DecodeLeaseEntryRecord(bad).status().code(), absl::StatusCode::kDataLoss)
        << absl::CEscape(bad);
  }
}

TEST(LeaseRecordTest, AFreeRecordExpiredAndHoldsNoLease) {
  std::string value;
  EncodeFreeLeaseRecord(192, &value);
  EXPECT_EQ(value.size(), 192u);
  EXPECT_EQ(DecodeRecordValue(value)->first, 0);
  EXPECT_EQ(DecodeLeaseEntryRecord(value).status().code(), absl::StatusCode::kDataLoss);
}

TEST(LeaseRecordTest, MalformedLeaseRecordsAreDataLoss) {
  const Lease l = SetOf(1).leases[0];
  std::string good;
  EncodeLeaseEntryRecord(l, &good);
  ASSERT_TRUE(DecodeLeaseEntryRecord(good).ok());
  std::string nonzero_padding = good;
  nonzero_padding.back() = 'x';
  std::string unknown_tag = good;
  unknown_tag[8] = '\x03';
  std::string unknown_flags = good;
  unknown_flags[9] = '\x04';
  std::string no_count = good;
  no_count[10] = '\0';  // a lease of 0 slots
  std::string overlong_count = good;
  overlong_count.replace(10, 11, std::string(11, '\x81'));  // a varint of 11 bytes
  std::string empty_id = good;
  empty_id.replace(27, LeaseId::kBytes, std::string(LeaseId::kBytes, '\0'));  // no lease's id
  // An id written as its digits (the version before) whose length runs past the end.
  std::string id_too_long = StringIdRecord(l, l.id.ToString());
  id_too_long[27] = '\x7f';  // the id's length (after 8 + 1 + 1 + 1 + 16)
  for (const std::string& bad :
       {std::string(), std::string("1234567"), good.substr(0, 9), good.substr(0, 20),
        good.substr(0, 40), nonzero_padding, unknown_tag, unknown_flags, no_count, overlong_count,
        empty_id, id_too_long}) {
    EXPECT_EQ(DecodeLeaseEntryRecord(bad).status().code(), absl::StatusCode::kDataLoss)
        << absl::CEscape(bad);
  }
}

TEST(LeaseRecordTest, TheSetRecordsOfEarlierVersionsAreRead) {
  for (int n : {0, 1, 2, 7, 64}) {
    const LeaseSet set = SetOf(n);
    for (const std::string& value :
         {PaddedSetRecord(123456, set, 0), PaddedSetRecord(123456, set, 77),
          EncodeRecordValue(123456, EncodeLeaseSet(set))}) {
      absl::StatusOr<std::pair<int64_t, LeaseSet>> back = DecodeLeaseSetRecord(value);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->first, 123456);
      EXPECT_EQ(back->second, set);
    }
  }
  const std::string good = PaddedSetRecord(7, SetOf(2), 10);
  std::string nonzero_padding = good;
  nonzero_padding.back() = 'x';
  std::string too_long = good;
  too_long[9] = '\x7f';
  for (const std::string& bad : {std::string(), std::string("1234567"), good.substr(0, 10),
                                 nonzero_padding, too_long, EncodeRecordValue(7, "\x02junk")}) {
    EXPECT_EQ(DecodeLeaseSetRecord(bad).status().code(), absl::StatusCode::kDataLoss)
        << absl::CEscape(bad);
  }
}

class LeaseRecordStoreTest : public ::testing::Test {
 protected:
  void Open(size_t lease_cache_bytes = size_t{64} << 20) {
    store_.reset();
    RocksDbStateStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    o.lease_cache_bytes = lease_cache_bytes;
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> store = RocksDbStateStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  LeaseOutcome Apply(const LeaseOp& op) {
    absl::StatusOr<LeaseOutcome> out = store_->ApplyLease(LeaseOperation{op, {}}, clock_);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : LeaseOutcome();
  }
  bool Acquire(const std::string& key, const std::string& id) {
    return Apply(LeaseOpOf(LeaseAction::kAcquire, 1000, id, "jobs", key)).allowed;
  }
  LeaseState Release(const std::string& key, const std::string& id) {
    return Apply(LeaseOpOf(LeaseAction::kRelease, 1000, id, "jobs", key)).lease.state;
  }
  // The ids of the leases held on `key` (their names, IdName), sorted.
  std::vector<std::string> Held(const std::string& key) {
    std::vector<std::string> ids;
    for (const Lease& l :
         Apply(LeaseOpOf(LeaseAction::kList, 1000, "", "jobs", key)).lease.held_leases) {
      ids.push_back(IdName(l.id));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  // `pairs` acquire+release pairs on key `key`.
  void Pairs(int pairs, const std::string& key) {
    for (int i = 0; i < pairs; ++i) {
      const std::string id = absl::StrCat("pair-", key, "-", i);
      ASSERT_TRUE(Acquire(key, id));
      ASSERT_EQ(Release(key, id), LeaseState::kReleased);
    }
  }
  uint64_t MemtableEntries() {
    return store_->RecordsIntProperty("rocksdb.num-entries-active-mem-table");
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RocksDbStateStore> store_;
};

TEST_F(LeaseRecordStoreTest, DecisionsOnAKeyRewriteItsRecordsInPlace) {
  Open();
  // Ten keys going from no lease to one and back, 50 times each: record 1 of each, written over
  // in place (the release writes it free, of the same size; a delete would add an entry).
  for (int k = 0; k < 10; ++k) Pairs(50, absl::StrCat("k", k));
  EXPECT_LE(MemtableEntries(), 10u);
  // A key holding 40 leases and then 40 more pairs beside them: 41 records, never more.
  const uint64_t before = MemtableEntries();
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Acquire("big", absl::StrCat("g", i)));
  Pairs(40, "big");
  EXPECT_LE(MemtableEntries() - before, 41u);
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(Release("big", absl::StrCat("g", i)), LeaseState::kReleased);
  EXPECT_TRUE(Held("big").empty());
  // Without the cache, every decision reads the records back from RocksDB: the same.
  Open(/*lease_cache_bytes=*/0);
  const uint64_t reopened = MemtableEntries();
  for (int k = 0; k < 10; ++k) Pairs(20, absl::StrCat("k", k));
  EXPECT_LE(MemtableEntries() - reopened, 10u);
}

TEST_F(LeaseRecordStoreTest, AnAcquireAfterARestartNeverTakesAHeldLeasesRecord) {
  Open();
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(Acquire("t", id));
  ASSERT_EQ(Release("t", "b"), LeaseState::kReleased);  // frees the middle record
  Open();
  ASSERT_TRUE(Acquire("t", "d"));  // takes the free record, not one of a's or c's
  ASSERT_TRUE(Acquire("t", "e"));  // a new one
  Open();
  EXPECT_EQ(Held("t"), (std::vector<std::string>{"a", "c", "d", "e"}));
  // The same with the cache off: the numbers are read from RocksDB at each decision.
  Open(/*lease_cache_bytes=*/0);
  ASSERT_EQ(Release("t", "a"), LeaseState::kReleased);
  ASSERT_TRUE(Acquire("t", "f"));
  ASSERT_TRUE(Acquire("t", "g"));
  Open();
  EXPECT_EQ(Held("t"), (std::vector<std::string>{"c", "d", "e", "f", "g"}));
}

TEST_F(LeaseRecordStoreTest, ReleasedExtendedAndResetLeasesSurviveARestartAsDecided) {
  Open();
  LeaseOp kept = LeaseOpOf(LeaseAction::kAcquire, 1000, "kept", "jobs", "t");
  kept.request_id = "req-kept";
  ASSERT_TRUE(Apply(kept).allowed);
  ASSERT_TRUE(Acquire("t", "long"));
  ASSERT_EQ(Release("t", "kept"), LeaseState::kReleased);  // kept, released, for its replay
  clock_.Advance(kLeaseTtl / 2);
  ASSERT_EQ(Apply(LeaseOpOf(LeaseAction::kExtend, 1000, "long", "jobs", "t")).lease.state,
            LeaseState::kHeld);
  ASSERT_TRUE(Acquire("r", "x"));
  ASSERT_TRUE(Acquire("r", "y"));
  Apply(LeaseOpOf(LeaseAction::kReset, 1000, "", "jobs", "r"));
  Open();
  EXPECT_EQ(Held("t"), std::vector<std::string>{"long"});
  EXPECT_TRUE(Held("r").empty());
  kept.lease_id = NamedId("other");
  const LeaseOutcome replay = Apply(kept);
  EXPECT_TRUE(replay.lease.replayed);
  EXPECT_EQ(replay.lease.lease->id, NamedId("kept"));
  // Past the first TTL the extended lease is still held; past its own it is not.
  clock_.Advance(kLeaseTtl / 2 + 1);
  EXPECT_EQ(Held("t"), std::vector<std::string>{"long"});
  clock_.Advance(kLeaseTtl / 2);
  Open();
  EXPECT_TRUE(Held("t").empty());
}

TEST_F(LeaseRecordStoreTest, DeleteAllLeasesCountsTheKeysHoldingSomeAndEndsThemForGood) {
  Open();
  ASSERT_TRUE(Acquire("a", "held"));
  Pairs(3, "b");  // b holds nothing, its record written free
  ASSERT_TRUE(Acquire("c", "one"));
  ASSERT_TRUE(Acquire("c", "two"));
  absl::StatusOr<uint64_t> ended =
      store_->DeleteAllLeases(LimitSource::kDefined, "jobs", clock_.NowMicros());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 2u);
  EXPECT_TRUE(Held("a").empty());
  Open();
  EXPECT_TRUE(Held("a").empty());
  EXPECT_TRUE(Held("c").empty());
  ASSERT_TRUE(Acquire("c", "three"));
  Open();
  EXPECT_EQ(Held("c"), std::vector<std::string>{"three"});
}

// Writes `value` as the record `key` through the generic record path, as earlier versions wrote
// lease sets.
void WriteRecord(RocksDbStateStore& store, const Clock& clock, const std::string& key,
                 const std::string& value) {
  const RecordSpec record{key, clock.NowMicros() + 100 * kLeaseTtl};
  ASSERT_TRUE(
      store
          .UpdateWithRecords({}, absl::MakeConstSpan(&record, 1), clock,
                             [&](auto, auto, auto, absl::Span<std::optional<std::string>> writes) {
                               writes[0] = value;
                               return absl::OkStatus();
                             })
          .ok());
}

// Whether the record `key` is present.
bool HasRecord(RocksDbStateStore& store, const Clock& clock, const std::string& key) {
  const RecordSpec record{key, clock.NowMicros() + kSecond};
  bool present = false;
  EXPECT_TRUE(store
                  .UpdateWithRecords(
                      {}, absl::MakeConstSpan(&record, 1), clock,
                      [&](auto, absl::Span<const std::optional<std::string>> records, auto, auto) {
                        present = records[0].has_value();
                        return absl::OkStatus();
                      })
                  .ok());
  return present;
}

TEST_F(LeaseRecordStoreTest, SetRecordsOfAnEarlierVersionAreMovedToLeaseRecordsAtOpen) {
  Open();
  // Both forms earlier versions wrote: the set's bytes alone (key "plain") and padded ("padded").
  LeaseSet old;
  for (const char* id : {"old-1", "old-2"}) {
    Lease l;
    l.id = NamedId(id);
    l.acquired_at_us = clock_.NowMicros();
    l.expires_at_us = clock_.NowMicros() + kLeaseTtl;
    old.leases.push_back(l);
  }
  const std::string plain = LeaseRecordKey(StateKey{"jobs", "plain"});
  const std::string padded = LeaseRecordKey(StateKey{"jobs", "padded"});
  WriteRecord(*store_, clock_, plain, EncodeLeaseSet(old));
  WriteRecord(*store_, clock_, padded, PaddedSetRecord(0, old, 40).substr(8));
  Open();
  EXPECT_FALSE(HasRecord(*store_, clock_, plain));
  EXPECT_FALSE(HasRecord(*store_, clock_, padded));
  for (const char* key : {"plain", "padded"}) {
    EXPECT_EQ(Held(key), (std::vector<std::string>{"old-1", "old-2"}));
    EXPECT_EQ(Release(key, "old-1"), LeaseState::kReleased);
    ASSERT_TRUE(Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "new", "jobs", key)).allowed);
    EXPECT_FALSE(Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "third", "jobs", key)).allowed);
  }
  Open();
  for (const char* key : {"plain", "padded"}) {
    EXPECT_EQ(Held(key), (std::vector<std::string>{"new", "old-2"}));
  }
}

TEST_F(LeaseRecordStoreTest, AReleaseFreesARecordAtTheSizeItWasReadWith) {
  Open();
  // A record of an earlier version, unpadded: smaller than the size class this version writes
  // (with a holder of 20 bytes, 102 bytes against 128).
  Lease l;
  l.id = NamedId("sized");
  l.holder = std::string(20, 'h');
  l.acquired_at_us = clock_.NowMicros();
  l.expires_at_us = clock_.NowMicros() + kLeaseTtl;
  const size_t bytes = 13 + EncodedLeaseEntrySize(l);
  ASSERT_LT(bytes, LeaseEntryRecordBytes(l));
  std::string key;
  LeaseEntryKey(LeaseEntryPrefix(StateKey{"jobs", "sized"}), 1, &key);
  WriteRecord(*store_, clock_, key, EarlierLeaseRecord(l, bytes).substr(8));
  ASSERT_EQ(Held("sized"), (std::vector<std::string>{"sized"}));
  // Freed at the size it was read with, the record is written over in place; at the size this
  // version gives the lease, it would not fit there and would be a second entry.
  const uint64_t before = MemtableEntries();
  ASSERT_EQ(Release("sized", "sized"), LeaseState::kReleased);
  EXPECT_EQ(MemtableEntries(), before);
  EXPECT_TRUE(Held("sized").empty());
}

TEST_F(LeaseRecordStoreTest, ASetRecordThatDoesNotDecodeFailsTheOpenAndIsKept) {
  Open();
  const std::string bad = LeaseRecordKey(StateKey{"jobs", "bad"});
  WriteRecord(*store_, clock_, bad, "\x01junk");
  store_.reset();
  RocksDbStateStoreOptions o;
  o.path = dir_.path() + "/db";
  o.clock = &clock_;
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> store = RocksDbStateStore::Open(o);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StrContains(store.status().message(), "lease set record")) << store.status();
  }
}

}  // namespace
}  // namespace ratelimit
