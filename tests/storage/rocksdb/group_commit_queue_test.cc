// The GroupCommit queue on its own (no database): completions run in ticket order whatever the
// order they were registered in, every group write carries exactly the entries appended since the
// previous one (a written batch is emptied before it is reused), and a failed write fails only
// its own group.
#include "storage/rocksdb/group_commit.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "rocksdb/write_batch.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

// Appends a put of `key` and returns its ticket.
uint64_t AppendPut(GroupCommit& group, const std::string& key) {
  absl::StatusOr<uint64_t> ticket = group.Append(
      group.epoch(), [&](rocksdb::WriteBatch& b) { b.Put(key, "v").PermitUncheckedError(); });
  EXPECT_TRUE(ticket.ok()) << ticket.status();
  return ticket.ok() ? *ticket : 0;
}

// The keys of a batch's puts, in order.
std::vector<std::string> KeysOf(const rocksdb::WriteBatch& batch) {
  struct Collect : rocksdb::WriteBatch::Handler {
    std::vector<std::string> keys;
    void Put(const rocksdb::Slice& key, const rocksdb::Slice&) override {
      keys.push_back(key.ToString());
    }
  } collect;
  EXPECT_TRUE(batch.Iterate(&collect).ok());
  return collect.keys;
}

TEST(GroupCommitQueueTest, CompletionsRegisteredOutOfOrderRunInTicketOrder) {
  GroupCommit group;
  const uint64_t t1 = AppendPut(group, "a");
  const uint64_t t2 = AppendPut(group, "b");
  const uint64_t t3 = AppendPut(group, "c");
  ASSERT_LT(t1, t2);
  ASSERT_LT(t2, t3);
  std::vector<uint64_t> ran;
  // Registered as concurrent callers may: the latest ticket first, two for one ticket.
  group.OnResolved(t3, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    ran.push_back(t3);
  });
  group.OnResolved(t1, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    ran.push_back(t1);
  });
  group.OnResolved(t2, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    ran.push_back(t2);
  });
  group.OnResolved(t1, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    ran.push_back(t1 * 100);  // the second completion of t1, after the first
  });
  EXPECT_TRUE(ran.empty());
  group.WritePending([](rocksdb::WriteBatch&) { return absl::OkStatus(); });
  group.RunReady();
  EXPECT_EQ(ran, (std::vector<uint64_t>{t1, t1 * 100, t2, t3}));
}

TEST(GroupCommitQueueTest, EveryGroupWritesOnlyWhatWasAppendedSinceThePreviousOne) {
  GroupCommit group;
  std::vector<std::vector<std::string>> written;
  const auto write = [&](rocksdb::WriteBatch& batch) {
    written.push_back(KeysOf(batch));
    EXPECT_EQ(batch.Count(), static_cast<uint32_t>(written.back().size()));
    return absl::OkStatus();
  };
  // Enough groups that each batch is reused more than once.
  std::vector<std::vector<std::string>> expected;
  for (int g = 0; g < 6; ++g) {
    std::vector<std::string> keys;
    for (int i = 0; i <= g % 3; ++i)
      keys.push_back("g" + std::to_string(g) + "k" + std::to_string(i));
    uint64_t last = 0;
    for (const std::string& k : keys) last = AppendPut(group, k);
    bool answered = false;
    group.OnResolved(last, [&](absl::Status s) {
      EXPECT_TRUE(s.ok());
      answered = true;
    });
    group.WritePending(write);
    group.RunReady();
    EXPECT_TRUE(answered) << "group " << g;
    expected.push_back(keys);
  }
  EXPECT_EQ(written, expected);
  EXPECT_EQ(group.stats().writes, 6u);
}

TEST(GroupCommitQueueTest, AWriteSeesHowManyAppendsItsGroupHolds) {
  GroupCommit group;
  std::vector<size_t> appends;
  const auto write = [&](rocksdb::WriteBatch&) {
    appends.push_back(group.writing_appends());
    return absl::OkStatus();
  };
  for (int n : {1, 3, 2}) {
    for (int i = 0; i < n; ++i) AppendPut(group, "k" + std::to_string(i));
    // An Append that writes nothing takes no ticket and is not counted.
    ASSERT_OK(group.Append(group.epoch(), [](rocksdb::WriteBatch&) {}).status());
    group.WritePending(write);
  }
  EXPECT_EQ(appends, (std::vector<size_t>{1, 3, 2}));
}

TEST(GroupCommitQueueTest, AFailedWriteFailsItsGroupAndTheNextGroupStartsEmpty) {
  GroupCommit group;
  const uint64_t before = group.epoch();
  const uint64_t t1 = AppendPut(group, "lost");
  absl::Status first;
  group.OnResolved(t1, [&](absl::Status s) { first = s; });
  group.WritePending([](rocksdb::WriteBatch&) { return absl::UnavailableError("disk gone"); });
  group.RunReady();
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(group.epoch(), before);

  std::vector<std::string> keys;
  const uint64_t t2 = AppendPut(group, "kept");
  absl::Status second = absl::UnknownError("not answered");
  group.OnResolved(t2, [&](absl::Status s) { second = s; });
  group.WritePending([&](rocksdb::WriteBatch& batch) {
    keys = KeysOf(batch);
    return absl::OkStatus();
  });
  group.RunReady();
  EXPECT_TRUE(second.ok()) << second;
  EXPECT_EQ(keys, std::vector<std::string>{"kept"});
}

}  // namespace
}  // namespace ratelimit
