// LeaseSetIndex (storage/leases/lease_set_index.h): positions kept through appends and removals
// (and right even when they fell behind the set), record numbers exactly the lowest free through
// random takes and frees, request_ids never answered absent while a lease has one, and a
// moved-from index that knows nothing.

#include "storage/leases/lease_set_index.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"

namespace ratelimit {
namespace {

constexpr size_t kMany = LeaseSetIndex::kPositionsFrom + 100;

Lease LeaseOf(std::string id, uint32_t record = 0, std::string request_id = "") {
  Lease l;
  l.id = std::move(id);
  l.record = record;
  l.request_id = std::move(request_id);
  return l;
}

// Whether a lease of `leases` has request_id `request_id`, by a look at every lease.
bool HasRequestIdByHand(const std::vector<Lease>& leases, const std::string& request_id) {
  return std::any_of(leases.begin(), leases.end(),
                     [&](const Lease& l) { return l.request_id == request_id; });
}

// Removes leases[i] as the algebra does: the last lease takes its place.
void SwapRemove(std::vector<Lease>& leases, LeaseSetIndex& index, size_t i) {
  index.Removing(leases, i);
  if (i + 1 != leases.size()) leases[i] = std::move(leases.back());
  leases.pop_back();
}

// The lowest record number no lease of `leases` holds.
uint32_t LowestFreeByHand(const std::vector<Lease>& leases) {
  uint32_t r = 1;
  while (std::any_of(leases.begin(), leases.end(), [r](const Lease& l) { return l.record == r; })) {
    ++r;
  }
  return r;
}

// Appends and removals on a set past kPositionsFrom keep the positions describing it: every
// lease is found where it is, none is rebuilt by a pass, and an id that left is not found.
TEST(LeaseSetIndexTest, PositionsFollowAppendsAndRemovals) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  for (size_t i = 0; i < kMany; ++i) {
    leases.push_back(LeaseOf(absl::StrCat("id-", i)));
    index.Appended(leases);
  }
  ASSERT_EQ(index.Find(leases, "id-7"), 7);  // a search: a set searched once is not indexed
  ASSERT_FALSE(index.positions_live());
  ASSERT_EQ(index.Find(leases, "id-9"), 9);  // the second search builds the positions
  ASSERT_TRUE(index.positions_live());
  std::mt19937 rng(7);
  for (int step = 0; step < 2000; ++step) {
    if (rng() % 2 == 0 && leases.size() > LeaseSetIndex::kPositionsFrom) {
      const size_t i = rng() % leases.size();
      const std::string gone = leases[i].id;
      SwapRemove(leases, index, i);
      EXPECT_EQ(index.Find(leases, gone), -1) << gone;
    } else {
      leases.push_back(LeaseOf(absl::StrCat("new-", step)));
      index.Appended(leases);
    }
    ASSERT_TRUE(index.positions_live()) << step;
    const size_t probe = rng() % leases.size();
    ASSERT_EQ(index.Find(leases, leases[probe].id), static_cast<int>(probe)) << step;
  }
  for (size_t i = 0; i < leases.size(); ++i) {
    EXPECT_EQ(index.Find(leases, leases[i].id), static_cast<int>(i));
  }
}

// Leases moved without telling the index (same count, other places): it still finds each one,
// by checking the lease at the position it holds and searching when that is another.
TEST(LeaseSetIndexTest, PositionsThatFellBehindStillFindTheRightLease) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  for (size_t i = 0; i < kMany; ++i) leases.push_back(LeaseOf(absl::StrCat("id-", i)));
  ASSERT_EQ(index.Find(leases, "id-3"), 3);
  ASSERT_EQ(index.Find(leases, "id-4"), 4);
  ASSERT_TRUE(index.positions_live());
  std::reverse(leases.begin(), leases.end());
  for (size_t i = 0; i < leases.size(); ++i) {
    EXPECT_EQ(index.Find(leases, leases[i].id), static_cast<int>(i));
  }
  EXPECT_EQ(index.Find(leases, "absent"), -1);
}

// Record numbers through random takes and frees on a set of up to 300 leases: each new lease's
// number is the lowest no other lease holds, as a pass over the leases finds it.
TEST(LeaseSetIndexTest, ANewRecordIsTheLowestNumberNoLeaseHolds) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  std::mt19937 rng(11);
  for (int step = 0; step < 5000; ++step) {
    const bool take = leases.size() < 10 || (leases.size() < 300 && rng() % 5 < 3);
    if (take) {
      leases.push_back(LeaseOf(absl::StrCat("id-", step)));
      index.Appended(leases);
      const uint32_t r = index.LowestFreeRecord(leases);
      ASSERT_EQ(r, LowestFreeByHand(leases)) << step;
      leases.back().record = r;
      index.RecordTaken(r);
    } else {
      SwapRemove(leases, index, rng() % leases.size());
    }
  }
  EXPECT_TRUE(index.records_known());
}

// A set read from storage (its index knows nothing) is numbered from its leases' records, and a
// pass that drops leases frees their numbers.
TEST(LeaseSetIndexTest, RecordsAreLearnedFromTheLeasesAndFreedByDrops) {
  std::vector<Lease> leases = {LeaseOf("a", 1), LeaseOf("b", 2), LeaseOf("c", 4), LeaseOf("d", 0)};
  LeaseSetIndex index;
  EXPECT_FALSE(index.records_known());
  EXPECT_EQ(index.LowestFreeRecord(leases), 3u);
  index.RecordTaken(3);
  leases[3].record = 3;
  EXPECT_EQ(index.LowestFreeRecord(leases), 5u);
  index.Dropping(leases[1]);  // record 2
  EXPECT_EQ(index.LowestFreeRecord(leases), 2u);
}

// A record number past what is kept as known (a damaged record, or millions of leases) is not
// put in memory as a bit: the numbering falls back to a pass over the leases and stays right.
TEST(LeaseSetIndexTest, ARecordPastTheKnownBoundIsNumberedByAPass) {
  std::vector<Lease> leases = {LeaseOf("a", 1), LeaseOf("b", LeaseSetIndex::kMaxKnownRecord + 9),
                               LeaseOf("c", 0)};
  LeaseSetIndex index;
  EXPECT_EQ(index.LowestFreeRecord(leases), 2u);
  EXPECT_FALSE(index.records_known());
}

// Moving an index moves what it knows; the moved-from index knows nothing, so a set object
// refilled afterwards is numbered from its own leases.
TEST(LeaseSetIndexTest, AMovedFromIndexKnowsNothing) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  index.Clear();  // an empty set: every record free
  leases.push_back(LeaseOf("a"));
  index.Appended(leases);
  leases.back().record = index.LowestFreeRecord(leases);
  index.RecordTaken(leases.back().record);
  LeaseSetIndex moved = std::move(index);
  EXPECT_TRUE(moved.records_known());
  EXPECT_FALSE(index.records_known());  // NOLINT(bugprone-use-after-move): what is left
  std::vector<Lease> refilled = {LeaseOf("x", 1), LeaseOf("y", 0)};
  EXPECT_EQ(index.LowestFreeRecord(refilled), 2u);  // NOLINT(bugprone-use-after-move)
}

// Below kPositionsFrom leases, and at a set object's first question, the answer is a maybe (the
// caller's search decides); the second question on a large set counts its request_ids, and from
// then on a request_id no lease has is answered absent without a pass.
TEST(LeaseSetIndexTest, RequestIdsAreCountedAtALargeSetsSecondQuestion) {
  std::vector<Lease> small = {LeaseOf("a", 0, "req-a"), LeaseOf("b")};
  LeaseSetIndex small_index;
  EXPECT_TRUE(small_index.MayHoldRequestId(small, "req-z"));
  EXPECT_TRUE(small_index.MayHoldRequestId(small, "req-z"));
  EXPECT_FALSE(small_index.request_ids_known());

  std::vector<Lease> leases;
  for (size_t i = 0; i < kMany; ++i) {
    leases.push_back(LeaseOf(absl::StrCat("id-", i), 0, i % 3 == 0 ? absl::StrCat("req-", i) : ""));
  }
  LeaseSetIndex index;  // a set read from storage: knows nothing
  EXPECT_TRUE(index.MayHoldRequestId(leases, "req-new"));
  EXPECT_FALSE(index.request_ids_known());
  EXPECT_FALSE(index.MayHoldRequestId(leases, "req-new"));
  EXPECT_TRUE(index.request_ids_known());
  EXPECT_TRUE(index.MayHoldRequestId(leases, "req-3"));
  EXPECT_FALSE(index.MayHoldRequestId(leases, "req-4"));  // lease 4 has none
}

// Random appends, removals and drops (as the algebra's read makes them) on a set of hundreds of
// leases, a third of them with one of 500 request_ids (some shared by two leases): once counted,
// every request_id is answered exactly as a look at every lease answers it, and never absent while
// a lease has it.
TEST(LeaseSetIndexTest, RequestIdsStayExactThroughAppendsRemovalsAndDrops) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  std::mt19937 rng(20261201);
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  for (int step = 0; step < 6000; ++step) {
    const size_t roll = pick(10);
    if (leases.size() < kMany || roll < 5) {
      std::string request_id;
      if (pick(3) == 0) request_id = absl::StrCat("req-", pick(500));
      leases.push_back(LeaseOf(absl::StrCat("id-", step), 0, std::move(request_id)));
      index.Appended(leases);
    } else if (roll < 8) {
      SwapRemove(leases, index, pick(leases.size()));
    } else {
      // A pass that drops every lease whose id ends in the drawn digit, keeping the rest in order.
      const char digit = static_cast<char>('0' + pick(10));
      std::vector<Lease> kept;
      for (Lease& l : leases) {
        if (l.id.back() == digit) {
          index.Dropping(l);
        } else {
          kept.push_back(std::move(l));
        }
      }
      index.Reordered();
      leases = std::move(kept);
    }
    for (int q = 0; q < 3; ++q) {
      const std::string asked = absl::StrCat("req-", pick(600));
      const bool has = HasRequestIdByHand(leases, asked);
      const bool maybe = index.MayHoldRequestId(leases, asked);
      if (has) {
        ASSERT_TRUE(maybe) << "step " << step << ": " << asked << " answered absent";
      }
      if (index.request_ids_known()) {
        ASSERT_EQ(maybe, has) << "step " << step << ": " << asked;
      }
    }
  }
  EXPECT_TRUE(index.request_ids_known());
  index.Clear();
  leases.clear();
  EXPECT_FALSE(index.MayHoldRequestId(leases, "req-1"));
  leases.push_back(LeaseOf("after-reset", 0, "req-1"));
  index.Appended(leases);
  EXPECT_TRUE(index.MayHoldRequestId(leases, "req-1"));
}

}  // namespace
}  // namespace ratelimit
