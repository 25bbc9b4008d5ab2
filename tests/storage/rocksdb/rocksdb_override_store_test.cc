// The overrides of the RocksDB store: set, get, list, delete, the audit history, the version
// counter, and durability across a restart.
#include "storage/rocksdb/rocksdb_override_store.h"

#include "gtest/gtest.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::OpenRocksDbStore;
using ::ratelimit::testing::TempDir;

OverrideTarget Target(absl::string_view name, absl::string_view key, bool pattern = false) {
  return OverrideTarget{LimitSource::kDefined, std::string(name), std::string(key), pattern};
}

// Sets (or, with `remove`, deletes as a tombstone) the override of `t` with capacity `capacity`.
absl::StatusOr<OverrideAuditEntry> Change(OverrideStore& store, const OverrideTarget& t,
                                          double capacity, bool remove = false) {
  return store.Modify(
      t, [&](const std::optional<Override>& current) -> absl::StatusOr<OverrideStore::Change> {
        OverrideStore::Change c;
        if (remove) {
          if (!current) return absl::NotFoundError("none");
          c.record = *current;
          c.record.deleted_at_us = 5;
          c.audit.action = "delete";
          c.audit.before = current;
          return c;
        }
        c.record.target = t;
        c.record.action.capacity = capacity;
        c.record.reason = "test";
        c.audit.action = "set";
        c.audit.before = current;
        c.audit.after = c.record;
        return c;
      });
}

class RocksDbOverrideStoreTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  TempDir dir_;
};

TEST_F(RocksDbOverrideStoreTest, SetGetListDeleteAndTheVersionCounter) {
  auto store = OpenRocksDbStore(dir_.path(), clock_);
  ASSERT_NE(store, nullptr);
  OverrideStore& overrides = *store->overrides();
  EXPECT_EQ(*overrides.Version(), 0u);
  ASSERT_OK(Change(overrides, Target("api", "k1"), 10));
  ASSERT_OK(Change(overrides, Target("api", "trial-*", true), 20));
  ASSERT_OK(Change(overrides, Target("web", "k1"), 30));
  EXPECT_EQ(*overrides.Version(), 3u);

  absl::StatusOr<std::optional<Override>> got = overrides.Get(Target("api", "trial-*", true));
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->action.capacity, 20);
  EXPECT_FALSE(overrides.Get(Target("api", "trial-*"))->has_value())
      << "a key and a pattern of the same bytes are different targets";

  // Replacing one keeps one record per target.
  ASSERT_OK(Change(overrides, Target("api", "k1"), 11));
  absl::StatusOr<OverrideStore::Snapshot> all = overrides.LoadAll();
  ASSERT_OK(all);
  EXPECT_EQ(all->version, 4u);
  ASSERT_EQ(all->overrides.size(), 3u);
  EXPECT_EQ(all->overrides[0].target, Target("api", "k1"));
  EXPECT_EQ(all->overrides[0].action.capacity, 11);

  absl::StatusOr<OverrideAuditEntry> deleted = Change(overrides, Target("web", "k1"), 0, true);
  ASSERT_OK(deleted);
  EXPECT_EQ(deleted->sequence, 5u);
  EXPECT_TRUE((*overrides.Get(Target("web", "k1")))->deleted_at_us.has_value());
  // A refused change writes nothing.
  EXPECT_EQ(Change(overrides, Target("web", "nope"), 0, true).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*overrides.Version(), 5u);
}

TEST_F(RocksDbOverrideStoreTest, AuditIsNewestFirstPagedAndFiltered) {
  auto store = OpenRocksDbStore(dir_.path(), clock_);
  ASSERT_NE(store, nullptr);
  OverrideStore& overrides = *store->overrides();
  for (int i = 0; i < 5; ++i) ASSERT_OK(Change(overrides, Target(i % 2 ? "web" : "api", "k"), i));
  absl::StatusOr<std::vector<OverrideAuditEntry>> page = overrides.ListAudit(0, "", 2);
  ASSERT_OK(page);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].sequence, 5u);
  EXPECT_EQ((*page)[1].sequence, 4u);
  EXPECT_EQ((*page)[1].before->action.capacity, 1) << "before: the override it replaced";
  page = overrides.ListAudit(4, "", 10);
  ASSERT_EQ(page->size(), 3u);
  EXPECT_EQ(page->back().sequence, 1u);
  page = overrides.ListAudit(0, "web", 10);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].after->target.name, "web");
}

TEST_F(RocksDbOverrideStoreTest, OverridesAndAuditSurviveARestart) {
  {
    auto store = OpenRocksDbStore(dir_.path(), clock_);
    ASSERT_NE(store, nullptr);
    ASSERT_OK(Change(*store->overrides(), Target("api", "k1"), 10));
    ASSERT_OK(Change(*store->overrides(), Target("api", "k*", true), 20));
  }
  auto store = OpenRocksDbStore(dir_.path(), clock_);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<OverrideStore::Snapshot> all = store->overrides()->LoadAll();
  ASSERT_OK(all);
  EXPECT_EQ(all->version, 2u);
  EXPECT_EQ(all->overrides.size(), 2u);
  EXPECT_EQ(store->overrides()->ListAudit(0, "", 10)->size(), 2u);
  // The sequence goes on from the last entry.
  EXPECT_EQ(Change(*store->overrides(), Target("api", "k2"), 1)->sequence, 3u);
}

TEST_F(RocksDbOverrideStoreTest, AClosedStoreRefusesWithUnavailable) {
  auto store = OpenRocksDbStore(dir_.path(), clock_);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Close());
  EXPECT_EQ(store->overrides()->Version().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Change(*store->overrides(), Target("api", "k"), 1).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ratelimit
