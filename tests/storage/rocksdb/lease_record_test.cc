// A lease set's record in the RocksDB store (storage/rocksdb/lease_record.h): its size classes and
// the hysteresis that keeps a key's record size; the padded form round trips, the form earlier
// versions wrote is still read, malformed bytes are DATA_LOSS; and on the store, decisions on a
// key rewrite its one memtable entry in place (an emptied set included) instead of adding one
// per decision, across a restart too.
#include "storage/rocksdb/lease_record.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
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
    l.id = absl::StrCat("0123456789abcdef0123456789ab", 1000 + i);
    l.count = 1 + i % 3;
    l.acquired_at_us = 1000 + i;
    l.expires_at_us = 5000 + i;
    l.request_id = i % 2 == 0 ? absl::StrCat("req-", i) : "";
    l.released = i % 5 == 4 && !l.request_id.empty();
    set.leases.push_back(l);
  }
  return set;
}

TEST(LeaseRecordBytesTest, SizeClassesHaveAtMostAQuarterOfPadding) {
  EXPECT_EQ(LeaseRecordBytes(1, 0), kMinLeaseRecordBytes);
  EXPECT_EQ(LeaseRecordBytes(128, 0), 128u);
  EXPECT_EQ(LeaseRecordBytes(129, 0), 160u);
  EXPECT_EQ(LeaseRecordBytes(257, 0), 320u);
  EXPECT_EQ(LeaseRecordBytes(4097, 0), 5120u);
  EXPECT_EQ(LeaseRecordBytes(5120, 0), 5120u);
  for (size_t needed = 1; needed < 100000; needed += 37) {
    const size_t bytes = LeaseRecordBytes(needed, 0);
    EXPECT_GE(bytes, needed);
    if (needed > kMinLeaseRecordBytes) {
      EXPECT_LE(bytes, needed + needed / 4) << needed;
    }
  }
}

TEST(LeaseRecordBytesTest, AKeyKeepsItsRecordSizeUnlessTheSetOutgrowsItOrShrinksBelowAQuarter) {
  // A set changing by a lease keeps the size: its record is rewritten in place.
  EXPECT_EQ(LeaseRecordBytes(4400, 5120), 5120u);
  EXPECT_EQ(LeaseRecordBytes(1280, 5120), 5120u);
  EXPECT_EQ(LeaseRecordBytes(20, 128), 128u);
  // Outgrown: the next class. Shrunk below a quarter: its own class.
  EXPECT_EQ(LeaseRecordBytes(5121, 5120), 6144u);
  EXPECT_EQ(LeaseRecordBytes(1279, 5120), 1280u);
  EXPECT_EQ(LeaseRecordBytes(100, 5120), 128u);
}

TEST(LeaseRecordTest, APaddedRecordRoundTrips) {
  for (int n : {0, 1, 2, 7, 64}) {
    const LeaseSet set = SetOf(n);
    const size_t needed = LeaseRecordNeeds(set);
    for (size_t bytes : {needed, LeaseRecordBytes(needed, 0), 2 * needed + 3}) {
      const std::string value = EncodeLeaseRecord(123456, set, bytes);
      EXPECT_EQ(value.size(), bytes);
      absl::StatusOr<std::pair<int64_t, LeaseSet>> back = DecodeLeaseRecord(value);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->first, 123456);
      EXPECT_EQ(back->second, set);
    }
  }
}

TEST(LeaseRecordTest, TheUnpaddedFormOfEarlierVersionsIsRead) {
  const LeaseSet set = SetOf(3);
  absl::StatusOr<std::pair<int64_t, LeaseSet>> back =
      DecodeLeaseRecord(EncodeRecordValue(99, EncodeLeaseSet(set)));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->first, 99);
  EXPECT_EQ(back->second, set);
}

TEST(LeaseRecordTest, MalformedRecordsAreDataLoss) {
  const LeaseSet set = SetOf(2);
  const std::string good = EncodeLeaseRecord(7, set, LeaseRecordNeeds(set) + 10);
  std::string nonzero_padding = good;
  nonzero_padding.back() = 'x';
  std::string too_long = good;
  too_long[9] = '\x7f';  // the set's length, past the record's end
  for (const std::string& bad :
       {std::string(), std::string("1234567"), good.substr(0, 10), nonzero_padding, too_long,
        good.substr(0, LeaseRecordNeeds(set) - 1), EncodeRecordValue(7, "\x02junk")}) {
    EXPECT_EQ(DecodeLeaseRecord(bad).status().code(), absl::StatusCode::kDataLoss)
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
  // `pairs` acquire+release pairs on key `key`, each beside `others` held leases.
  void Pairs(int pairs, const std::string& key) {
    for (int i = 0; i < pairs; ++i) {
      const std::string id = absl::StrCat("pair-", key, "-", i);
      ASSERT_TRUE(Apply(LeaseOpOf(LeaseAction::kAcquire, 1000, id, "jobs", key)).allowed);
      ASSERT_EQ(Apply(LeaseOpOf(LeaseAction::kRelease, 1000, id, "jobs", key)).lease.state,
                LeaseState::kReleased);
    }
  }
  uint64_t MemtableEntries() {
    return store_->RecordsIntProperty("rocksdb.num-entries-active-mem-table");
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RocksDbStateStore> store_;
};

TEST_F(LeaseRecordStoreTest, DecisionsOnAKeyRewriteItsOneMemtableEntry) {
  Open();
  // Ten keys with a set going from empty to one lease and back, 50 times each: the size of a
  // one-lease record throughout, written over the entry each time (a delete of the emptied set
  // would add an entry, and so would a record of another size).
  for (int k = 0; k < 10; ++k) Pairs(50, absl::StrCat("k", k));
  EXPECT_LE(MemtableEntries(), 10u);
  // A key whose set grows to 40 leases and shrinks back: a new entry only when it outgrows its
  // size class, so far fewer than one per decision.
  const uint64_t before = MemtableEntries();
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(
        Apply(LeaseOpOf(LeaseAction::kAcquire, 1000, absl::StrCat("g", i), "jobs", "big")).allowed);
  }
  for (int i = 0; i < 40; ++i) {
    Apply(LeaseOpOf(LeaseAction::kRelease, 1000, absl::StrCat("g", i), "jobs", "big"));
  }
  EXPECT_LE(MemtableEntries() - before, 16u);
  EXPECT_EQ(Apply(LeaseOpOf(LeaseAction::kList, 1000, "", "jobs", "big")).lease.held, 0);
}

TEST_F(LeaseRecordStoreTest, WithoutTheCacheTheRecordSizeComesFromRocksDb) {
  Open(/*lease_cache_bytes=*/0);
  for (int k = 0; k < 10; ++k) Pairs(50, absl::StrCat("k", k));
  EXPECT_LE(MemtableEntries(), 10u);
}

TEST_F(LeaseRecordStoreTest, PaddedAndEmptiedSetsSurviveARestart) {
  Open();
  ASSERT_TRUE(Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "held", "jobs", "a")).allowed);
  Pairs(3, "b");  // b's set is written empty, not deleted
  Open();
  EXPECT_EQ(Apply(LeaseOpOf(LeaseAction::kList, 2, "", "jobs", "a")).lease.held, 1);
  EXPECT_EQ(Apply(LeaseOpOf(LeaseAction::kList, 2, "", "jobs", "b")).lease.held, 0);
  EXPECT_EQ(Apply(LeaseOpOf(LeaseAction::kRelease, 2, "held", "jobs", "a")).lease.state,
            LeaseState::kReleased);
  // Reset of every lease of the limit counts only the keys that hold some.
  ASSERT_TRUE(Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "again", "jobs", "a")).allowed);
  absl::StatusOr<uint64_t> ended = store_->DeleteAllLeases(LimitSource::kDefined, "jobs");
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 1u);
}

TEST_F(LeaseRecordStoreTest, ARecordOfAnEarlierVersionIsReadAndRewritten) {
  Open();
  // The form earlier versions wrote: the set's bytes alone, through the generic record path.
  LeaseSet old;
  Lease l;
  l.id = "old-lease";
  l.acquired_at_us = clock_.NowMicros();
  l.expires_at_us = clock_.NowMicros() + kLeaseTtl;
  old.leases.push_back(l);
  const LeaseOp list = LeaseOpOf(LeaseAction::kList, 2, "", "jobs", "legacy");
  const RecordSpec record{LeaseRecordKey(list.key), clock_.NowMicros() + 100 * kLeaseTtl};
  ASSERT_TRUE(
      store_
          ->UpdateWithRecords({}, absl::MakeConstSpan(&record, 1), clock_,
                              [&](auto, auto, auto, absl::Span<std::optional<std::string>> writes) {
                                writes[0] = EncodeLeaseSet(old);
                                return absl::OkStatus();
                              })
          .ok());
  Open();  // nothing cached: read from RocksDB
  EXPECT_EQ(Apply(list).lease.held, 1);
  ASSERT_TRUE(Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "new", "jobs", "legacy")).allowed);
  EXPECT_FALSE(Apply(LeaseOpOf(LeaseAction::kAcquire, 2, "third", "jobs", "legacy")).allowed);
  EXPECT_EQ(Apply(LeaseOpOf(LeaseAction::kRelease, 2, "old-lease", "jobs", "legacy")).lease.state,
            LeaseState::kReleased);
}

}  // namespace
}  // namespace ratelimit
