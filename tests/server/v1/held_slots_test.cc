// The held-slots gauge (server/v1/held_slots.cc): the last count seen per key, summed per limit,
// forgotten at 0 or max_lease_ttl after the last decision.
#include "server/v1/held_slots.h"

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

}  // namespace
}  // namespace ratelimit
