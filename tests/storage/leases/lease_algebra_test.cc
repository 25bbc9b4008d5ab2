// DecideLease and ValidateLeaseOp (storage/leases/lease.h): every action, the held/expired
// boundary, replays, retry_at, the leak counter and the summary carried between decisions.

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"
#include "tests/support/lease_test_ids.h"
#include "tests/support/lease_test_ops.h"

namespace ratelimit {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

constexpr int64_t kNow = 1'000'000'000;
constexpr int64_t kTtl = ::ratelimit::testing::kLeaseTtl;

// `lease_id`: the name of the lease (NamedId), "" for none.
LeaseOp Op(LeaseAction action, int64_t count = 1, absl::string_view lease_id = "",
           double capacity = 3) {
  LeaseOp op = ::ratelimit::testing::LeaseOpOf(action, capacity, lease_id);
  op.count = count;
  return op;
}

Lease Held(absl::string_view id, int64_t count, int64_t expires_at, std::string request_id = "") {
  Lease l;
  l.id = NamedId(id);
  l.count = count;
  l.acquired_at_us = expires_at - kTtl;
  l.expires_at_us = expires_at;
  l.request_id = std::move(request_id);
  return l;
}

TEST(LeaseAlgebraTest, ASetMovedInIsMovedIntoNextNotCopied) {
  // request_ids longer than a string's inline buffer: a copy would allocate, a move keeps the
  // buffer.
  LeaseSet current{{Held("expired", 1, kNow, "request-id-past-the-inline-buffer-1"),
                    Held("held", 1, kNow + 5, "request-id-past-the-inline-buffer-2")}};
  const char* held_request_id = current.leases[1].request_id.data();
  const LeaseDecision d = DecideLease(Op(LeaseAction::kAcquire, 1, "c"), std::move(current), kNow);
  ASSERT_TRUE(d.write);
  ASSERT_EQ(d.next.leases.size(), 2u);  // the expired lease dropped, the new one appended
  EXPECT_EQ(d.next.leases[0].request_id.data(), held_request_id);
}

TEST(LeaseAlgebraTest, WithoutAWriteNextIsTheSetAsRead) {
  Lease released_gone = Held("rg", 1, kNow, "q");
  released_gone.released = true;
  const LeaseSet current{{released_gone, Held("a", 2, kNow + 5), Held("b", 1, kNow + 7)}};
  // Denied (3 of 3 slots held), a release of an unknown lease, a list and a check: nothing is
  // written (the expired lease was released: no leak to drop), and `next` is the set read at
  // now (the expired lease dropped).
  for (const LeaseOp& op : {Op(LeaseAction::kAcquire, 1, "c"), Op(LeaseAction::kRelease, 1, "nope"),
                            Op(LeaseAction::kList), Op(LeaseAction::kCheck, 1)}) {
    const LeaseDecision d = DecideLease(op, current, kNow);
    EXPECT_FALSE(d.write);
    EXPECT_EQ(d.expired_unreleased, 0);
    EXPECT_THAT(d.next.leases, ElementsAre(current.leases[1], current.leases[2]));
  }
}

// A decision that finds a lease expired unreleased writes, whatever it was asked, so that the
// leak is dropped and reported by it alone (the next decision does not find it again).
TEST(LeaseAlgebraTest, ADecisionThatFindsALeakWritesWhateverItWasAsked) {
  const LeaseSet current{{Held("gone", 1, kNow), Held("a", 2, kNow + 5), Held("b", 1, kNow + 7)}};
  for (const LeaseOp& op :
       {Op(LeaseAction::kAcquire, 1, "c"), Op(LeaseAction::kAcquire, 9, "c"),
        Op(LeaseAction::kRelease, 1, "nope"), Op(LeaseAction::kExtend, 1, "nope"),
        Op(LeaseAction::kList), Op(LeaseAction::kCheck, 1)}) {
    const LeaseDecision d = DecideLease(op, current, kNow);
    EXPECT_TRUE(d.write);
    EXPECT_EQ(d.expired_unreleased, 1);
    EXPECT_THAT(d.next.leases, ElementsAre(current.leases[1], current.leases[2]));
    // The set it writes holds no leak: the next decision, whatever it is, reports none.
    EXPECT_EQ(DecideLease(op, d.next, kNow).expired_unreleased, 0);
  }
}

TEST(LeaseAlgebraTest, AcquireTakesSlotsAndAppendsTheLease) {
  LeaseOp op = Op(LeaseAction::kAcquire, 2, "b");
  op.holder = "worker-1";
  op.request_id = "r1";
  const LeaseSet current{{Held("a", 1, kNow + 5)}};
  const LeaseDecision d = DecideLease(op, current, kNow);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.replayed);
  EXPECT_TRUE(d.write);
  EXPECT_EQ(d.held, 3);
  EXPECT_EQ(d.free, 0);
  ASSERT_TRUE(d.lease.has_value());
  EXPECT_EQ(d.lease->id, NamedId("b"));
  EXPECT_EQ(d.lease->count, 2);
  EXPECT_EQ(d.lease->acquired_at_us, kNow);
  EXPECT_EQ(d.lease->expires_at_us, kNow + kTtl);
  EXPECT_EQ(d.lease->request_id, "r1");
  EXPECT_EQ(d.lease->holder, "worker-1");
  EXPECT_THAT(d.next.leases, ElementsAre(current.leases[0], *d.lease));
}

TEST(LeaseAlgebraTest, AcquireBeyondFreeSlotsIsDeniedWithRetryAtAndWritesNothing) {
  // 3 slots: a (1, expires +30), b (1, +10), c (1, +20). Asking 2 needs held <= 1: after b and c.
  const LeaseSet current{
      {Held("a", 1, kNow + 30), Held("b", 1, kNow + 10), Held("c", 1, kNow + 20)}};
  const LeaseDecision d = DecideLease(Op(LeaseAction::kAcquire, 2, "d"), current, kNow);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kNoFreeSlots);
  EXPECT_FALSE(d.write);
  EXPECT_FALSE(d.lease.has_value());
  EXPECT_EQ(d.held, 3);
  EXPECT_EQ(d.free, 0);
  EXPECT_EQ(d.retry_at_us, kNow + 20);
  // Asking 1 needs held <= 2: the first expiry.
  EXPECT_EQ(DecideLease(Op(LeaseAction::kAcquire, 1, "d"), current, kNow).retry_at_us, kNow + 10);
}

TEST(LeaseAlgebraTest, RetryAtCountsEveryLeaseExpiringAtTheSameTime) {
  // A lease of 2 slots expiring first frees both at once.
  const LeaseSet current{{Held("a", 1, kNow + 30), Held("b", 2, kNow + 10)}};
  EXPECT_EQ(DecideLease(Op(LeaseAction::kAcquire, 2, "c"), current, kNow).retry_at_us, kNow + 10);
  EXPECT_EQ(DecideLease(Op(LeaseAction::kAcquire, 3, "c"), current, kNow).retry_at_us, kNow + 30);
}

TEST(LeaseAlgebraTest, CountAboveCapacityIsNeverAllowedAndHasNoRetryAt) {
  const LeaseDecision d = DecideLease(Op(LeaseAction::kAcquire, 4, "a"), LeaseSet{}, kNow);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(d.retry_at_us.has_value());
  EXPECT_FALSE(d.write);
  EXPECT_EQ(d.free, 3);
  EXPECT_EQ(DecideLease(Op(LeaseAction::kCheck, 4), LeaseSet{}, kNow).reason,
            DenyReason::kCountExceedsCapacity);
}

TEST(LeaseAlgebraTest, ALeaseIsExpiredAtItsExpiryAndHeldJustBefore) {
  const LeaseSet current{{Held("a", 3, kNow)}};
  const LeaseDecision before = DecideLease(Op(LeaseAction::kAcquire, 1, "b"), current, kNow - 1);
  EXPECT_FALSE(before.allowed);
  EXPECT_EQ(before.retry_at_us, kNow);
  EXPECT_EQ(before.expired_unreleased, 0);
  const LeaseDecision at = DecideLease(Op(LeaseAction::kAcquire, 1, "b"), current, kNow);
  EXPECT_TRUE(at.allowed);
  EXPECT_EQ(at.expired_unreleased, 1);
  EXPECT_EQ(at.held, 1);
  ASSERT_EQ(at.next.leases.size(), 1u);
  EXPECT_EQ(at.next.leases[0].id, NamedId("b"));  // the expired lease is dropped
}

TEST(LeaseAlgebraTest, CheckAnswersWhatAcquireWouldAndWritesNothing) {
  const LeaseSet current{{Held("a", 2, kNow + 10)}};
  const LeaseDecision yes = DecideLease(Op(LeaseAction::kCheck, 1), current, kNow);
  EXPECT_TRUE(yes.allowed);
  EXPECT_FALSE(yes.write);
  EXPECT_FALSE(yes.lease.has_value());
  EXPECT_EQ(yes.held, 2);
  EXPECT_EQ(yes.free, 1);
  const LeaseDecision no = DecideLease(Op(LeaseAction::kCheck, 2), current, kNow);
  EXPECT_FALSE(no.allowed);
  EXPECT_EQ(no.reason, DenyReason::kNoFreeSlots);
  EXPECT_EQ(no.retry_at_us, kNow + 10);
  EXPECT_FALSE(no.write);
}

TEST(LeaseAlgebraTest, ReplayedAcquireAnswersTheEarlierLeaseAndTakesNothing) {
  LeaseOp op = Op(LeaseAction::kAcquire, 1, "new");
  op.request_id = "r1";
  const LeaseSet current{{Held("a", 3, kNow + 10, "r1")}};  // full: a fresh acquire is denied
  const LeaseDecision d = DecideLease(op, current, kNow);
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.replayed);
  EXPECT_FALSE(d.write);
  ASSERT_TRUE(d.lease.has_value());
  EXPECT_EQ(*d.lease, current.leases[0]);
  EXPECT_EQ(d.held, 3);
  // Another request_id is a new acquire.
  op.request_id = "r2";
  EXPECT_FALSE(DecideLease(op, current, kNow).replayed);
}

TEST(LeaseAlgebraTest, ReleasedLeaseWithRequestIdIsKeptForReplayUntilItsExpiry) {
  LeaseOp release = Op(LeaseAction::kRelease, 1, "a");
  const LeaseSet current{{Held("a", 2, kNow + 10, "r1")}};
  const LeaseDecision d = DecideLease(release, current, kNow);
  EXPECT_EQ(d.state, LeaseState::kReleased);
  EXPECT_TRUE(d.write);
  EXPECT_EQ(d.held, 0);
  EXPECT_EQ(d.free, 3);
  ASSERT_EQ(d.next.leases.size(), 1u);
  EXPECT_TRUE(d.next.leases[0].released);
  // The lease as it was held, for the store to rewrite where it kept it.
  ASSERT_TRUE(d.released.has_value());
  EXPECT_EQ(*d.released, current.leases[0]);

  LeaseOp retry = Op(LeaseAction::kAcquire, 1, "b");
  retry.request_id = "r1";
  const LeaseDecision replay = DecideLease(retry, d.next, kNow + 1);
  EXPECT_TRUE(replay.replayed);
  EXPECT_FALSE(replay.write);
  ASSERT_TRUE(replay.lease.has_value());
  EXPECT_TRUE(replay.lease->released);
  EXPECT_EQ(replay.held, 0);

  // At its expiry it is gone, and not counted as a leak.
  const LeaseDecision later = DecideLease(retry, d.next, kNow + 10);
  EXPECT_FALSE(later.replayed);
  EXPECT_TRUE(later.allowed);
  EXPECT_EQ(later.expired_unreleased, 0);
  EXPECT_THAT(later.next.leases, ElementsAre(Field(&Lease::id, NamedId("b"))));
}

TEST(LeaseAlgebraTest, ReleaseWithoutRequestIdRemovesTheLease) {
  const LeaseSet current{{Held("a", 1, kNow + 10), Held("b", 1, kNow + 10)}};
  const LeaseDecision d = DecideLease(Op(LeaseAction::kRelease, 1, "a"), current, kNow);
  EXPECT_EQ(d.state, LeaseState::kReleased);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.lease.has_value());
  EXPECT_THAT(d.next.leases, ElementsAre(current.leases[1]));
  EXPECT_EQ(d.held, 1);
  // The lease it released, with where the store kept it.
  Lease held = current.leases[0];
  held.record = 7;
  const LeaseDecision numbered =
      DecideLease(Op(LeaseAction::kRelease, 1, "a"), LeaseSet{{held, current.leases[1]}}, kNow);
  ASSERT_TRUE(numbered.released.has_value());
  EXPECT_EQ(*numbered.released, held);
  EXPECT_EQ(numbered.released->record, 7u);
}

TEST(LeaseAlgebraTest, ReleaseMovesTheLastLeaseIntoThePlaceOfTheOneRemoved) {
  const LeaseSet current{{Held("a", 1, kNow + 10), Held("b", 1, kNow + 10), Held("c", 1, kNow + 10),
                          Held("d", 1, kNow + 10)}};
  const LeaseDecision d = DecideLease(Op(LeaseAction::kRelease, 1, "b", 5), current, kNow);
  EXPECT_EQ(d.state, LeaseState::kReleased);
  EXPECT_THAT(d.next.leases, ElementsAre(current.leases[0], current.leases[3], current.leases[2]));
  // The last one released: nothing moves.
  const LeaseDecision last = DecideLease(Op(LeaseAction::kRelease, 1, "d", 5), current, kNow);
  EXPECT_THAT(last.next.leases,
              ElementsAre(current.leases[0], current.leases[1], current.leases[2]));
}

TEST(LeaseAlgebraTest, ReleaseOrExtendOfUnknownExpiredOrReleasedLeaseIsNotHeld) {
  Lease released = Held("r", 1, kNow + 10, "q");
  released.released = true;
  const LeaseSet current{{Held("a", 1, kNow), released}};
  for (LeaseAction action : {LeaseAction::kRelease, LeaseAction::kExtend}) {
    for (const char* id : {"unknown", "a", "r"}) {
      const LeaseDecision d = DecideLease(Op(action, 1, id), current, kNow);
      EXPECT_EQ(d.state, LeaseState::kNotHeld) << id;
      EXPECT_TRUE(d.write) << id;  // drops "a", expired unreleased
      EXPECT_FALSE(d.lease.has_value()) << id;
      EXPECT_FALSE(d.released.has_value()) << id;
      EXPECT_EQ(d.expired_unreleased, 1) << id;
    }
  }
}

TEST(LeaseAlgebraTest, ExtendSetsTheExpiryToNowPlusTtlEvenWhenEarlier) {
  const LeaseSet current{{Held("a", 1, kNow + 50)}};
  LeaseOp op = Op(LeaseAction::kExtend, 1, "a");
  op.ttl_us = 20;
  const LeaseDecision d = DecideLease(op, current, kNow + 5);
  EXPECT_EQ(d.state, LeaseState::kHeld);
  EXPECT_TRUE(d.write);
  ASSERT_TRUE(d.lease.has_value());
  EXPECT_EQ(d.lease->expires_at_us, kNow + 25);
  EXPECT_EQ(d.lease->acquired_at_us, current.leases[0].acquired_at_us);
  EXPECT_THAT(d.next.leases, ElementsAre(*d.lease));
}

TEST(LeaseAlgebraTest, ListGivesHeldLeasesSoonestExpiryFirst) {
  Lease released = Held("r", 1, kNow + 1, "q");
  released.released = true;
  Lease tie = Held("t", 1, kNow + 20);
  tie.acquired_at_us -= 1;  // same expiry as "c", acquired earlier
  const LeaseSet current{
      {Held("c", 1, kNow + 20), Held("b", 1, kNow + 5), released, tie, Held("x", 1, kNow)}};
  const LeaseDecision d = DecideLease(Op(LeaseAction::kList, 1, "", 10), current, kNow);
  EXPECT_TRUE(d.write);  // drops "x", expired unreleased
  EXPECT_TRUE(d.allowed);
  EXPECT_THAT(d.held_leases,
              ElementsAre(Field(&Lease::id, NamedId("b")), Field(&Lease::id, NamedId("t")),
                          Field(&Lease::id, NamedId("c"))));
  EXPECT_EQ(d.held, 3);
  EXPECT_EQ(d.free, 7);
  EXPECT_EQ(d.expired_unreleased, 1);
}

// A listing in pages: the held leases after a place, at most a limit of them, and whether more
// follow; every lease once across the pages, a released one never.
TEST(LeaseAlgebraTest, ListGivesThePageAfterAPlace) {
  Lease released = Held("r", 1, kNow + 10, "q");
  released.released = true;
  Lease tie = Held("t", 1, kNow + 20);
  tie.acquired_at_us -= 1;
  const LeaseSet current{{Held("c", 1, kNow + 20), Held("b", 1, kNow + 5), released, tie,
                          Held("a", 1, kNow + 20), Held("d", 1, kNow + 30)}};
  // The order: b (5), t (20, acquired earlier), a (20), c (20), d (30).
  LeaseOp op = Op(LeaseAction::kList, 1, "", 10);
  op.list_limit = 2;
  std::vector<std::string> listed;
  for (int pages = 1; pages <= 5; ++pages) {
    const LeaseDecision d = DecideLease(op, current, kNow);
    EXPECT_FALSE(d.write);
    EXPECT_EQ(d.held, 5);
    ASSERT_LE(d.held_leases.size(), 2u);
    for (const Lease& l : d.held_leases) listed.push_back(IdName(l.id));
    if (!d.more_listed) {
      EXPECT_EQ(pages, 3);
      break;
    }
    ASSERT_FALSE(d.held_leases.empty());
    op.list_after = PlaceOf(d.held_leases.back());
  }
  EXPECT_THAT(listed, ElementsAre("b", "t", "a", "c", "d"));
  // A place between leases (here a released lease's, or one past every lease).
  op.list_after = PlaceOf(released);
  op.list_limit = 0;
  LeaseDecision d = DecideLease(op, current, kNow);
  EXPECT_THAT(d.held_leases,
              ElementsAre(Field(&Lease::id, NamedId("t")), Field(&Lease::id, NamedId("a")),
                          Field(&Lease::id, NamedId("c")), Field(&Lease::id, NamedId("d"))));
  EXPECT_FALSE(d.more_listed);
  op.list_after = LeasePlace{kNow + 31, 0, LeaseId()};
  d = DecideLease(op, current, kNow);
  EXPECT_TRUE(d.held_leases.empty());
  EXPECT_FALSE(d.more_listed);
  // A limit of exactly what is left: no more.
  op.list_after.reset();
  op.list_limit = 5;
  d = DecideLease(op, current, kNow);
  EXPECT_EQ(d.held_leases.size(), 5u);
  EXPECT_FALSE(d.more_listed);
}

TEST(LeaseAlgebraTest, ResetEndsEveryLeaseAndCountsExpiredOnes) {
  Lease released = Held("r", 1, kNow - 1, "q");
  released.released = true;
  const LeaseSet current{{Held("a", 2, kNow + 10), Held("x", 1, kNow - 1), released}};
  const LeaseDecision d = DecideLease(Op(LeaseAction::kReset), current, kNow);
  EXPECT_TRUE(d.write);
  EXPECT_TRUE(d.next.leases.empty());
  EXPECT_EQ(d.held, 0);
  EXPECT_EQ(d.free, 3);
  EXPECT_EQ(d.expired_unreleased, 1);  // "x"; the released one is not a leak
}

TEST(LeaseAlgebraTest, LoweredCapacityReportsHeldAboveCapacityAndNoFreeSlots) {
  const LeaseSet current{{Held("a", 3, kNow + 10), Held("b", 2, kNow + 20)}};
  const LeaseDecision d = DecideLease(Op(LeaseAction::kAcquire, 1, "c", 2), current, kNow);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.held, 5);
  EXPECT_EQ(d.free, 0);
  EXPECT_EQ(d.retry_at_us, kNow + 20);  // held must fall to 1: both leases gone
}

TEST(LeaseAlgebraTest, ExpiresAtIsTheLatestExpiryReleasedIncluded) {
  Lease released = Held("r", 1, kNow + 99, "q");
  released.released = true;
  EXPECT_EQ(LeaseSetExpiresAt(LeaseSet{}), 0);
  EXPECT_EQ(LeaseSetExpiresAt(LeaseSet{{Held("a", 1, kNow + 5), released}}), kNow + 99);
}

// DecideLease with a carried summary, its decision returned.
LeaseDecision Carried(const LeaseOp& op, LeaseSet current, int64_t now_us,
                      LeaseSetSummary& summary) {
  LeaseDecision d;
  DecideLease(op, std::move(current), now_us, summary, d);
  return d;
}

TEST(LeaseAlgebraTest, AKnownSummaryIsTrustedWithoutReadingTheSet) {
  // "a" has expired, but the summary says nothing expires before kNow + 1: the set is not read,
  // so "a" is neither dropped nor counted.
  const LeaseSet current{{Held("a", 1, kNow), Held("b", 1, kNow + 5)}};
  LeaseSetSummary summary{true, 2, kNow + 1};
  LeaseDecision d = Carried(Op(LeaseAction::kCheck), current, kNow, summary);
  EXPECT_EQ(d.held, 2);
  EXPECT_EQ(d.expired_unreleased, 0);
  EXPECT_EQ(d.next.leases.size(), 2u);
  // From its bound on, the set is read: "a" is dropped and the summary filled from what is left.
  d = Carried(Op(LeaseAction::kCheck), current, kNow + 1, summary);
  EXPECT_EQ(d.held, 1);
  EXPECT_EQ(d.expired_unreleased, 1);
  EXPECT_EQ(d.next.leases.size(), 1u);
  EXPECT_TRUE(summary.known);
  EXPECT_EQ(summary.held, 1);
  EXPECT_EQ(summary.expires_from_us, kNow + 5);
}

// Every field of a decision.
void ExpectSameDecision(const LeaseDecision& a, const LeaseDecision& b, int step) {
  SCOPED_TRACE(step);
  EXPECT_EQ(a.allowed, b.allowed);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.lease, b.lease);
  EXPECT_EQ(a.replayed, b.replayed);
  EXPECT_EQ(a.held, b.held);
  EXPECT_EQ(a.free, b.free);
  EXPECT_EQ(a.retry_at_us, b.retry_at_us);
  EXPECT_EQ(a.expired_unreleased, b.expired_unreleased);
  EXPECT_EQ(a.held_leases, b.held_leases);
  EXPECT_EQ(a.released, b.released);
  EXPECT_EQ(a.write, b.write);
  EXPECT_EQ(a.next, b.next);
}

// One key's sets decided two ways: alone (read at every decision), and carried with the summary
// the decision before left, as a store carries a cached set.
struct DecidedTwoWays {
  LeaseSet alone;
  LeaseSet carried;
  LeaseSetSummary summary;

  // Decides `op` at `now_us` both ways, expects the same decision, moves both sets on to its
  // `next`, and returns the carried decision.
  LeaseDecision Decide(const LeaseOp& op, int64_t now_us, int step) {
    LeaseDecision want = DecideLease(op, alone, now_us);
    LeaseDecision got = Carried(op, carried, now_us, summary);
    ExpectSameDecision(want, got, step);
    alone = std::move(want.next);
    carried = got.next;
    return got;
  }
};

TEST(LeaseAlgebraTest, ACarriedSummaryDecidesAsReadingTheSetEveryTimeDoes) {
  // Random operations on one key, each decided twice: on the set alone, and on the set with the
  // summary the decision before left. Time stands still for runs of decisions (as in a store's
  // burst) and jumps past expiries; extends may shorten a lease; counts may exceed what is free.
  std::mt19937_64 rng(20261130);
  auto pick = [&rng](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  DecidedTwoWays key;
  std::vector<LeaseId> ids;
  int64_t now = kNow;
  int fast = 0;  // decisions the summary let skip the read
  for (int step = 0; step < 20000; ++step) {
    if (pick(4) == 0) now += pick(kTtl / 2);
    LeaseOp op = Op(LeaseAction::kCheck, 1 + pick(3), "", 6);
    op.ttl_us = 1000 + pick(2 * kTtl);
    // Of 20: 8 acquires, 5 releases, 3 extends, 1 list, and checks (now and then a reset).
    const int64_t roll = pick(20);
    if (roll < 8) {
      op.action = LeaseAction::kAcquire;
      op.lease_id = NamedId("id" + std::to_string(step));
      if (pick(3) == 0) op.request_id = "rq" + std::to_string(pick(40));
      ids.push_back(op.lease_id);
    } else if (roll < 13) {
      op.action = LeaseAction::kRelease;
      op.lease_id = ids.empty() || pick(10) == 0 ? NamedId("unknown") : ids[pick(ids.size())];
    } else if (roll < 16) {
      op.action = LeaseAction::kExtend;
      op.lease_id = ids.empty() ? NamedId("unknown") : ids[pick(ids.size())];
    } else if (roll == 16) {
      op.action = LeaseAction::kList;
    } else if (roll == 17 && pick(5) == 0) {
      op.action = LeaseAction::kReset;  // now and then: every lease ends
    }
    ASSERT_TRUE(ValidateLeaseOp(op).ok());
    if (key.summary.known && now < key.summary.expires_from_us) ++fast;
    key.Decide(op, now, step);
    if (HasFailure()) return;
  }
  EXPECT_GT(fast, 5000);  // the comparison covers decisions that skipped the read
}

// A key holding hundreds of leases, with time moving past expiries at nearly every decision (a
// busy key whose clients send request_ids keeps each released lease until it expires): decided
// on the set alone and carried, the decisions are the same, and the carried ones find the expired
// leases by the set's index (no pass over every lease), as well as when slots free on a denial.
TEST(LeaseAlgebraTest, ALargeCarriedSetDropsExpiredLeasesByItsIndex) {
  std::mt19937_64 rng(20261201);
  auto pick = [&rng](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  constexpr double kSlots = 400;
  DecidedTwoWays key;
  std::vector<LeaseId> ids;
  int64_t now = kNow;
  int by_index = 0;  // decisions that dropped leases without a pass
  int passes = 0;    // decisions that passed over every lease
  int denials = 0;
  for (int step = 0; step < 6000; ++step) {
    now += pick(3);
    LeaseOp op = Op(LeaseAction::kAcquire, 1 + pick(2), "id" + std::to_string(step), kSlots);
    op.ttl_us = 500 + pick(1000);
    const int64_t roll = pick(10);
    if (roll < 6) {
      op.request_id = "rq" + std::to_string(step);
      ids.push_back(op.lease_id);
    } else if (roll < 8) {
      op.action = LeaseAction::kRelease;
      op.lease_id = ids.empty() ? NamedId("unknown") : ids[pick(ids.size())];
    } else if (roll < 9) {
      op.action = LeaseAction::kExtend;
      op.lease_id = ids.empty() ? NamedId("unknown") : ids[pick(ids.size())];
    } else {
      op.action = LeaseAction::kCheck;
    }
    const LeaseDecision got = key.Decide(op, now, step);
    if (HasFailure()) return;
    if (!got.dropped.empty()) ++by_index;
    if (got.read_all) ++passes;
    if (!got.allowed) ++denials;
  }
  EXPECT_GT(key.carried.leases.size(), LeaseSetIndex::kPositionsFrom);
  EXPECT_GT(by_index, 1000);
  EXPECT_LT(passes, 100);
  EXPECT_GT(denials, 100);
}

// What stores number their decisions with: n numbers at a time, consecutive, each above every
// number handed out before, from any thread.
TEST(LeaseAlgebraTest, DecisionNumbersOnlyGrow) {
  const uint64_t first = NextLeaseDecisionSeq(3);
  EXPECT_GT(first, 0u);
  EXPECT_EQ(NextLeaseDecisionSeq(), first + 3);
  EXPECT_GT(NextLeaseDecisionSeq(), first + 3);
}

TEST(LeaseAlgebraTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(ValidateLeaseOp(Op(LeaseAction::kAcquire, 1, "a")).ok());
  EXPECT_TRUE(ValidateLeaseOp(Op(LeaseAction::kList)).ok());
  LeaseOp op = Op(LeaseAction::kAcquire, 0, "a");
  EXPECT_THAT(std::string(ValidateLeaseOp(op, "lease.").message()),
              ::testing::StartsWith("lease.count:"));
  op = Op(LeaseAction::kExtend, 1, "a");
  op.ttl_us = 999;
  EXPECT_THAT(std::string(ValidateLeaseOp(op).message()), ::testing::StartsWith("ttl:"));
  op.ttl_us = op.config.max_lease_ttl_us + 1;
  EXPECT_THAT(std::string(ValidateLeaseOp(op).message()), ::testing::StartsWith("ttl:"));
  op = Op(LeaseAction::kRelease, 1, "");
  EXPECT_THAT(std::string(ValidateLeaseOp(op).message()), ::testing::StartsWith("lease_id:"));
  op = Op(LeaseAction::kAcquire, 1, "a", 2.5);
  EXPECT_THAT(std::string(ValidateLeaseOp(op).message()),
              ::testing::StartsWith("config.capacity:"));
  op = Op(LeaseAction::kAcquire, 1, "a");
  op.config.kind = LimitKind::kTokenBucket;
  EXPECT_THAT(std::string(ValidateLeaseOp(op).message()), ::testing::StartsWith("config.kind:"));
  EXPECT_EQ(ValidateLeaseOp(op).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ratelimit
