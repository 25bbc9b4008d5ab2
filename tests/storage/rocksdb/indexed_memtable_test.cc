// The records family's memtable (storage/rocksdb/indexed_memtable.h): an in-place update finds the
// entry it overwrites through the index, without searching its key's bucket; and every read (a
// point read, a key's records by prefix, a scan of the whole family, after a flush, after the WAL
// is replayed) sees exactly what was written, as the inner representation alone shows it.
#include "storage/rocksdb/indexed_memtable.h"

#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/comparator.h"
#include "rocksdb/db.h"
#include "rocksdb/slice_transform.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;

constexpr size_t kPrefix = 8;  // a key's "prefix": the first 8 bytes, as a concurrency key's

// Bytewise order, counting the user-key comparisons RocksDB makes.
class CountingComparator : public rocksdb::Comparator {
 public:
  const char* Name() const override { return "ratelimit.test.CountingBytewise"; }
  int Compare(const rocksdb::Slice& a, const rocksdb::Slice& b) const override {
    count.fetch_add(1, std::memory_order_relaxed);
    return a.compare(b);
  }
  void FindShortestSeparator(std::string*, const rocksdb::Slice&) const override {}
  void FindShortSuccessor(std::string*) const override {}
  mutable std::atomic<long> count{0};
};

// The store's records family's settings, on a database of its own; `indexed` false: the hash of
// skiplists alone.
class IndexedMemTableTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override { db_.reset(); }

  void Open() {
    db_.reset();
    rocksdb::Options o;
    o.create_if_missing = true;
    o.comparator = &comparator_;
    o.inplace_update_support = true;
    o.allow_concurrent_memtable_write = false;
    o.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kPrefix));
    std::shared_ptr<rocksdb::MemTableRepFactory> buckets(rocksdb::NewHashSkipListRepFactory(1024));
    o.memtable_factory = GetParam() ? NewIndexedMemTableFactory(buckets) : buckets;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.path(), &db).ok());
    db_.reset(db);
  }

  void Put(const std::string& key, const std::string& value) {
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), key, value).ok());
    model_[key] = value;
  }
  void Delete(const std::string& key) {
    ASSERT_TRUE(db_->Delete(rocksdb::WriteOptions(), key).ok());
    model_.erase(key);
  }
  uint64_t MemtableEntries() {
    uint64_t n = 0;
    db_->GetIntProperty("rocksdb.num-entries-active-mem-table", &n);
    return n;
  }
  // Every key and value, by a scan of the whole family.
  std::map<std::string, std::string> Scan() {
    rocksdb::ReadOptions ro;
    ro.total_order_seek = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    std::map<std::string, std::string> seen;
    for (it->SeekToFirst(); it->Valid(); it->Next())
      seen[it->key().ToString()] = it->value().ToString();
    EXPECT_TRUE(it->status().ok());
    return seen;
  }
  // The keys and values under `prefix`, in order, by a prefix read.
  std::map<std::string, std::string> ReadPrefix(const std::string& prefix) {
    rocksdb::ReadOptions ro;
    ro.prefix_same_as_start = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    std::map<std::string, std::string> seen;
    std::string last;
    for (it->Seek(prefix); it->Valid(); it->Next()) {
      EXPECT_GT(it->key().ToString(), last);
      last = it->key().ToString();
      seen[last] = it->value().ToString();
    }
    return seen;
  }
  std::map<std::string, std::string> ModelUnder(const std::string& prefix) {
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : model_) {
      if (k.compare(0, prefix.size(), prefix) == 0) out[k] = v;
    }
    return out;
  }

  static std::string Key(int hot, int record) {
    return absl::StrCat("key-", hot, "---").substr(0, kPrefix) + absl::StrCat("#", 1000 + record);
  }

  TempDir dir_;
  CountingComparator comparator_;
  std::unique_ptr<rocksdb::DB> db_;
  std::map<std::string, std::string> model_;
};

// A hot key's 64 records, each rewritten in place: with the index, the write finds its entry with
// no search of the bucket (RocksDB then checks the user key once); the bucket's skiplist alone
// compares the key many times a write.
TEST_P(IndexedMemTableTest, AnInPlaceUpdateFindsItsEntryWithoutSearchingTheBucket) {
  for (int r = 0; r < 64; ++r) Put(Key(1, r), std::string(64, 'a'));
  ASSERT_EQ(MemtableEntries(), 64u);
  std::mt19937 rng(7);
  constexpr int kUpdates = 2000;
  comparator_.count = 0;
  for (int i = 0; i < kUpdates; ++i)
    Put(Key(1, static_cast<int>(rng() % 64)), std::string(64, 'b'));
  const double per_update = static_cast<double>(comparator_.count) / kUpdates;
  EXPECT_EQ(MemtableEntries(), 64u) << "every update was made in place";
  if (GetParam()) {
    EXPECT_LE(per_update, 2.0);
  } else {
    EXPECT_GE(per_update, 6.0);  // the search the index saves (this test's premise)
  }
  EXPECT_EQ(ReadPrefix(Key(1, 0).substr(0, kPrefix)), ModelUnder(Key(1, 0).substr(0, kPrefix)));
}

// Writes in place, larger values (new entries, which later updates then find), deletions and
// rewrites after them, on several keys: every way of reading sees exactly the model.
TEST_P(IndexedMemTableTest, ReadsSeeExactlyWhatWasWritten) {
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    const std::string key = Key(static_cast<int>(rng() % 3), static_cast<int>(rng() % 40));
    switch (rng() % 6) {
      case 0:
        Delete(key);
        break;
      case 1:
        Put(key, std::string(64 + 64 * (rng() % 3), static_cast<char>('a' + i % 26)));
        break;
      default:
        Put(key, std::string(64, static_cast<char>('a' + i % 26)));
    }
  }
  EXPECT_EQ(Scan(), model_);
  for (int hot = 0; hot < 3; ++hot) {
    const std::string prefix = Key(hot, 0).substr(0, kPrefix);
    EXPECT_EQ(ReadPrefix(prefix), ModelUnder(prefix)) << prefix;
  }
  for (const auto& [key, value] : model_) {
    std::string got;
    ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), key, &got).ok()) << key;
    EXPECT_EQ(got, value);
  }
  std::string absent;
  EXPECT_TRUE(db_->Get(rocksdb::ReadOptions(), Key(9, 1), &absent).IsNotFound());
}

// After a flush the next memtable indexes its own entries; after a reopen the WAL's writes are
// replayed through the index (in place again) and read back as written.
TEST_P(IndexedMemTableTest, FlushesAndReplaysKeepEveryWrite) {
  for (int r = 0; r < 20; ++r) Put(Key(2, r), std::string(64, 'a'));
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  for (int i = 0; i < 200; ++i)
    Put(Key(2, i % 20), std::string(64, static_cast<char>('b' + i % 20)));
  EXPECT_EQ(MemtableEntries(), 20u);
  EXPECT_EQ(Scan(), model_);
  Open();
  EXPECT_EQ(Scan(), model_);
  Put(Key(2, 3), std::string(64, 'z'));
  EXPECT_EQ(ReadPrefix(Key(2, 0).substr(0, kPrefix)), ModelUnder(Key(2, 0).substr(0, kPrefix)));
}

INSTANTIATE_TEST_SUITE_P(Memtables, IndexedMemTableTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Indexed" : "BucketsAlone";
                         });

}  // namespace
}  // namespace ratelimit
