// The held-slots gauge (server/v1/held_slots.cc): the last count seen per key, summed per limit,
// forgotten at 0 or max_lease_ttl after the last decision.
#include "server/v1/held_slots.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using Samples = std::vector<std::pair<std::string, double>>;

constexpr int64_t kSecond = ::ratelimit::testing::kSecond;

TEST(HeldSlotsTest, SumsTheLastCountOfEachKeyPerLimit) {
  FakeClock clock;
  HeldSlots held(clock);
  held.Observe(StateKey{"jobs", "a"}, 3, 60 * kSecond);
  held.Observe(StateKey{"jobs", "b"}, 2, 60 * kSecond);
  held.Observe(StateKey{"jobs", "a"}, 1, 60 * kSecond);  // replaces a's 3
  held.Observe(StateKey{"seats", "x"}, 7, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 3}, {"seats", 7}}));
}

// A burst's answers come in the order its calls came, not the order decided (its releases are
// decided first), and two serving threads race: a count from an earlier decision, reported
// after a later one's, is ignored. Without numbers (a store that gives none) the last reported
// wins.
TEST(HeldSlotsTest, KeepsTheCountOfTheLatestDecisionNotOfTheLatestReport) {
  FakeClock clock;
  HeldSlots held(clock);
  const StateKey key{"jobs", "a"};
  held.Observe(key, 2, 60 * kSecond, /*seq=*/10);
  held.Observe(key, 1, 60 * kSecond, /*seq=*/9);  // decided before the count of 2
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 2}}));
  held.Observe(key, 3, 60 * kSecond, /*seq=*/11);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 3}}));
  // A count of 0 decided first does not forget the key.
  held.Observe(key, 0, 60 * kSecond, /*seq=*/5);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 3}}));
  const StateKey unnumbered{"seats", "x"};
  held.Observe(unnumbered, 4, 60 * kSecond);
  held.Observe(unnumbered, 1, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 3}, {"seats", 1}}));
}

TEST(HeldSlotsTest, ForgetsAKeyAtZeroAndAfterMaxLeaseTtl) {
  FakeClock clock;
  HeldSlots held(clock);
  held.Observe(StateKey{"jobs", "a"}, 3, 60 * kSecond);
  held.Observe(StateKey{"jobs", "b"}, 2, 10 * kSecond);
  held.Observe(StateKey{"jobs", "a"}, 0, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 2}}));
  clock.Advance(10 * kSecond);
  EXPECT_EQ(held.PerLimit(), Samples{});
}

TEST(HeldSlotsTest, KeepsTheSourcesApart) {
  FakeClock clock;
  HeldSlots held(clock);
  held.Observe(StateKey{"jobs", "a", LimitSource::kDefined}, 3, 60 * kSecond);
  held.Observe(StateKey{"jobs", "a", LimitSource::kInline}, 2, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 5}}));
}

// A Reset of every key of a limit ends its leases: its keys of that source go, the others stay.
TEST(HeldSlotsTest, ForgetLimitDropsEveryKeyOfOneLimitOfOneSource) {
  FakeClock clock;
  HeldSlots held(clock);
  held.Observe(StateKey{"jobs", "a", LimitSource::kDefined}, 3, 60 * kSecond);
  held.Observe(StateKey{"jobs", "b", LimitSource::kDefined}, 2, 60 * kSecond);
  held.Observe(StateKey{"jobs", "a", LimitSource::kInline}, 4, 60 * kSecond);
  held.Observe(StateKey{"seats", "a", LimitSource::kDefined}, 1, 60 * kSecond);
  held.ForgetLimit(LimitSource::kDefined, "jobs");
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 4}, {"seats", 1}}));
  held.ForgetLimit(LimitSource::kDefined, "unknown");  // no such limit: nothing changes
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 4}, {"seats", 1}}));
  held.Observe(StateKey{"jobs", "a", LimitSource::kDefined}, 1, 60 * kSecond);  // counted again
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 5}, {"seats", 1}}));
}

TEST(HeldSlotsTest, KeysAtZeroDoNotPileUpBetweenScrapes) {
  FakeClock clock;
  HeldSlots held(clock, /*min_sweep_size=*/1024);
  held.Observe(StateKey{"jobs", "long"}, 2, 60 * kSecond);
  // 5,000 keys each taken and given back, with no scrape in between: the entries at 0 are swept
  // as the map grows, and the key still held is kept.
  for (int i = 0; i < 5000; ++i) {
    const StateKey key{"jobs", "k" + std::to_string(i)};
    held.Observe(key, 1, 60 * kSecond);
    held.Observe(key, 0, 60 * kSecond);
  }
  EXPECT_LE(held.TrackedKeys(), 1024u);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 2}}));
  EXPECT_EQ(held.TrackedKeys(), 1u);
}

TEST(HeldSlotsTest, KeysPastTheirTimeDoNotPileUpBetweenScrapes) {
  FakeClock clock;
  HeldSlots held(clock, /*min_sweep_size=*/1024);
  // Holders that never release: each key is forgotten 10 s after its decision.
  for (int i = 0; i < 5000; ++i) {
    clock.Advance(kSecond / 100);
    held.Observe(StateKey{"jobs", "k" + std::to_string(i)}, 1, 10 * kSecond);
  }
  // 10 s hold 1,000 decisions: what a sweep keeps is at most twice that.
  EXPECT_LE(held.TrackedKeys(), 2048u);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 1000}}));
}

TEST(HeldSlotsTest, AKeyBackFromZeroCountsAgain) {
  FakeClock clock;
  HeldSlots held(clock);
  held.Observe(StateKey{"jobs", "a"}, 2, 60 * kSecond);
  held.Observe(StateKey{"jobs", "a"}, 0, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), Samples{});
  held.Observe(StateKey{"jobs", "a"}, 0, 60 * kSecond);
  EXPECT_EQ(held.TrackedKeys(), 0u);  // a decision at 0 on an unknown key adds nothing
  held.Observe(StateKey{"jobs", "a"}, 4, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 4}}));
}

TEST(HeldSlotsTest, KeepsTheNamesOfLimitsStillHeldOnly) {
  FakeClock clock;
  HeldSlots held(clock, /*min_sweep_size=*/16);
  held.Observe(StateKey{"jobs", "a"}, 2, 60 * kSecond);
  // Inline limits under 500 names, each taken and given back: a sweep drops the names with them.
  // "seats", first seen among them, is kept under a new index.
  for (int i = 0; i < 500; ++i) {
    if (i == 250) held.Observe(StateKey{"seats", "x"}, 7, 60 * kSecond);
    const StateKey key{"inline-" + std::to_string(i), "k", LimitSource::kInline};
    held.Observe(key, 1, 60 * kSecond);
    held.Observe(key, 0, 60 * kSecond);
  }
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 2}, {"seats", 7}}));
  EXPECT_LE(held.TrackedLimitNames(), 64u);
  // Names kept under new indices still count their keys.
  held.Observe(StateKey{"seats", "x"}, 5, 60 * kSecond);
  held.Observe(StateKey{"jobs", "b"}, 1, 60 * kSecond);
  EXPECT_EQ(held.PerLimit(), (Samples{{"jobs", 3}, {"seats", 5}}));
}

}  // namespace
}  // namespace ratelimit
