// LeaseSetIndex (storage/leases/lease_set_index.h): positions kept through appends and removals
// (and right even when they fell behind the set), record numbers exactly the lowest free through
// random takes and frees, request_ids never answered absent while a lease has one, expiries in
// order through random changes, a miss answered without a search once ids are exact, and a
// moved-from index that knows nothing.

#include "storage/leases/lease_set_index.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"
#include "tests/support/lease_test_ids.h"

namespace ratelimit {
namespace {

constexpr size_t kMany = LeaseSetIndex::kPositionsFrom + 100;

Lease LeaseOf(absl::string_view id, uint32_t record = 0, std::string request_id = "") {
  Lease l;
  l.id = NamedId(id);
  l.record = record;
  l.request_id = std::move(request_id);
  return l;
}

// Whether a lease of `leases` has request_id `request_id`, by a look at every lease.
bool HasRequestIdByHand(const std::vector<Lease>& leases, const std::string& request_id) {
  return std::any_of(leases.begin(), leases.end(),
                     [&](const Lease& l) { return l.request_id == request_id; });
}

// The lowest record number no lease of `leases` holds.
uint32_t LowestFreeByHand(const std::vector<Lease>& leases) {
  uint32_t r = 1;
  while (std::any_of(leases.begin(), leases.end(), [r](const Lease& l) { return l.record == r; })) {
    ++r;
  }
  return r;
}

// Appends kMany leases, "id-0" up, each through Appended.
void AppendMany(std::vector<Lease>& leases, LeaseSetIndex& index) {
  for (size_t i = 0; i < kMany; ++i) {
    leases.push_back(LeaseOf(absl::StrCat("id-", i)));
    index.Appended(leases);
  }
}

// Appends and removals on a set past kPositionsFrom keep the positions describing it: every
// lease is found where it is, none is rebuilt by a pass, and an id that left is not found.
TEST(LeaseSetIndexTest, PositionsFollowAppendsAndRemovals) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  AppendMany(leases, index);
  ASSERT_EQ(index.Find(leases, NamedId("id-7")),
            7);  // a search: a set searched once is not indexed
  ASSERT_FALSE(index.positions_live());
  ASSERT_EQ(index.Find(leases, NamedId("id-9")), 9);  // the second search builds the positions
  ASSERT_TRUE(index.positions_live());
  std::mt19937 rng(7);
  for (int step = 0; step < 2000; ++step) {
    if (rng() % 2 == 0 && leases.size() > LeaseSetIndex::kPositionsFrom) {
      const size_t i = rng() % leases.size();
      const LeaseId gone = leases[i].id;
      TakeLease(leases, index, i);
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
  ASSERT_EQ(index.Find(leases, NamedId("id-3")), 3);
  ASSERT_EQ(index.Find(leases, NamedId("id-4")), 4);
  ASSERT_TRUE(index.positions_live());
  std::reverse(leases.begin(), leases.end());
  for (size_t i = 0; i < leases.size(); ++i) {
    EXPECT_EQ(index.Find(leases, leases[i].id), static_cast<int>(i));
  }
  EXPECT_EQ(index.Find(leases, NamedId("absent")), -1);
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
      TakeLease(leases, index, rng() % leases.size());
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
      TakeLease(leases, index, pick(leases.size()));
    } else {
      // A pass that drops every lease whose id hashes to the drawn digit, keeping the rest in
      // order.
      const size_t digit = pick(10);
      std::vector<Lease> kept;
      for (Lease& l : leases) {
        if (absl::HashOf(l.id) % 10 == digit) {
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

// The expiries of every lease, in order, by a look at every lease.
std::vector<int64_t> ExpiriesByHand(const std::vector<Lease>& leases) {
  std::vector<int64_t> out;
  for (const Lease& l : leases) out.push_back(l.expires_at_us);
  std::sort(out.begin(), out.end());
  return out;
}

// The expiries are counted at a large set's second question, then kept exact through random
// appends, swap-removals, extends and dropping passes: the soonest expired lease is the one a look
// at every lease finds, and a visit goes through the leases in expiry order.
TEST(LeaseSetIndexTest, ExpiriesStayInOrderThroughAppendsRemovalsExtendsAndDrops) {
  std::mt19937 rng(20261201);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<Lease> leases;
  LeaseSetIndex index;
  int next = 0;
  const auto append = [&] {
    Lease l = LeaseOf(absl::StrCat("id-", next++));
    l.expires_at_us = 1000 + pick(5000);
    leases.push_back(std::move(l));
    index.Appended(leases);
  };
  for (size_t i = 0; i < kMany; ++i) append();
  index.AskExpiries(leases);
  EXPECT_FALSE(index.expiries_known());  // a set read once is not worth ordering
  index.AskExpiries(leases);
  ASSERT_TRUE(index.expiries_known());
  for (int step = 0; step < 6000; ++step) {
    const int roll = pick(10);
    if (roll < 4 || leases.size() < 10) {
      append();
    } else if (roll < 7) {
      TakeLease(leases, index, static_cast<size_t>(pick(static_cast<int>(leases.size()))));
    } else if (roll < 9) {
      Lease& l = leases[static_cast<size_t>(pick(static_cast<int>(leases.size())))];
      const int64_t later = l.expires_at_us + pick(3000);
      index.ExpiryChanging(l, later);
      l.expires_at_us = later;
    } else {
      // A pass that drops every lease expired at `now`, keeping the others in order.
      const int64_t now = 1000 + pick(3000);
      std::vector<Lease> kept;
      for (Lease& l : leases) {
        if (l.expires_at_us <= now) {
          index.Dropping(l);
        } else {
          kept.push_back(std::move(l));
        }
      }
      if (kept.size() != leases.size()) index.Reordered();
      leases = std::move(kept);
    }
    ASSERT_TRUE(index.expiries_known()) << "step " << step;
    const std::vector<int64_t> want = ExpiriesByHand(leases);
    const int64_t now = 1000 + pick(8000);
    const int i = index.SoonestExpired(leases, now);
    if (want.empty() || want.front() > now) {
      ASSERT_EQ(i, -1) << "step " << step;
    } else {
      ASSERT_GE(i, 0) << "step " << step;
      ASSERT_EQ(leases[static_cast<size_t>(i)].expires_at_us, want.front()) << "step " << step;
    }
    ASSERT_EQ(index.EarliestExpiry(), want.empty() ? INT64_MAX : want.front());
    if (step % 100 == 0) {
      std::vector<int64_t> visited;
      ASSERT_TRUE(index.VisitByExpiry(leases, [&](const Lease& l) {
        visited.push_back(l.expires_at_us);
        return false;
      }));
      ASSERT_EQ(visited, want) << "step " << step;
    }
  }
}

// A denial asks for the expiries too: a large set object counts them at its second question.
TEST(LeaseSetIndexTest, ExpiriesAreCountedAtALargeSetsSecondVisit) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  for (size_t i = 0; i < kMany; ++i) {
    leases.push_back(LeaseOf(absl::StrCat("id-", i)));
    leases.back().expires_at_us = static_cast<int64_t>(kMany - i);
    index.Appended(leases);
  }
  const auto first = [&](const Lease& l) { return l.expires_at_us > 0; };
  EXPECT_FALSE(index.VisitByExpiry(leases, first));
  int64_t soonest = 0;
  EXPECT_TRUE(index.VisitByExpiry(leases, [&](const Lease& l) {
    soonest = l.expires_at_us;
    return true;
  }));
  EXPECT_EQ(soonest, 1);
}

// Once the positions describe the set and no two ids share a hash, an id whose hash is not among
// them is answered absent without a search. Shown with a lease put in the vector behind the
// index's back (never done outside this test): the positions' answer, not a search, decides.
TEST(LeaseSetIndexTest, AMissIsAnsweredWithoutASearchOnceIdsAreExact) {
  std::vector<Lease> leases;
  LeaseSetIndex index;
  AppendMany(leases, index);
  EXPECT_EQ(index.Find(leases, NamedId("id-3")), 3);  // the first search
  EXPECT_EQ(index.Find(leases, NamedId("id-4")), 4);  // builds the positions
  EXPECT_EQ(index.Find(leases, NamedId("gone")), -1);
  ASSERT_TRUE(index.positions_live());
  leases.back().id = NamedId("unannounced");  // the index still knows it as id-<kMany - 1>
  EXPECT_EQ(index.Find(leases, NamedId("unannounced")), -1);
  // A search still finds what the positions point to wrongly (positions are hints).
  EXPECT_EQ(index.Find(leases, NamedId(absl::StrCat("id-", kMany - 2))),
            static_cast<int>(kMany - 2));
}

}  // namespace
}  // namespace ratelimit
