#ifndef RATELIMIT_TESTS_STORAGE_REPLICA_BOARD_CONTRACT_H_
#define RATELIMIT_TESTS_STORAGE_REPLICA_BOARD_CONTRACT_H_

// What every ReplicaBoard (storage/replica_board.h) does, as tests any board's test runs:
// records with their freshness, one lead at a time, decisions as compare-and-set, groups apart.

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "storage/replica_board.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

inline constexpr int64_t kBoardT0 = 1'790'000'000'000'000;  // microseconds, near real time
inline constexpr int64_t kBoardKeep = 60'000'000;

inline BoardSyncRequest BoardWrite(const std::string& group, const std::string& member,
                                   const std::string& record, int64_t now_us) {
  BoardSyncRequest r;
  r.group = group;
  r.member = member;
  r.record = record;
  r.now_us = now_us;
  r.stale_us = 3'000'000;
  r.keep_us = kBoardKeep;
  return r;
}

inline void ExpectRecordsAreReadFreshByTheLeaderOrOnRequest(ReplicaBoard& board,
                                                            const std::string& group) {
  ASSERT_OK(board.Sync(BoardWrite(group, "a", "ra", kBoardT0)));
  ASSERT_OK(board.Sync(BoardWrite(group, "b", "rb", kBoardT0 + 1'000'000)));
  // Without the lead and without asking, no records.
  absl::StatusOr<BoardSyncReply> plain =
      board.Sync(BoardWrite(group, "c", "", kBoardT0 + 2'000'000));
  ASSERT_OK(plain);
  EXPECT_FALSE(plain->leading);
  EXPECT_TRUE(plain->records.empty());
  // Asked: both, each the last its member wrote.
  ASSERT_OK(board.Sync(BoardWrite(group, "a", "ra2", kBoardT0 + 2'000'000)));
  BoardSyncRequest ask = BoardWrite(group, "c", "", kBoardT0 + 3'500'000);
  ask.read_records = true;
  absl::StatusOr<BoardSyncReply> all = board.Sync(ask);
  ASSERT_OK(all);
  EXPECT_EQ(all->records, (std::map<std::string, std::string>{{"a", "ra2"}, {"b", "rb"}}));
  // b's record, written at T0+1 s, is stale 3 s later than that.
  ask.now_us = kBoardT0 + 4'500'001;
  all = board.Sync(ask);
  ASSERT_OK(all);
  EXPECT_EQ(all->records, (std::map<std::string, std::string>{{"a", "ra2"}}));
  // The leader reads them without asking.
  BoardSyncRequest lead = BoardWrite(group, "b", "rb2", kBoardT0 + 4'600'000);
  lead.lead_us = 1'000'000;
  absl::StatusOr<BoardSyncReply> led = board.Sync(lead);
  ASSERT_OK(led);
  EXPECT_TRUE(led->leading);
  EXPECT_EQ(led->records, (std::map<std::string, std::string>{{"a", "ra2"}, {"b", "rb2"}}));
}

// `with_records` false: the members hold the lead without writing a record (the leak sweep's
// turn), which works the same and leaves no record.
inline void ExpectOneLeadAtATime(ReplicaBoard& board, const std::string& group,
                                 bool with_records = true) {
  BoardSyncRequest a = BoardWrite(group, "a", with_records ? "x" : "", kBoardT0);
  a.lead_us = 1'000'000;
  BoardSyncRequest b = BoardWrite(group, "b", with_records ? "y" : "", kBoardT0 + 500'000);
  b.lead_us = 1'000'000;
  b.read_records = true;
  absl::StatusOr<BoardSyncReply> r = board.Sync(a);
  ASSERT_OK(r);
  EXPECT_TRUE(r->leading);
  r = board.Sync(b);
  ASSERT_OK(r);
  EXPECT_FALSE(r->leading) << "a leads until T0+1 s";
  a.now_us = kBoardT0 + 900'000;  // a renews before its lead ends
  r = board.Sync(a);
  ASSERT_OK(r);
  EXPECT_TRUE(r->leading);
  b.now_us = kBoardT0 + 1'800'000;
  r = board.Sync(b);
  ASSERT_OK(r);
  EXPECT_FALSE(r->leading) << "a renewed until T0+1.9 s";
  b.now_us = kBoardT0 + 1'900'000;
  r = board.Sync(b);
  ASSERT_OK(r);
  EXPECT_TRUE(r->leading) << "a's lead ended; b takes it";
  EXPECT_EQ(r->records.size(), with_records ? 2u : 0u);
  a.now_us = kBoardT0 + 2'000'000;
  r = board.Sync(a);
  ASSERT_OK(r);
  EXPECT_FALSE(r->leading);
}

inline void ExpectDecisionsAreCompareAndSet(ReplicaBoard& board, const std::string& group) {
  absl::StatusOr<BoardSyncReply> r = board.Sync(BoardWrite(group, "a", "x", kBoardT0));
  ASSERT_OK(r);
  EXPECT_EQ(r->version, 0u);
  EXPECT_EQ(r->decision, "");
  absl::StatusOr<bool> won = board.Decide(group, 0, "first", kBoardKeep);
  ASSERT_OK(won);
  EXPECT_TRUE(*won);
  won = board.Decide(group, 0, "racing", kBoardKeep);  // read version 0 too: loses
  ASSERT_OK(won);
  EXPECT_FALSE(*won);
  r = board.Sync(BoardWrite(group, "b", "", kBoardT0));
  ASSERT_OK(r);
  EXPECT_EQ(r->version, 1u);
  EXPECT_EQ(r->decision, "first");
  won = board.Decide(group, 1, "second\nwith lines | and bars", kBoardKeep);
  ASSERT_OK(won);
  EXPECT_TRUE(*won);
  r = board.Sync(BoardWrite(group, "b", "", kBoardT0));
  ASSERT_OK(r);
  EXPECT_EQ(r->version, 2u);
  EXPECT_EQ(r->decision, "second\nwith lines | and bars");
}

inline void ExpectGroupsAreApart(ReplicaBoard& board, const std::string& prefix) {
  const std::string g1 = prefix + "{one} with spaces", g2 = prefix + "{two}";
  ASSERT_OK(board.Decide(g1, 0, "d1", kBoardKeep));
  BoardSyncRequest a = BoardWrite(g1, "a", "r1", kBoardT0);
  a.lead_us = 1'000'000;
  ASSERT_OK(board.Sync(a));
  BoardSyncRequest b = BoardWrite(g2, "b", "r2", kBoardT0);
  b.lead_us = 1'000'000;
  absl::StatusOr<BoardSyncReply> r = board.Sync(b);
  ASSERT_OK(r);
  EXPECT_TRUE(r->leading) << "a's lead is of the other group";
  EXPECT_EQ(r->version, 0u);
  EXPECT_EQ(r->records, (std::map<std::string, std::string>{{"b", "r2"}}));
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_STORAGE_REPLICA_BOARD_CONTRACT_H_
