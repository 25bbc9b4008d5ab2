#ifndef RATELIMIT_TESTS_STORAGE_LEASE_STORE_CONTRACT_H_
#define RATELIMIT_TESTS_STORAGE_LEASE_STORE_CONTRACT_H_

// What every store keeping leases (StateStore::ApplyLease, storage/leases/lease.h) does, as a
// typed test suite any store's test instantiates: acquire up to capacity then deny; release frees
// a slot; expiry frees it at the TTL; extend keeps a lease; an acquire with rate limits is
// all-or-nothing both ways; a request_id replay takes nothing twice (its rate limits read, their
// balances reported as they are now); DeleteAllLeases ends the
// leases of one limit only; bad input is refused naming the field, with nothing written.
//
// A store's test gives an environment type Env with:
//   void Open();                   // makes an empty store (gtest assertions allowed)
//   StateStore& store();           // valid after Open
//   const Clock& clock();          // what ApplyLease is given
//   void Advance(int64_t us);      // moves the store's clock (the engine's, for a remote store)
// and instantiates the suite:
//   INSTANTIATE_TYPED_TEST_SUITE_P(Backend, LeaseStoreContractTest, Env);

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/leases/lease.h"
#include "storage/state_store.h"
#include "tests/support/lease_test_ids.h"
#include "tests/support/lease_test_ops.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

template <typename Env>
class LeaseStoreContractTest : public ::testing::Test {
 protected:
  void SetUp() override { env_.Open(); }

  absl::StatusOr<LeaseOutcome> Apply(const LeaseOp& op, absl::Span<const LimitOp> limits = {}) {
    return env_.store().ApplyLease(LeaseOperation{op, limits}, env_.clock());
  }
  // Applies `op`, failing the test on a store error.
  LeaseOutcome Must(const LeaseOp& op, absl::Span<const LimitOp> limits = {}) {
    absl::StatusOr<LeaseOutcome> out = Apply(op, limits);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : LeaseOutcome();
  }
  LeaseOutcome Acquire(double capacity, const std::string& id, int64_t count = 1) {
    LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, capacity, id);
    op.count = count;
    return Must(op);
  }
  // The slots held now, as kList sees them.
  int64_t Held(double capacity, std::string name = "jobs", std::string key = "tenant") {
    return Must(LeaseOpOf(LeaseAction::kList, capacity, "", std::move(name), std::move(key)))
        .lease.held;
  }
  // Every key the leak search names at the store's clock, as "name/key", following its pages.
  std::vector<std::string> LeakedKeys() {
    std::vector<std::string> out;
    std::string cursor;
    for (int pages = 0; pages < 10000; ++pages) {
      absl::StatusOr<StateStore::LeakedLeaseKeys> page =
          env_.store().FindLeakedLeaseKeys(cursor, env_.clock().NowMicros());
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      for (const StateKey& k : page->keys) out.push_back(absl::StrCat(k.name, "/", k.key));
      cursor = page->next;
      if (cursor.empty()) break;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());  // a key may be on two pages
    return out;
  }
  // The tokens left in the token bucket `limit` (10 a second, capacity 10), as a check sees them.
  double Tokens(const LimitOp& limit) {
    absl::StatusOr<std::optional<State>> s = env_.store().Get(limit.key);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok() || !s->has_value()) return *limit.config.capacity;
    return Decide(limit.config, LimitId{limit.key.name, limit.key.key}, **s, 1, Mode::kCheck,
                  env_.clock().NowMicros())
        .value;
  }
  static LimitOp RateLimit() {
    LimitOp l;
    l.key = StateKey{"calls", "tenant"};
    l.config = TokenBucket(10, kSecond, 10);
    l.count = 1;
    return l;
  }

  Env env_;
};

TYPED_TEST_SUITE_P(LeaseStoreContractTest);

TYPED_TEST_P(LeaseStoreContractTest, AcquiresUpToCapacityThenDenies) {
  const LeaseOutcome first = this->Acquire(3, "a", 2);
  EXPECT_TRUE(first.allowed);
  ASSERT_TRUE(first.lease.lease.has_value());
  EXPECT_EQ(first.lease.lease->id, NamedId("a"));
  EXPECT_EQ(first.lease.lease->expires_at_us, first.now_us + kLeaseTtl);
  EXPECT_EQ(first.lease.free, 1);
  this->env_.Advance(kSecond);
  EXPECT_TRUE(this->Acquire(3, "b").allowed);
  const LeaseOutcome denied = this->Acquire(3, "c");
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.lease.reason, DenyReason::kNoFreeSlots);
  EXPECT_EQ(denied.lease.retry_at_us, first.lease.lease->expires_at_us);
  EXPECT_EQ(denied.lease.held, 3);
  EXPECT_EQ(this->Held(3), 3);
  const LeaseOutcome never = this->Acquire(3, "d", 4);
  EXPECT_EQ(never.lease.reason, DenyReason::kCountExceedsCapacity);
  EXPECT_FALSE(never.lease.retry_at_us.has_value());
}

TYPED_TEST_P(LeaseStoreContractTest, ReleaseFreesTheSlots) {
  ASSERT_TRUE(this->Acquire(2, "a", 2).allowed);
  EXPECT_FALSE(this->Acquire(2, "b").allowed);
  const LeaseOutcome released = this->Must(LeaseOpOf(LeaseAction::kRelease, 2, "a"));
  EXPECT_EQ(released.lease.state, LeaseState::kReleased);
  EXPECT_EQ(released.lease.free, 2);
  EXPECT_TRUE(this->Acquire(2, "b").allowed);
  // A second release of the same lease holds nothing and changes nothing.
  const LeaseOutcome again = this->Must(LeaseOpOf(LeaseAction::kRelease, 2, "a"));
  EXPECT_EQ(again.lease.state, LeaseState::kNotHeld);
  EXPECT_EQ(this->Held(2), 1);
}

TYPED_TEST_P(LeaseStoreContractTest, ExpiryFreesTheSlotsAtTheTtl) {
  ASSERT_TRUE(this->Acquire(1, "a").allowed);
  this->env_.Advance(kLeaseTtl - 1);
  EXPECT_FALSE(this->Acquire(1, "b").allowed);
  this->env_.Advance(1);
  const LeaseOutcome after = this->Acquire(1, "b");
  EXPECT_TRUE(after.allowed);
  EXPECT_EQ(after.lease.expired_unreleased, 1);
  // The expired lease is not held: releasing or extending it changes nothing.
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kRelease, 1, "a")).lease.state, LeaseState::kNotHeld);
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kExtend, 1, "a")).lease.state, LeaseState::kNotHeld);
  EXPECT_EQ(this->Held(1), 1);
}

TYPED_TEST_P(LeaseStoreContractTest, ExtendKeepsTheLeasePastItsFirstExpiry) {
  ASSERT_TRUE(this->Acquire(1, "a").allowed);
  this->env_.Advance(kLeaseTtl - 1);
  const LeaseOutcome extended = this->Must(LeaseOpOf(LeaseAction::kExtend, 1, "a"));
  EXPECT_EQ(extended.lease.state, LeaseState::kHeld);
  ASSERT_TRUE(extended.lease.lease.has_value());
  EXPECT_EQ(extended.lease.lease->expires_at_us, extended.now_us + kLeaseTtl);
  this->env_.Advance(kLeaseTtl - 1);
  EXPECT_FALSE(this->Acquire(1, "b").allowed);
  this->env_.Advance(1);
  EXPECT_TRUE(this->Acquire(1, "b").allowed);
}

TYPED_TEST_P(LeaseStoreContractTest, RateDenialTakesNoSlot) {
  LimitOp rate = this->RateLimit();
  rate.count = 10;
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 2, "a");
  ASSERT_TRUE(this->Must(op, {rate}).allowed);  // every token taken
  op.lease_id = NamedId("b");
  rate.count = 1;
  const LeaseOutcome denied = this->Must(op, {rate});
  EXPECT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.lease.allowed);
  EXPECT_FALSE(denied.lease.lease.has_value());
  EXPECT_EQ(denied.lease.held, 1);
  ASSERT_EQ(denied.decisions.size(), 1u);
  EXPECT_EQ(denied.decisions[0].reason, DenyReason::kInsufficientTokens);
  EXPECT_EQ(this->Held(2), 1);
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kRelease, 2, "b")).lease.state, LeaseState::kNotHeld);
}

TYPED_TEST_P(LeaseStoreContractTest, SlotDenialTakesNoToken) {
  const LimitOp rate = this->RateLimit();
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 1, "a");
  ASSERT_TRUE(this->Must(op, {rate}).allowed);
  EXPECT_EQ(this->Tokens(rate), 9);
  op.lease_id = NamedId("b");
  const LeaseOutcome denied = this->Must(op, {rate});
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.lease.reason, DenyReason::kNoFreeSlots);
  ASSERT_EQ(denied.decisions.size(), 1u);
  EXPECT_TRUE(denied.decisions[0].allowed);  // alone it would have been
  EXPECT_EQ(denied.decisions[0].value, 9);   // the balance as it is
  EXPECT_EQ(this->Tokens(rate), 9);
}

TYPED_TEST_P(LeaseStoreContractTest, RequestIdReplayTakesNothingTwice) {
  const LimitOp rate = this->RateLimit();
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 3, "a");
  op.request_id = "req-1";
  const LeaseOutcome first = this->Must(op, {rate});
  ASSERT_TRUE(first.allowed);
  op.lease_id =
      NamedId("a-retry");  // a retry gets a new id from the server: the first lease is answered
  const LeaseOutcome again = this->Must(op, {rate});
  EXPECT_TRUE(again.allowed);
  EXPECT_TRUE(again.lease.replayed);
  ASSERT_TRUE(again.lease.lease.has_value());
  EXPECT_EQ(*again.lease.lease, *first.lease.lease);
  // The rate limit is read, not taken again: its balance now, reported allowed.
  ASSERT_EQ(again.decisions.size(), 1u);
  EXPECT_TRUE(again.decisions[0].allowed);
  EXPECT_EQ(again.decisions[0].value, 9);
  EXPECT_FALSE(again.decisions[0].retry_at_us.has_value());
  EXPECT_EQ(this->Held(3), 1);
  EXPECT_EQ(this->Tokens(rate), 9);
  // Released, it is still answered (holding nothing) until its expiry.
  ASSERT_EQ(this->Must(LeaseOpOf(LeaseAction::kRelease, 3, "a")).lease.state,
            LeaseState::kReleased);
  const LeaseOutcome after_release = this->Must(op, {rate});
  EXPECT_TRUE(after_release.lease.replayed);
  ASSERT_TRUE(after_release.lease.lease.has_value());
  EXPECT_TRUE(after_release.lease.lease->released);
  EXPECT_EQ(this->Held(3), 0);
  EXPECT_EQ(this->Tokens(rate), 9);
  // Emptied by other requests since, the bucket is reported as it is; the replay stays allowed.
  LimitOp rest = rate;
  rest.count = 9;
  ASSERT_TRUE(this->Must(LeaseOpOf(LeaseAction::kAcquire, 3, "other"), {rest}).allowed);
  const LeaseOutcome empty = this->Must(op, {rate});
  EXPECT_TRUE(empty.allowed);
  EXPECT_TRUE(empty.lease.replayed);  // released, still answered
  ASSERT_EQ(empty.decisions.size(), 1u);
  EXPECT_TRUE(empty.decisions[0].allowed);
  EXPECT_EQ(empty.decisions[0].value, 0);
  EXPECT_EQ(empty.decisions[0].reason, DenyReason::kNone);
}

TYPED_TEST_P(LeaseStoreContractTest, DeleteAllLeasesEndsTheLeasesOfOneLimitOnly) {
  for (const char* key : {"t1", "t2"}) {
    ASSERT_TRUE(
        this->Must(LeaseOpOf(LeaseAction::kAcquire, 1, absl::StrCat("a-", key), "jobs", key))
            .allowed);
  }
  // A limit whose name starts with the other's, and the same name from another source.
  ASSERT_TRUE(this->Must(LeaseOpOf(LeaseAction::kAcquire, 1, "x", "jobs2", "t1")).allowed);
  LeaseOp inline_op = LeaseOpOf(LeaseAction::kAcquire, 1, "y", "jobs", "t1");
  inline_op.key.source = LimitSource::kInline;
  ASSERT_TRUE(this->Must(inline_op).allowed);

  absl::StatusOr<uint64_t> deleted = this->env_.store().DeleteAllLeases(
      LimitSource::kDefined, "jobs", this->env_.clock().NowMicros());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2u);
  EXPECT_EQ(this->Held(1, "jobs", "t1"), 0);
  EXPECT_EQ(this->Held(1, "jobs", "t2"), 0);
  EXPECT_EQ(this->Held(1, "jobs2", "t1"), 1);
  inline_op.action = LeaseAction::kList;
  EXPECT_EQ(this->Must(inline_op).lease.held, 1);
  EXPECT_EQ(*this->env_.store().DeleteAllLeases(LimitSource::kDefined, "jobs",
                                                this->env_.clock().NowMicros()),
            0u);
}

// A reset of every key counts the keys it ended a lease of: not a key whose set keeps only a
// lease released (for a retried acquire's answer) or one that expired unreleased (for the leak
// count). Redis counted every set it deleted, the memory store a released lease's key.
TYPED_TEST_P(LeaseStoreContractTest, DeleteAllLeasesCountsTheKeysHoldingALease) {
  ASSERT_TRUE(this->Must(LeaseOpOf(LeaseAction::kAcquire, 1, "held", "jobs", "held")).allowed);
  LeaseOp released = LeaseOpOf(LeaseAction::kAcquire, 1, "released", "jobs", "released");
  released.request_id = "req-released";
  ASSERT_TRUE(this->Must(released).allowed);
  released.action = LeaseAction::kRelease;
  ASSERT_EQ(this->Must(released).lease.state, LeaseState::kReleased);
  LeaseOp expired = LeaseOpOf(LeaseAction::kAcquire, 1, "expired", "jobs", "expired");
  expired.ttl_us = kSecond;
  ASSERT_TRUE(this->Must(expired).allowed);
  this->env_.Advance(2 * kSecond);

  absl::StatusOr<uint64_t> deleted = this->env_.store().DeleteAllLeases(
      LimitSource::kDefined, "jobs", this->env_.clock().NowMicros());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1u);
  EXPECT_EQ(this->Held(1, "jobs", "held"), 0);
}

TYPED_TEST_P(LeaseStoreContractTest, ResetAndListSeeTheHeldLeases) {
  ASSERT_TRUE(this->Acquire(5, "a", 2).allowed);
  this->env_.Advance(kSecond);
  ASSERT_TRUE(this->Acquire(5, "b").allowed);
  const LeaseOutcome list = this->Must(LeaseOpOf(LeaseAction::kList, 5));
  EXPECT_THAT(list.lease.held_leases,
              ::testing::ElementsAre(::testing::Field(&Lease::id, NamedId("a")),
                                     ::testing::Field(&Lease::id, NamedId("b"))));
  EXPECT_TRUE(this->Must(LeaseOpOf(LeaseAction::kReset, 5)).lease.write);
  EXPECT_EQ(this->Held(5), 0);
}

// A lease that expired unreleased (its holder gone) is reported by the first decision that finds
// it, whatever that decision is (a check, a list, a release of another lease, a denial), and by
// no later one: the leak detector counts it once.
TYPED_TEST_P(LeaseStoreContractTest, ALeakIsReportedOnceByWhicheverDecisionFindsIt) {
  ASSERT_TRUE(this->Acquire(2, "a").allowed);
  ASSERT_TRUE(this->Acquire(2, "b").allowed);
  this->env_.Advance(kLeaseTtl + kSecond / 2);  // kept a minute past its expiry
  ASSERT_TRUE(this->Acquire(2, "c").allowed);   // finds a and b
  this->env_.Advance(kLeaseTtl + kSecond / 2);  // kept a minute past its expiry
  LeaseOp check = LeaseOpOf(LeaseAction::kCheck, 2);
  const LeaseOutcome first = this->Must(check);  // finds c
  EXPECT_EQ(first.lease.expired_unreleased, 1);
  EXPECT_TRUE(first.lease.write);
  EXPECT_EQ(this->Must(check).lease.expired_unreleased, 0);
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kList, 2)).lease.expired_unreleased, 0);
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kRelease, 2, "zz")).lease.expired_unreleased, 0);
  EXPECT_EQ(this->Acquire(2, "d").lease.expired_unreleased, 0);
  // A list, a denial and a release of an unknown lease each find and report theirs once too.
  this->env_.Advance(kLeaseTtl + kSecond / 2);  // kept a minute past its expiry
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kList, 2)).lease.expired_unreleased, 1);
  EXPECT_EQ(this->Acquire(2, "e", 3).lease.expired_unreleased, 0);  // denied: 3 > capacity
  ASSERT_TRUE(this->Acquire(2, "f", 2).allowed);
  this->env_.Advance(kLeaseTtl + kSecond / 2);  // kept a minute past its expiry
  EXPECT_EQ(this->Must(LeaseOpOf(LeaseAction::kRelease, 2, "zz")).lease.expired_unreleased, 1);
  EXPECT_EQ(this->Must(check).lease.expired_unreleased, 0);
}

// The leak sweep's search names the keys holding a lease that expired unreleased, and only those:
// not a key whose lease was released, nor one still held, nor one already counted; and a lease
// expired a minute ago (its margin) is no longer kept to be found.
TYPED_TEST_P(LeaseStoreContractTest, TheLeakSearchNamesTheKeysHoldingALeakUntilOneIsCounted) {
  auto acquire = [&](const std::string& key, const std::string& id, int64_t ttl_us) {
    LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 2, id, "jobs", key);
    op.ttl_us = ttl_us;
    ASSERT_TRUE(this->Must(op).lease.allowed) << key;
  };
  acquire("leaked", "a", kLeaseTtl);
  acquire("leaked", "b", 50 * kLeaseTtl);  // still held when a has expired
  acquire("released", "c", kLeaseTtl);
  ASSERT_EQ(this->Must(LeaseOpOf(LeaseAction::kRelease, 2, "c", "jobs", "released")).lease.state,
            LeaseState::kReleased);
  acquire("held", "d", 50 * kLeaseTtl);
  LeaseOp other = LeaseOpOf(LeaseAction::kAcquire, 1, "e", "seats", "leaked");
  ASSERT_TRUE(this->Must(other).lease.allowed);
  EXPECT_THAT(this->LeakedKeys(), ::testing::IsEmpty());  // nothing has expired yet
  this->env_.Advance(kLeaseTtl + 30 * kSecond);           // a and e expired; kept a minute past it
  EXPECT_THAT(this->LeakedKeys(), ::testing::UnorderedElementsAre("jobs/leaked", "seats/leaked"));
  // A decision on the key, whatever it is, counts the leak; the search no longer names it.
  EXPECT_EQ(
      this->Must(LeaseOpOf(LeaseAction::kList, 2, "", "jobs", "leaked")).lease.expired_unreleased,
      1);
  EXPECT_THAT(this->LeakedKeys(), ::testing::ElementsAre("seats/leaked"));
  this->env_.Advance(31 * kSecond);  // e expired over a minute ago: no longer kept
  EXPECT_THAT(this->LeakedKeys(), ::testing::IsEmpty());
}

// A store lists a page: the held leases after a place, in the listing's order, at most a limit of
// them, and whether more follow. Three leases share an acquisition and expiry (ordered by id).
TYPED_TEST_P(LeaseStoreContractTest, ListGivesThePageAfterAPlace) {
  for (const char* id : {"c", "a", "b"}) ASSERT_TRUE(this->Acquire(10, id).allowed);
  this->env_.Advance(kSecond);
  for (const char* id : {"e", "d"}) ASSERT_TRUE(this->Acquire(10, id).allowed);
  LeaseOp list = LeaseOpOf(LeaseAction::kList, 10);
  list.list_limit = 2;
  std::vector<std::string> listed;
  for (int pages = 1; pages <= 5; ++pages) {
    const LeaseOutcome page = this->Must(list);
    EXPECT_EQ(page.lease.held, 5);
    ASSERT_LE(page.lease.held_leases.size(), 2u);
    for (const Lease& l : page.lease.held_leases) listed.push_back(IdName(l.id));
    if (!page.lease.more_listed) {
      EXPECT_EQ(pages, 3);
      break;
    }
    ASSERT_FALSE(page.lease.held_leases.empty());
    list.list_after = PlaceOf(page.lease.held_leases.back());
  }
  EXPECT_THAT(listed, ::testing::ElementsAre("a", "b", "c", "d", "e"));
}

TYPED_TEST_P(LeaseStoreContractTest, BadInputIsRefusedNamingTheFieldAndWritesNothing) {
  LeaseOp op = LeaseOpOf(LeaseAction::kAcquire, 2, "a");
  op.count = 0;
  absl::StatusOr<LeaseOutcome> out = this->Apply(op);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr("count"));
  op.count = 1;
  op.ttl_us = op.config.max_lease_ttl_us + 1;
  out = this->Apply(op);
  EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr("ttl"));
  const LimitOp rate = this->RateLimit();
  LeaseOp release = LeaseOpOf(LeaseAction::kRelease, 2, "a");
  out = this->Apply(release, {rate});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr("limits"));
  EXPECT_EQ(this->Held(2), 0);
  EXPECT_EQ(this->Tokens(rate), 10);
}

REGISTER_TYPED_TEST_SUITE_P(LeaseStoreContractTest, AcquiresUpToCapacityThenDenies,
                            ReleaseFreesTheSlots, ExpiryFreesTheSlotsAtTheTtl,
                            ExtendKeepsTheLeasePastItsFirstExpiry, RateDenialTakesNoSlot,
                            SlotDenialTakesNoToken, RequestIdReplayTakesNothingTwice,
                            DeleteAllLeasesEndsTheLeasesOfOneLimitOnly,
                            DeleteAllLeasesCountsTheKeysHoldingALease, ResetAndListSeeTheHeldLeases,
                            ListGivesThePageAfterAPlace,
                            ALeakIsReportedOnceByWhicheverDecisionFindsIt,
                            TheLeakSearchNamesTheKeysHoldingALeakUntilOneIsCounted,
                            BadInputIsRefusedNamingTheFieldAndWritesNothing);

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_STORAGE_LEASE_STORE_CONTRACT_H_
