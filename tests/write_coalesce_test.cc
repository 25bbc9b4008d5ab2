// Coalescing of a group write (storage/write_coalesce.h): each key keeps only its last entry, in
// the order of those last entries; a batch without repeated keys, or with an entry other than a
// Put or a Delete, is left exactly as it was.
#include "storage/rocksdb/write_coalesce.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;

// A database with two column families besides the default one.
class WriteCoalesceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {"states", rocksdb::ColumnFamilyOptions()},
        {"records", rocksdb::ColumnFamilyOptions()}};
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir_.path() + "/db", families, &handles_, &db).ok());
    db_.reset(db);
    states_ = handles_[1];
    records_ = handles_[2];
  }
  void TearDown() override {
    for (rocksdb::ColumnFamilyHandle* h : handles_) db_->DestroyColumnFamilyHandle(h);
    db_.reset();
  }

  // The entries of `batch` as "family:op:key=value" strings, in order.
  static std::vector<std::string> Entries(rocksdb::WriteBatch& batch) {
    struct Printer : rocksdb::WriteBatch::Handler {
      std::vector<std::string> out;
      rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& k,
                            const rocksdb::Slice& v) override {
        out.push_back(absl::StrCat(cf, ":put:", k.ToString(), "=", v.ToString()));
        return rocksdb::Status::OK();
      }
      rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
        out.push_back(absl::StrCat(cf, ":delete:", k.ToString()));
        return rocksdb::Status::OK();
      }
      rocksdb::Status MergeCF(uint32_t cf, const rocksdb::Slice& k,
                              const rocksdb::Slice& v) override {
        out.push_back(absl::StrCat(cf, ":merge:", k.ToString(), "=", v.ToString()));
        return rocksdb::Status::OK();
      }
    } printer;
    EXPECT_TRUE(batch.Iterate(&printer).ok());
    return printer.out;
  }

  // Expects CoalesceRepeatedKeys over `families` to drop nothing and leave `batch` byte for byte.
  static void ExpectLeftAsItWas(absl::Span<rocksdb::ColumnFamilyHandle* const> families,
                                rocksdb::WriteBatch& batch) {
    const std::string before = batch.Data();
    EXPECT_EQ(CoalesceRepeatedKeys(families, batch), 0u);
    EXPECT_EQ(batch.Data(), before);
  }

  std::string Read(rocksdb::ColumnFamilyHandle* family, const std::string& key) {
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), family, key, &value);
    if (s.IsNotFound()) return "<none>";
    EXPECT_TRUE(s.ok()) << s.ToString();
    return value;
  }

  TempDir dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* states_ = nullptr;
  rocksdb::ColumnFamilyHandle* records_ = nullptr;
};

TEST_F(WriteCoalesceTest, EachKeyKeepsOnlyItsLastEntryInTheOrderOfTheLastEntries) {
  rocksdb::WriteBatch batch;
  ASSERT_TRUE(batch.Put(states_, "a", "1").ok());
  ASSERT_TRUE(batch.Put(states_, "b", "1").ok());
  ASSERT_TRUE(batch.Put(records_, "a", "r").ok());  // same key, another family: kept
  ASSERT_TRUE(batch.Put(states_, "a", "2").ok());
  ASSERT_TRUE(batch.Delete(states_, "b").ok());
  ASSERT_TRUE(batch.Put(states_, "c", "1").ok());
  ASSERT_TRUE(batch.Delete(states_, "d").ok());
  ASSERT_TRUE(batch.Put(states_, "d", "after delete").ok());

  EXPECT_EQ(CoalesceRepeatedKeys(handles_, batch), 3u);
  const std::string s = absl::StrCat(states_->GetID()), r = absl::StrCat(records_->GetID());
  EXPECT_EQ(Entries(batch),
            (std::vector<std::string>{r + ":put:a=r", s + ":put:a=2", s + ":delete:b",
                                      s + ":put:c=1", s + ":put:d=after delete"}));
  EXPECT_EQ(batch.Count(), 5u);

  // Written, the coalesced batch leaves what the original one would have.
  ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), states_, "b", "before").ok());
  ASSERT_TRUE(db_->Write(rocksdb::WriteOptions(), &batch).ok());
  EXPECT_EQ(Read(states_, "a"), "2");
  EXPECT_EQ(Read(states_, "b"), "<none>");
  EXPECT_EQ(Read(states_, "c"), "1");
  EXPECT_EQ(Read(states_, "d"), "after delete");
  EXPECT_EQ(Read(records_, "a"), "r");
}

TEST_F(WriteCoalesceTest, ABatchWithoutRepeatedKeysIsLeftAsItWas) {
  rocksdb::WriteBatch batch;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(batch.Put(states_, absl::StrCat("k", i), "v").ok());
  ASSERT_TRUE(batch.Put(records_, "k0", "v").ok());
  ExpectLeftAsItWas(handles_, batch);
}

TEST_F(WriteCoalesceTest, AnEntryOtherThanAPutOrADeleteLeavesTheBatchAsItWas) {
  rocksdb::WriteBatch merge;
  ASSERT_TRUE(merge.Put(states_, "a", "1").ok());
  ASSERT_TRUE(merge.Merge(states_, "a", "2").ok());
  ASSERT_TRUE(merge.Put(states_, "a", "3").ok());
  ExpectLeftAsItWas(handles_, merge);

  rocksdb::WriteBatch log_data;
  ASSERT_TRUE(log_data.Put(states_, "a", "1").ok());
  ASSERT_TRUE(log_data.PutLogData("note").ok());
  ASSERT_TRUE(log_data.Put(states_, "a", "2").ok());
  ExpectLeftAsItWas(handles_, log_data);

  rocksdb::WriteBatch range;
  ASSERT_TRUE(range.Put(states_, "a", "1").ok());
  ASSERT_TRUE(range.DeleteRange(states_, "x", "y").ok());
  ASSERT_TRUE(range.Put(states_, "a", "2").ok());
  ExpectLeftAsItWas(handles_, range);
}

TEST_F(WriteCoalesceTest, AFamilyNotListedLeavesTheBatchAsItWas) {
  rocksdb::WriteBatch batch;
  ASSERT_TRUE(batch.Put(states_, "a", "1").ok());
  ASSERT_TRUE(batch.Put(states_, "a", "2").ok());
  ASSERT_TRUE(batch.Put(records_, "b", "1").ok());
  ExpectLeftAsItWas({states_}, batch);  // records_ is not listed
  EXPECT_EQ(CoalesceRepeatedKeys({states_, records_}, batch), 1u);
}

}  // namespace
}  // namespace ratelimit
