// A new version of the index made from the previous one by the changes (OverrideIndex::Apply)
// answers every lookup exactly as an index built from scratch of the same records, and leaves the
// version it was made from unchanged.
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/overrides/override_codec.h"
#include "storage/overrides/override_index.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::TokenBucket;

constexpr int64_t kT0 = 1700000000LL * kSecond;

struct Limit {
  LimitSource source;
  const char* name;
};
constexpr Limit kLimits[] = {
    {LimitSource::kDefined, "api"}, {LimitSource::kDefined, "web"}, {LimitSource::kEnvoy, "api"}};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  int Below(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  // A key of up to 4 bytes of "ab-".
  std::string Key() {
    std::string k;
    for (int n = Below(5); n > 0; --n) k.push_back("ab-"[Below(3)]);
    return k;
  }
  // A pattern of up to 6 bytes of "ab-*" with 1 to 3 '*'.
  std::string Pattern() {
    std::string p = Key();
    for (int stars = 1 + Below(3); stars > 0; --stars) {
      p.insert(p.begin() + Below(static_cast<int>(p.size()) + 1), '*');
    }
    return p;
  }
  OverrideTarget Target() {
    const Limit& l = kLimits[Below(3)];
    const bool pattern = Below(2) == 1;
    return {l.source, l.name, pattern ? Pattern() : Key(), pattern};
  }
  OverrideAction Action() {
    OverrideAction a;
    switch (Below(5)) {
      case 0:
        a.effect = OverrideAction::Effect::kUnlimited;
        break;
      case 1:
        a.effect = OverrideAction::Effect::kBlocked;
        break;
      case 2:
        a.rate = 1 + Below(20);
        [[fallthrough]];
      default:
        a.capacity = Below(100);  // 0 included
    }
    return a;
  }
  Override Record(const OverrideTarget& t) {
    Override o;
    o.target = t;
    o.action = Action();
    o.set_at_us = kT0 + Below(100);
    if (Below(3) == 0) o.expires_at_us = o.set_at_us + 1 + Below(200);
    if (Below(2) == 0) o.replaced = Action();
    if (Below(4) == 0) o.deleted_at_us = o.set_at_us + Below(150);
    o.reason = std::to_string(Below(1000));
    return o;
  }

 private:
  std::mt19937 rng_;
};

std::vector<Override> Values(const std::map<std::string, Override>& records) {
  std::vector<Override> out;
  for (const auto& [key, o] : records) out.push_back(o);
  return out;
}

// Every key of up to 4 bytes of "ab-" (121 of them).
std::vector<std::string> AllKeys() {
  std::vector<std::string> keys = {""};
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].size() == 4) continue;
    for (char c : {'a', 'b', '-'}) keys.push_back(keys[i] + c);
  }
  return keys;
}

// Fails when `got` answers any lookup otherwise than `want`.
void ExpectSameAnswers(const OverrideIndex& got, const OverrideIndex& want,
                       const std::vector<std::string>& keys, const std::string& where) {
  EXPECT_EQ(got.size(), want.size()) << where;
  EXPECT_EQ(got.empty(), want.empty()) << where;
  ASSERT_EQ(got.All(), want.All()) << where;
  for (const Limit& l : kLimits) {
    for (const std::string& key : keys) {
      for (int64_t now : {kT0 - 1, kT0 + 50, kT0 + 120, kT0 + 400}) {
        LimitConfig a = TokenBucket(10, kSecond), b = a;
        const Override* x = got.Adjust(l.source, l.name, key, now, a);
        const Override* y = want.Adjust(l.source, l.name, key, now, b);
        ASSERT_EQ(x == nullptr, y == nullptr) << where << " key " << key << " now " << now;
        if (x != nullptr) {
          ASSERT_EQ(*x, *y) << where << " key " << key;
        }
        ASSERT_EQ(a, b) << where << " key " << key << " now " << now;
      }
    }
  }
}

TEST(OverrideIndexApplyTest, AnySequenceOfChangesAnswersAsAnIndexBuiltFromScratch) {
  const std::vector<std::string> keys = AllKeys();
  for (uint32_t seed : {1u, 2u, 3u}) {
    Generator gen(seed);
    std::map<std::string, Override> records;  // by encoded target: what the store holds
    std::vector<OverrideTarget> seen;
    std::shared_ptr<const OverrideIndex> index = OverrideIndex::Build({}, 0);
    for (uint64_t version = 1; version <= 400; ++version) {
      // A batch of changes: mostly one, sometimes many (a replica catching up).
      const int n = gen.Below(8) == 0 ? 1 + gen.Below(60) : 1;
      std::map<std::string, OverrideStore::ChangedTarget> batch;
      std::vector<std::string> order;  // each target once, at its latest change
      for (int i = 0; i < n; ++i) {
        OverrideTarget t = !seen.empty() && gen.Below(2) == 0
                               ? seen[gen.Below(static_cast<int>(seen.size()))]
                               : gen.Target();
        seen.push_back(t);
        const std::string k = EncodeOverrideKey(t);
        OverrideStore::ChangedTarget c{version, t, std::nullopt};
        if (gen.Below(10) != 0) c.record = gen.Record(t);  // else removed
        std::erase(order, k);
        order.push_back(k);
        batch[k] = c;
      }
      std::vector<OverrideStore::ChangedTarget> changed;
      for (const std::string& k : order) {
        changed.push_back(batch[k]);
        if (batch[k].record) {
          records.insert_or_assign(k, *batch[k].record);
        } else {
          records.erase(k);
        }
      }
      const std::shared_ptr<const OverrideIndex> previous = index;
      const std::vector<Override> previous_all =
          version % 25 == 0 ? previous->All() : std::vector<Override>();
      index = index->Apply(changed, version);
      ASSERT_EQ(index->version(), version);
      if (version % 25 == 0) {
        EXPECT_EQ(previous->All(), previous_all) << "the version applied to is unchanged";
        ExpectSameAnswers(*index, *OverrideIndex::Build(Values(records), version), keys,
                          "seed " + std::to_string(seed) + " version " + std::to_string(version));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    EXPECT_GT(index->size(), 300u) << "enough patterns to compact the recent ones several times";
  }
}

TEST(OverrideIndexApplyTest, RemovingEveryOverrideOfALimitLeavesTheIndexEmpty) {
  Override o;
  o.target = {LimitSource::kDefined, "api", "trial-*", true};
  o.action.capacity = 5;
  o.set_at_us = kT0;
  auto index = OverrideIndex::Build({o}, 1);
  ASSERT_FALSE(index->empty());
  const std::vector<OverrideStore::ChangedTarget> removed = {{2, o.target, std::nullopt}};
  index = index->Apply(removed, 2);
  EXPECT_TRUE(index->empty());
  EXPECT_EQ(index->size(), 0u);
  LimitConfig c = TokenBucket(10, kSecond);
  EXPECT_EQ(index->Adjust("api", "trial-1", kT0 + 1, c), nullptr);
  // Set again: it applies again.
  const std::vector<OverrideStore::ChangedTarget> set = {{3, o.target, o}};
  index = index->Apply(set, 3);
  ASSERT_NE(index->Adjust("api", "trial-1", kT0 + 1, c), nullptr);
  EXPECT_EQ(c.EffectiveCapacity(), 5);
}

}  // namespace
}  // namespace ratelimit
