// A copy-on-write map of overrides: a copy shares the original's shards, an edit of the copy
// leaves the original as it was, and the shards follow the size.
#include "storage/overrides/override_map.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

OverrideMap::Record Rec(const std::string& key, double capacity) {
  Override o;
  o.target.name = "api";
  o.target.key = key;
  o.action.capacity = capacity;
  return std::make_shared<const Override>(std::move(o));
}

TEST(OverrideMapTest, AnEditedCopyLeavesTheOriginalAsItWas) {
  std::vector<OverrideMap::Record> records;
  for (int i = 0; i < 1000; ++i) records.push_back(Rec(absl::StrCat("k", i), i));
  const OverrideMap original(records);
  ASSERT_EQ(original.size(), 1000u);
  OverrideMap copy = original;
  OverrideMap::Owned owned;
  copy.Put(Rec("k5", 500), owned);
  copy.Put(Rec("new", 1), owned);
  copy.Put(Rec("k6", 600), owned);  // a second change of the same edit
  copy.Erase("k7", owned);
  copy.Erase("absent", owned);
  EXPECT_EQ(copy.size(), 1000u);
  EXPECT_EQ(copy.Find("k5")->action.capacity, 500);
  EXPECT_EQ(copy.Find("k6")->action.capacity, 600);
  EXPECT_NE(copy.Find("new"), nullptr);
  EXPECT_EQ(copy.Find("k7"), nullptr);
  EXPECT_EQ(original.Find("k5")->action.capacity, 5);
  EXPECT_EQ(original.Find("k6")->action.capacity, 6);
  EXPECT_EQ(original.Find("new"), nullptr);
  EXPECT_EQ(original.Find("k7")->action.capacity, 7);
  EXPECT_EQ(original.size(), 1000u);
  EXPECT_LE(owned.size(), 4u) << "only the shards touched were copied";
}

TEST(OverrideMapTest, GrowsFromEmptyOneChangeAtATime) {
  OverrideMap map;
  for (int i = 0; i < 3000; ++i) {
    OverrideMap::Owned owned;  // one edit per change, as one Apply per change
    map.Put(Rec(absl::StrCat("k", i), i), owned);
    map.Rebalance();
  }
  ASSERT_EQ(map.size(), 3000u);
  size_t seen = 0;
  map.ForEach([&](const Override& o) {
    ++seen;
    EXPECT_EQ(map.Find(o.target.key), &o);
  });
  EXPECT_EQ(seen, 3000u);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(map.Find(absl::StrCat("k", i))->action.capacity, i);
}

}  // namespace
}  // namespace ratelimit
